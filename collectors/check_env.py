"""``check_env``: the conformance check every environment passes (Gymnasium's env checker).

It checks the reset/step contract and types, canonical action strings, that a malformed
action is returned as ``action_error`` (observation unchanged, no exception), that the
same scripted episode under the same seed gives the same (volatile-masked) transitions,
and that ``close`` is safe twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collectors.env import Environment, Task
from collectors.wrappers import Recorder
from schemas.transition import Observation, Provenance
from schemas.validate import transition_problems


class EnvCheckError(AssertionError):
    pass


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise EnvCheckError(message)


def _episode(env: Environment, task: Task, seed: int) -> list[Any]:
    rec = Recorder(env, trajectory_id="check", provenance=Provenance(run_id="check"))
    obs, info = rec.reset(seed=seed, task=task)
    _expect(isinstance(obs, Observation) and isinstance(info, dict), "reset must return (Observation, dict)")
    for action in task.actions:
        out = rec.step(action)
        _expect(isinstance(out, tuple) and len(out) == 5, "step must return a 5-tuple")
        obs, reward, terminated, truncated, info = out
        _expect(isinstance(obs, Observation), "step's observation must be an Observation")
        _expect(reward is None or isinstance(reward, float), f"reward must be float or None, got {reward!r}")
        _expect(isinstance(terminated, bool) and isinstance(truncated, bool), "terminated/truncated must be bool")
        _expect(info.get("action_error") is None, f"scripted action {action} failed: {info.get('action_error')}")
        if terminated or truncated:
            break
    for t in rec.transitions:
        problems = transition_problems(t)
        _expect(not problems, f"recorded transition is invalid: {problems}")
        spec = env.action_space.parse(t.action.canonical)
        _expect(spec.canonical == t.action.canonical, "an action's canonical string must parse back to itself")
    return [t.content_hash for t in rec.transitions]


def check_env(make: Callable[[], Environment], task: Task, *, seed: int = 0) -> None:
    """Raise EnvCheckError at the first broken promise; ``task`` needs scripted ``actions``."""
    _expect(bool(task.actions), "check_env needs a task with scripted actions")
    env = make()
    try:
        _expect(bool(env.domain) and env.action_space.domain == env.domain, "domain and action space must agree")
        _expect(bool(env.action_space.describe()), "the action space must describe itself for prompts")
        first = _episode(env, task, seed)
        obs, _ = env.reset(seed=seed, task=task)
        for bad in ("not json", {"action": "no-such-action"}, {"action": next(iter(env.action_space.actions)), "bogus": 1}):
            after, reward, terminated, truncated, info = env.step(bad)
            _expect(bool(info.get("action_error")), f"malformed action {bad!r} must give action_error")
            _expect(after == obs, "a malformed action must leave the observation unchanged")
            _expect(not terminated and not truncated and reward is None, "a malformed action must not end the episode")
        second = _episode(env, task, seed)
        _expect(first == second, "the same scripted episode under the same seed must give the same transitions")
    finally:
        env.close()
    env.close()  # twice is safe
