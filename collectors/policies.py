"""Policies choose actions: given the task, the history and the observation, an action.

- ``ScriptedPolicy`` replays a task's ``actions`` (deterministic; tests and replays).
- ``ExplorationPolicy`` takes seeded random but plausible actions per domain, covering the
  state space cheaply, from the explorer the domain's spec names (``collectors.explore``:
  shell commands over the files it has seen; file views, searches, edits and test runs in SWE).
- ``OpenAIChatPolicy`` asks any OpenAI-compatible chat endpoint (vLLM, SGLang, hosted), with
  the domain's actions as tools, retrying with backoff (``llm.chat.AsyncChat``); the model
  goes into provenance, each call's tokens, latency and retries into the step's record.
A policy returns ``None`` to stop.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from dataclasses import dataclass
from typing import Any

from collectors.actions import ActionSpace
from collectors.env import Task
from llm.chat import AsyncChat
from schemas.domains import domain
from schemas.errors import ConfigError
from schemas.transition import Observation


class Policy:
    name = "policy"
    model: str | None = None

    def reset(self, task: Task, seed: int) -> None:
        self.task, self.seed, self.steps = task, seed, 0

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        raise NotImplementedError

    async def act_async(self, observation: Observation | None, history: list[tuple[Any, Observation]]) -> Any:
        """What the episode runner calls; a policy that waits on a model overrides it."""
        return self.act(observation, history)

    #: whether the first ``act`` may run before the environment's first observation exists
    overlap_start = False
    #: the model calls of the episode (one per step) and the one that ended it, when there is a model
    calls: list[dict[str, Any]] = []  # noqa: RUF012  (read-only default: no calls)
    final_call: dict[str, Any] | None = None


class ScriptedPolicy(Policy):
    name = "scripted"

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        if self.steps >= len(self.task.actions):
            return None
        self.steps += 1
        return self.task.actions[self.steps - 1]


class ExplorationPolicy(Policy):
    """Each domain's explorer (its spec's ``explorer``: ``collectors.explore``), seeded per episode."""

    name = "exploration"

    def __init__(self, max_steps: int = 12) -> None:
        self.max_steps = max_steps

    def reset(self, task: Task, seed: int) -> None:
        super().reset(task, seed)
        self.rng = random.Random(seed)
        self.explorer = domain(task.domain).explorer_class()(self.rng)

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        self.steps += 1
        return self.explorer.act(observation, self.steps, self.max_steps)


class OpenAIChatPolicy(Policy):
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint with the actions as tools.

    ``act_async`` is what the episode runner calls: many episodes share one ``AsyncChat``
    (one connection pool per process). Each call's cost goes into ``calls`` (tokens,
    latency, retries, and which view of the history the model saw); the final answer's
    call, which makes no step, is ``final_call``.

    ``history`` is the view of the past turns the model is sent (transitions always keep
    the full truth): ``{view: all}``; ``{view: last, turns: N}``; ``{view: tokens, budget:
    N}`` (the newest turns that fit N tokens, at 4 characters a token, the oldest dropped);
    ``{view: summary, turns: N}`` (the last N turns, the older ones replaced by a summary
    that the same model writes, extended as more turns drop out).

    ``overlap_start``: the first call goes out with the instruction alone while the
    sandbox starts, and the model first sees the environment in the first tool result
    (default: for terminal tasks, whose first screen is an empty prompt).
    """

    name = "openai-chat"

    def __init__(
        self,
        action_space: ActionSpace,
        *,
        model: str,
        base_url: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 512,
        retries: int = 4,
        timeout_s: float = 60.0,
        max_steps: int = 30,
        history: dict[str, Any] | None = None,
        overlap_start: bool | None = None,
        max_connections: int = 64,
        chat: AsyncChat | None = None,
    ) -> None:
        self.space, self.model, self.base_url = action_space, model, base_url.rstrip("/")
        self.api_key = os.environ.get(api_key_env, "")
        self.temperature, self.max_tokens, self.retries, self.timeout_s = temperature, max_tokens, retries, timeout_s
        self.max_steps = max_steps
        self.view = HistoryView.of(history)
        self._overlap = overlap_start
        self.max_connections = max_connections
        self.chat = chat

    @property
    def overlap_start(self) -> bool:
        return self._overlap if self._overlap is not None else self.task.domain == "terminal"

    def reset(self, task: Task, seed: int) -> None:
        super().reset(task, seed)
        system = (
            f"You are an agent acting in a {task.domain} environment. Use exactly one tool call per turn.\n"
            f"Actions:\n{self.space.describe()}"
        )
        self.head: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": task.instruction}]
        self.turns: list[list[dict[str, Any]]] = []  # [assistant, tool] pairs, oldest first
        self.summary: tuple[int, str] = (0, "")  # how many of the oldest turns it covers, and its text
        self.calls: list[dict[str, Any]] = []
        self.final_call: dict[str, Any] | None = None
        self._pending: dict[str, Any] | None = None

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        """The blocking form (one call on a short-lived client): ``act_async`` is the runner's."""

        async def once() -> Any:
            chat, self.chat = self.chat, None
            try:
                return await self.act_async(observation, history)
            finally:
                if self.chat is not None:
                    await self.chat.aclose()
                self.chat = chat

        return asyncio.run(once())

    def _client(self) -> AsyncChat:
        if self.chat is None:
            self.chat = AsyncChat(
                self.base_url,
                api_key=self.api_key,
                retries=self.retries,
                timeout_s=self.timeout_s,
                max_connections=self.max_connections,
            )
        return self.chat

    async def act_async(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        self.steps += 1
        if self.steps > self.max_steps:
            return None
        if self._pending is not None:  # the previous call's tool result: what its action produced
            self.turns.append([self._pending, {"role": "tool", "tool_call_id": self._call_id, "content": observation.text}])
            self._pending = None
        elif observation is not None and not self.overlap_start:
            self.head[-1] = {"role": "user", "content": f"{self.task.instruction}\n\nCurrent observation:\n{observation.text}"}
        messages, shown, summary_cost = await self._messages()
        reply = await self._client().complete(
            {
                "model": self.model,
                "messages": messages,
                "tools": self.space.tools(),
                "temperature": self.temperature,
                "max_tokens": self.max_tokens,
                "seed": self.seed,
            }
        )
        cost = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "latency_ms": round(reply.latency_ms, 1),
            "retries": reply.retries,
            "view": self.view.label,
            "turns_shown": shown,
            "turns_total": len(self.turns),
            **summary_cost,
        }
        message = reply.message
        calls = message.get("tool_calls") or []
        if not calls:  # a text answer ends the episode; the text itself is no action
            self.final_call = cost
            return None
        self.calls.append(cost)
        call = calls[0]
        self._call_id = call.get("id") or f"call-{self.steps}"
        self._pending = {"role": "assistant", "content": message.get("content"), "tool_calls": [call]}
        function = call.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError:
            return function.get("arguments")  # malformed: recorded as an action_error
        return {"action": function.get("name"), **(args if isinstance(args, dict) else {"args": args})}

    async def _messages(self) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
        """The messages this call sends, how many turns they show, and a summary's cost."""
        turns = self.turns
        view = self.view
        if view.kind == "all":
            kept = turns
        elif view.kind in ("last", "summary"):
            kept = turns[-view.turns :] if view.turns else []
        else:
            kept, used = [], 0
            for turn in reversed(turns):
                size = _tokens(turn)
                if used + size > view.budget:
                    break
                kept.insert(0, turn)
                used += size
        dropped = len(turns) - len(kept)
        extra: list[dict[str, Any]] = []
        cost: dict[str, Any] = {}
        if view.kind == "summary" and dropped:
            cost = await self._summarise(dropped)
            extra = [{"role": "user", "content": f"Summary of the earlier steps:\n{self.summary[1]}"}]
        return [*self.head, *extra, *(m for turn in kept for m in turn)], len(kept), cost

    async def _summarise(self, dropped: int) -> dict[str, Any]:
        """Extend the summary over the turns that have dropped out of the view since."""
        covered, text = self.summary
        if covered >= dropped:
            return {}
        lines = [
            f"{m['role']}: {m.get('content') or json.dumps(m.get('tool_calls'))}" for t in self.turns[covered:dropped] for m in t
        ]
        prompt = (
            "Summarise these steps of an agent's episode in a few lines: what it did and what it learned.\n"
            + (f"The summary so far:\n{text}\n" if text else "")
            + "New steps:\n"
            + "\n".join(lines)
        )
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": self.max_tokens}
        reply = await self._client().complete(body)
        self.summary = (dropped, str(reply.message.get("content") or ""))
        return {"summary_prompt_tokens": reply.prompt_tokens, "summary_completion_tokens": reply.completion_tokens}


