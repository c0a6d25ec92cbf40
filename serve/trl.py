"""trajforge environments for TRL's ``GRPOTrainer(environment_factory=...)``.

    factory = environment_factory("terminal", url="http://127.0.0.1:8000")      # over a server
    factory = environment_factory("terminal", served=Served(job, tasks, store=...))  # in-process
    trainer = GRPOTrainer(model=..., reward_funcs=[], train_dataset=ds, environment_factory=factory)

The trainer makes one environment per rollout, calls ``reset(**row)`` with the dataset row
(``task_id`` picks the task, else ``seed``; the return value, the task's instruction and
first observation, is appended to the prompt), offers the domain's actions as tools (one
typed public method per action kind, with the action space's own argument types and
descriptions) and scores the rollout with ``get_reward()``: the task's check, after the
episode is ended (``end_episode``). Every step is recorded as in any served session, with
the policy named ``policy`` (default ``trl-grpo``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import keyword
import typing
from collections.abc import Callable
from typing import Any

from collectors.actions import _plain
from schemas.domains import domain as domain_spec
from serve.session import END_EPISODE, Served

MAX_CHARS = 8000  # of an observation returned to the model as a tool result


class _Remote:
    """A session on a ``trajforge serve`` server, through openenv-core's client."""

    def __init__(self, url: str, token: str | None) -> None:
        from serve.client import TrajforgeClient

        self.client = TrajforgeClient(url, token=token).sync()

    def reset(self, **kw: Any) -> dict[str, Any]:
        r = self.client.reset(**kw)
        return {**r.observation, "reward": r.reward, "done": r.done}

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        r = self.client.step(action)
        return {**r.observation, "reward": r.reward, "done": r.done}

    def close(self) -> None:
        self.client.close()


class _Local:
    """A session of an in-process ``Served``."""

    def __init__(self, served: Served) -> None:
        self.session = served.open_session()

    def reset(self, **kw: Any) -> dict[str, Any]:
        obs, _ = self.session.reset(**kw)
        task = self.session.episode.task
        return {"text": obs.text, "instruction": task.instruction, "action_error": None, "reward": None, "done": False}

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        obs, reward, terminated, truncated, info = self.session.step(action)
        return {"text": obs.text, "action_error": info.get("action_error"), "reward": reward, "done": terminated or truncated}

    def close(self) -> None:
        self.session.close()


class TrajforgeToolEnv:
    """Base of the per-domain environment classes ``environment_factory`` makes."""

    domain: str = ""

    def __init__(self, connect: Callable[[], Any], policy: str) -> None:
        self._connect, self._policy = connect, policy
        self._backend: Any = None
        self._done = True
        self._reward: float | None = None
        self.steps = 0

    def reset(self, **row: Any) -> str:
        if self._backend is None:
            self._backend = self._connect()
        elif not self._done:
            self._backend.step({"action": END_EPISODE})
        task_id, seed = row.get("task_id"), row.get("seed")
        first = self._backend.reset(policy=self._policy, **({"task_id": task_id} if task_id else {"seed": seed}))
        self._done, self._reward, self.steps = False, None, 0
        return f"{first.get('instruction') or ''}\n\n{first['text']}"[-MAX_CHARS:]

    def get_reward(self) -> float:
        """The task's check on the episode as it stands (the episode ends here)."""
        if not self._done:
            r = self._backend.step({"action": END_EPISODE})
            self._done, self._reward = True, r["reward"]
        return float(self._reward or 0.0)

    def _act(self, action: dict[str, Any], optional: tuple[str, ...] = ()) -> str:
        action = {k: v for k, v in action.items() if v is not None or k not in optional}  # unset: the action's default
        if self._done:
            return "The episode is over."
        r = self._backend.step(action)
        self.steps += 1
        if r["done"]:
            self._done, self._reward = True, r["reward"]
        text = r["text"][-MAX_CHARS:]
        return f"{text}\n[action error: {r['action_error']}]" if r.get("action_error") else text

    def _close(self) -> None:  # private: every public method is a tool to the trainer
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def __del__(self) -> None:  # the trainer drops its environments without closing them
        with contextlib.suppress(Exception):
            self._close()


def environment_class(domain: str) -> type[TrajforgeToolEnv]:
    """A class with one tool method per action of ``domain``: typed parameters from the
    action's fields, a docstring transformers' ``get_json_schema`` reads."""
    methods: dict[str, Any] = {"domain": domain, "__module__": __name__}
    for kind, cls in domain_spec(domain).action_space().actions.items():
        if kind in ("reset", "get_reward") or not kind.isidentifier() or keyword.iskeyword(kind):
            continue
        methods[kind] = _tool(kind, cls)
    return type(f"Trajforge{domain.title()}Env", (TrajforgeToolEnv,), methods)


def _tool(kind: str, cls: type) -> Callable[..., str]:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    namespace: dict[str, Any] = {}
    params, args, docs, optional = ["self"], [], [], []
    for i, f in enumerate(fields):
        namespace[f"T{i}"] = _plain(hints[f.name])
        if f.default is not dataclasses.MISSING:
            namespace[f"D{i}"] = f.default
            params.append(f"{f.name}: T{i} = D{i}")
            optional.append(f.name)
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"D{i}"] = None
            params.append(f"{f.name}: T{i} | None = D{i}")
            optional.append(f.name)
        else:
            params.append(f"{f.name}: T{i}")
        args.append(f"{f.name!r}: {f.name}")
        docs.append(f"            {f.name}: the {f.name} of the {kind} action.")
    doc = " ".join((cls.__doc__ or kind).split())
    source = (
        f"def {kind}({', '.join(params)}) -> str:\n"
        f'    """{doc}\n\n        Args:\n' + "\n".join(docs) + '\n    """\n'
        f"    return self._act({{'action': {kind!r}, " + ", ".join(args) + f"}}, {tuple(optional)!r})\n"
    )
    if not fields:
        source = source.replace("        Args:\n\n", "")
    exec(compile(source, f"<trajforge {kind} tool>", "exec"), namespace)  # a real function: TRL reads its signature
    return namespace[kind]


def environment_factory(
    domain: str, *, url: str | None = None, token: str | None = None, served: Served | None = None, policy: str = "trl-grpo"
) -> Callable[[], TrajforgeToolEnv]:
    """What ``GRPOTrainer(environment_factory=...)`` takes: each call a new environment of
    ``domain``, on the server at ``url`` or in-process on ``served`` (one of the two)."""
    if (url is None) == (served is None):
        raise ValueError("environment_factory: give url (a trajforge serve server) or served (in-process), not both")
    cls = environment_class(domain)
    connect = (lambda: _Remote(url, token)) if url is not None else (lambda: _Local(served))
    return lambda: cls(connect, policy)
