"""``SimEnv``: an environment of the shared protocol, for any domain, whose ``step`` asks a
world model for the next observation.

The prompt is the SFT sample's prompt, built by the release's own code
(``pipelines.release.samples.prompts``: the domain's system prompt, the task and the state
the kept history starts from, one assistant turn per earlier observation, the history
budget), so a model trained by trajforge plugs in without glue. The reply must hold one
closed ``<predicted_observation>`` block (valid JSON where the format is JSON, by the
eval's own format gate); a malformed one is asked again ``retries`` times at
``retry_temperature``, then the step raises ``SimulationError``: the episode fails and the
job's ledger records why, and no made-up observation is ever accepted.

The initial observation comes from the real environment's reset of the task (``reset:
real``) or from the first state of a recorded trajectory of the task (``reset: recorded``).
Actions are parsed by the domain's own action space, so a bad action is an
``action_error`` exactly as in the real environment; the domain's spec (``schemas.domains``)
gives the usual observation format and the actions that end an episode.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections.abc import Callable
from typing import Any

from collectors.actions import ActionSpec
from collectors.env import EnvError, Environment, Task
from pipelines.release.samples import CLOSE, OPEN, Trajectory, prompts
from pipelines.release.tokens import PieceCounts
from schemas.domains import DomainSpec
from schemas.domains import domain as spec_of
from schemas.transition import Observation, Provenance, Transition, canonical_json
from schemas.volatile import detect_spans
from simulate.backends import Backend, backend_for
from simulate.config import SimSection


class SimulationError(EnvError):
    """The world model gave no well-formed prediction within its retries."""


def malformed(completion: str, fmt: str) -> str | None:
    """Why a completion is not a usable prediction (None when it is): the eval's format gate."""
    from training.metrics import parse_completion

    if parse_completion(completion, fmt) is not None:
        return None
    if completion.count(OPEN) != 1 or completion.count(CLOSE) != 1 or completion.find(CLOSE) < completion.find(OPEN):
        return f"no single closed {OPEN} block"
    return "not valid JSON"


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=4).digest(), "big")


_COUNTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # backend -> its piece counts, shared by its SimEnvs


