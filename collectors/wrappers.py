"""Cross-cutting behaviour around any environment: step and time limits, recording.

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

    def reset(self, *, seed: int | None = None, task: Task | None = None) -> tuple[Observation, dict[str, Any]]:
        return self.env.reset(seed=seed, task=task)

    def step(self, action: Any) -> tuple[Observation, float | None, bool, bool, dict[str, Any]]:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()


class StepLimit(Wrapper):
    """Truncate the episode after ``max_steps`` steps."""

    def __init__(self, env: Environment | Wrapper, max_steps: int) -> None:
        super().__init__(env)
        self.max_steps = max_steps
        self.steps = 0

    def reset(self, **kw: Any) -> tuple[Observation, dict[str, Any]]:
        self.steps = 0
        return self.env.reset(**kw)

    def step(self, action: Any) -> tuple[Observation, float | None, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps >= self.max_steps and not terminated:
            truncated = True
            info["truncated_by"] = "step_limit"
        return obs, reward, terminated, truncated, info


class TimeLimit(Wrapper):
    """Truncate the episode once ``max_seconds`` of wall time have passed since reset."""

    def __init__(self, env: Environment | Wrapper, max_seconds: float) -> None:
        super().__init__(env)
        self.max_seconds = max_seconds
        self.started = 0.0

    def reset(self, **kw: Any) -> tuple[Observation, dict[str, Any]]:
        self.started = time.monotonic()
        return self.env.reset(**kw)

    def step(self, action: Any) -> tuple[Observation, float | None, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if time.monotonic() - self.started >= self.max_seconds and not terminated:
            truncated = True
            info["truncated_by"] = "time_limit"
        return obs, reward, terminated, truncated, info


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