@dataclass(frozen=True)
class HistoryView:
    """Which part of the history the policy model is sent (see ``OpenAIChatPolicy``)."""

    kind: str = "all"
    turns: int = 0
    budget: int = 0

    @classmethod
    def of(cls, config: dict[str, Any] | None) -> HistoryView:
        config = dict(config or {})
        kind = config.pop("view", "all")
        if kind == "all" and not config:
            return cls()
        if kind in ("last", "summary") and set(config) == {"turns"} and _count(config["turns"]):
            return cls(kind, turns=config["turns"])
        if kind == "tokens" and set(config) == {"budget"} and _count(config["budget"]):
            return cls(kind, budget=config["budget"])
        raise ConfigError(
            f"policy.history: expected {{view: all}}, {{view: last, turns: N}}, {{view: tokens, budget: N}} "
            f"or {{view: summary, turns: N}}, got {dict(config, view=kind)!r}"
        )

    @property
    def label(self) -> str:
        return {"all": "all", "last": f"last:{self.turns}", "tokens": f"tokens:{self.budget}"}.get(
            self.kind, f"summary:{self.turns}"
        )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tokens(turn: list[dict[str, Any]]) -> int:
    """A turn's size in tokens, estimated at 4 characters a token (no tokenizer needed)."""
    return sum(len(m.get("content") or "") + len(json.dumps(m.get("tool_calls") or "")) for m in turn) // 4 + 1


def make_policy(config: dict[str, Any], action_space: ActionSpace) -> Policy:
    kind = config.get("kind", "scripted")
    options = {k: v for k, v in config.items() if k != "kind"}
    if kind == "scripted":
        return ScriptedPolicy()
    if kind == "exploration":
        return ExplorationPolicy(**options)
    if kind == "openai":
        return OpenAIChatPolicy(action_space, **options)
    raise ConfigError(f"policy.kind: unknown policy {kind!r} (expected scripted, exploration or openai)")