class SimEnv(Environment):
    """A world model standing in for the ``domain`` environment ``env_id``.

    ``real`` makes the real environment (for ``reset: real``); ``initial`` may give the
    initial observation instead (task, seed) -> Observation, e.g. from a recorded trajectory."""

    sandbox_backend = "sim"
    simulated = True

    def __init__(
        self,
        domain: str,
        options: SimSection,
        env_id: str = "default",
        *,
        real: Callable[[], Environment] | None = None,
        initial: Callable[[Task | None, int | None], Observation] | None = None,
        backend: Backend | None = None,
    ) -> None:
        super().__init__(env_id)
        self.spec: DomainSpec = spec_of(domain)  # its action space, usual format and end actions
        self.domain, self.options = domain, options
        self.backend = backend or backend_for(options)
        if self.backend not in _COUNTS:
            _COUNTS[self.backend] = PieceCounts(self.backend.counter())
        self.tokens = _COUNTS[self.backend]
        self.format = options.format or self.spec.format
        self.real_factory, self.initial, self.real_env = real, initial, None
        self.history: list[Transition] = []
        self.seed = 0

    # -- reset ----------------------------------------------------------------------------------
    def _initial(self, seed: int | None, task: Task | None) -> Observation:
        if self.initial is not None:
            return self.initial(task, seed)
        if self.options.reset == "recorded":
            return recorded_first_state(self.options.recorded or "", self.domain, task)
        if self.real_factory is None:
            raise EnvError(f"sim {self.domain}: reset: real needs the real environment (or give reset: recorded)")
        if self.real_env is None or self.real_env.closed:
            self.real_env = self.real_factory()
        obs, _ = self.real_env.reset(seed=seed, task=task)
        return obs

    def _reset(self, seed: int | None, task: Task | None) -> tuple[Observation, dict[str, Any]]:
        t0 = time.perf_counter()
        obs = self._initial(seed, task)
        self.history, self.seed = [], seed or 0
        simulator = {
            "model": self.backend.model_id,
            "backend": self.options.base_url or "transformers",
            "sampling": self.options.sampling(),
        }
        provenance = {
            "simulated": True,
            "origin": "simulated",
            "executed": "not_executed",
            "sandbox_backend": "sim",
            "image_digest": None,
            "extra": canonical_json({"simulator": simulator}),
        }
        return obs, {"reset_ms": (time.perf_counter() - t0) * 1000, "provenance": provenance}

    # -- step -----------------------------------------------------------------------------------
    def _transition(self, action: ActionSpec, next_state: Observation) -> Transition:
        """This step as a record (for the prompt's history; the job's Recorder writes its own)."""
        task = self.task
        return Transition.create(
            trajectory_id="sim",
            step=len(self.history),
            domain=self.domain,
            env_id=self.env_id,
            task_id=task.id if task else "none",
            instruction=task.instruction if task else None,
            state=self.observation,
            action=action.to_action(),
            next_state=next_state,
            provenance=Provenance(run_id="sim"),
        )

    def prompt(self, action: ActionSpec) -> tuple[list[dict[str, str]], int]:
        """The SFT prompt of the next step (messages, prompt tokens), by the release's code."""
        step = self._transition(action, Observation(""))
        steps = [*self.history, step]
        traj = Trajectory(steps, frozenset(t.transition_id for t in self.history), "sim", {})
        (item,) = prompts(traj, self.tokens, self.options.max_prompt_tokens)
        return item["messages"], item["prompt_tokens"]

    def _step(self, action: ActionSpec) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        from training.metrics import parse_completion

        o = self.options
        messages, _ = self.prompt(action)
        t0 = time.perf_counter()
        problems, prompt_tokens, completion_tokens = [], 0, 0
        for attempt in range(o.retries + 1):
            c = self.backend.complete(
                messages,
                temperature=o.temperature if attempt == 0 else o.retry_temperature,
                top_p=o.top_p,
                max_new_tokens=o.max_new_tokens,
                seed=_seed(self.seed, len(self.history), attempt),
            )
            prompt_tokens, completion_tokens = prompt_tokens + c.prompt_tokens, completion_tokens + c.completion_tokens
            problem = malformed(c.text, self.format)
            if problem is None:
                break
            problems.append(problem)
        else:
            raise SimulationError(
                f"sim {self.domain} step {len(self.history)}: malformed prediction after {o.retries + 1} tries "
                f"({problems[-1]}): {c.text[:120]!r}"
            )
        text = parse_completion(c.text, self.format) or ""
        obs = Observation.make(text, self.format, spans=detect_spans(text), extra={"simulated": True, "attempts": attempt + 1})
        record = self._transition(action, obs)
        self.history.append(record)
        info = {
            "action_ms": (time.perf_counter() - t0) * 1000,
            "sim": {"attempts": attempt + 1, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }
        return obs, None, action.kind in self.spec.end_actions, info

    def check_task(self, task: Task) -> tuple[float | None, str]:
        """A simulated world has no state to check: no reward."""
        return None, "simulated: no check"

    def _close(self) -> None:
        if self.real_env is not None:
            self.real_env.close()


def recorded_first_state(store: str, domain: str, task: Task | None) -> Observation:
    """The first state of a real recorded trajectory of this task (the first by trajectory id)."""
    from pipelines.store import Store, read_shard
    from schemas.arrow import from_record_batch

    if task is None:
        raise EnvError("sim: reset: recorded needs a task")
    best: tuple[str, Observation] | None = None
    s = Store(store)
    for shard in s.readable_shards("raw"):
        if f"/raw/{domain}/" not in shard.path.replace("\\", "/"):
            continue
        for batch in read_shard(s.sfs, shard.path):
            for t in from_record_batch(batch):
                real_first = t.step == 0 and t.task_id == task.id and not t.provenance.simulated
                if real_first and (best is None or t.trajectory_id < best[0]):
                    best = (t.trajectory_id, t.state)
    if best is None:
        raise EnvError(f"sim: {store}: no recorded real trajectory of task {task.id!r} to reset from")
    return best[1]
