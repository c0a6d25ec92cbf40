"""Cross-cutting behaviour around any environment: step and wall-time limits, recording.

``Recorder`` turns each step into a ``Transition`` (state = the observation before the
action, next_state = the one after) with timings and provenance; it never changes what the
environment does.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from collectors.env import Environment, Task
from schemas.transition import Observation, Provenance, Transition


class Wrapper:
    """Passes everything to the wrapped environment unless overridden."""

    def __init__(self, env: Environment | Wrapper) -> None:
        self.env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    @property
    def unwrapped(self) -> Environment:
        """The innermost environment, under every wrapper (as Gymnasium's ``Wrapper.unwrapped``)."""
        return self.env.unwrapped

    def reset(self, *, seed: int | None = None, task: Task | None = None) -> tuple[Observation, dict[str, Any]]:
        return self.env.reset(seed=seed, task=task)

    def step(self, action: Any) -> tuple[Observation, float | None, bool, bool, dict[str, Any]]:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()


class _Limit(Wrapper):
    """Truncate the episode once ``_spent`` says the budget is used up (unless it ended);
    ``info["truncated_by"]`` names the limit."""

    reason = ""

    def _start(self) -> None:
        """The budget starts again (at reset)."""

    def _spent(self) -> bool:
        """Called once after every step."""
        raise NotImplementedError

    def reset(self, **kw: Any) -> tuple[Observation, dict[str, Any]]:
        self._start()
        return self.env.reset(**kw)

    def step(self, action: Any) -> tuple[Observation, float | None, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._spent() and not terminated:
            truncated = True
            info["truncated_by"] = self.reason
        return obs, reward, terminated, truncated, info


class StepLimit(_Limit):
    """Truncate the episode after ``max_steps`` steps (what Gymnasium calls ``TimeLimit``)."""

    reason = "step_limit"

    def __init__(self, env: Environment | Wrapper, max_steps: int) -> None:
        super().__init__(env)
        self.max_steps = max_steps
        self.steps = 0

    def _start(self) -> None:
        self.steps = 0

    def _spent(self) -> bool:
        self.steps += 1
        return self.steps >= self.max_steps


class WallTimeLimit(_Limit):
    """Truncate the episode once ``max_seconds`` of wall time have passed since reset.

    Wall-clock seconds, not steps: Gymnasium's ``TimeLimit`` counts steps (our ``StepLimit``).
    """

    reason = "time_limit"

    def __init__(self, env: Environment | Wrapper, max_seconds: float) -> None:
        super().__init__(env)
        self.max_seconds = max_seconds
        self.started = 0.0

    def _start(self) -> None:
        self.started = time.monotonic()

    def _spent(self) -> bool:
        return time.monotonic() - self.started >= self.max_seconds


class Recorder(Wrapper):
    """Record every step of an episode as a ``Transition``."""

    def __init__(self, env: Environment | Wrapper, *, trajectory_id: str, provenance: Provenance) -> None:
        super().__init__(env)
        self.trajectory_id = trajectory_id
        self.provenance = provenance
        self.transitions: list[Transition] = []
        self._obs: Observation | None = None
        self._task: Task | None = None

    def reset(self, *, seed: int | None = None, task: Task | None = None) -> tuple[Observation, dict[str, Any]]:
        self.transitions = []
        self._task = task
        self._obs, info = self.env.reset(seed=seed, task=task)
        if info.get("provenance"):  # what only a started environment knows (a server's version)
            self.provenance = replace(self.provenance, **info["provenance"])
        return self._obs, info

    def step(self, action: Any) -> tuple[Observation, float | None, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        task = self._task
        self.transitions.append(
            Transition.create(
                trajectory_id=self.trajectory_id,
                step=len(self.transitions),
                domain=self.env.domain,
                env_id=self.env.env_id,
                task_id=task.id if task else "none",
                instruction=task.instruction if task else None,
                state=self._obs,
                action=info["action"],
                next_state=obs,
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                action_error=info.get("action_error"),
                action_ms=round(info.get("action_ms", 0.0), 3),
                observe_ms=round(info.get("observe_ms", 0.0), 3),
                settle_ms=round(info.get("settle_ms", 0.0), 3),
                provenance=replace(self.provenance, collected_at=datetime.now(UTC)),
            )
        )
        self._obs = obs
        return obs, reward, terminated, truncated, info

    def end_truncated(self) -> None:
        """Mark the last step truncated (the policy stopped before the episode ended)."""
        if self.transitions and not (self.transitions[-1].terminated or self.transitions[-1].truncated):
            self.transitions[-1] = replace(self.transitions[-1], truncated=True)
