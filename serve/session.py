"""Served sessions: one remote client's environment, every step it takes recorded.

A ``Served`` holds what every session of one server shares: the job (sandbox, backend,
domain options, step limits), its tasks by id, and the store the steps go to. A
``Session`` is one client's: it owns at most one live environment (a sandbox, a browser
context, a desktop or a device; a world model for ``backend: sim``), made at its first
reset and kept for the next reset of a task of the same kind, closed with the session.

Each episode is recorded exactly as a collection job records one (``collectors.wrappers.
Recorder`` under the job's step and wall-time limits, the task's check on the last step,
its teardown), with origin ``collected``, the serving session as ``job_id``, the client's
stated ``policy`` and ``model``, and ``provenance.extra`` ``{"served": {"session": ...},
"stop_reason": ...}``. An episode is written when it ends (the task ends it, or a limit),
or, cut short, when the client resets, closes, disconnects or goes idle; then its last
step is marked truncated and its stop reason says which (``schemas.transition.STOP_REASONS``).

Sessions run their calls on one thread each (the server's executor): nothing here is
shared between sessions but the writer, which takes a lock.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.env import Task, load_suite
from collectors.jobs import JobConfig, load_job
from collectors.rollouts import close_on_thread, env_key, episode_timeout, finish_episode, new_env, stamped
from collectors.wrappers import Recorder, StepLimit, WallTimeLimit
from pipelines.store import Store, StoreWriter
from pipelines.store.writer import WriterOptions
from schemas.config import read_yaml
from schemas.errors import ConfigError, TrajforgeError
from schemas.transition import Observation, Provenance, Transition

COLLECTOR = "trajforge.serve"
COLLECTOR_VERSION = "1"
#: The one action of every served domain that no domain has: the client ends the episode
#: here (as a collection policy that stops); nothing is executed, the task's check scores it.
END_EPISODE = "end_episode"
#: What a client may pass to reset besides ``seed`` and ``episode_id``.
RESET_KEYS = ("task_id", "policy", "model")


class SessionError(TrajforgeError):
    """A client's request this session cannot serve (unknown task, step before reset)."""


def load_served(path: str | Path, *, backend: str | None = None) -> tuple[JobConfig, list[Task]]:
    """A job file (it has ``job_id``) with its tasks, or a task suite served with the
    default job settings; ``backend`` overrides the job's."""
    path = Path(path)
    data = read_yaml(path, "job or task suite") if path.suffix in (".yaml", ".yml") else None
    if isinstance(data, dict) and "job_id" in data:
        job, tasks = load_job(path)
    else:
        tasks = load_suite(path)
        if not tasks:
            raise ConfigError(f"{path}: no tasks")
        job = JobConfig(job_id="serve", tasks=[str(path)])
    if backend is not None and backend != job.backend:
        if backend == "sim" and job.sim is None:
            raise ConfigError(f"{path}: --backend sim needs a sim section (the world model) in the job file")
        job = job.model_copy(update={"backend": backend})
    return job, tasks


class Served:
    """What a server's sessions share: the job, its tasks, the writer of the steps."""

    def __init__(self, job: JobConfig, tasks: list[Task], *, store: str | None, run_id: str | None = None) -> None:
        self.job = job
        self.tasks = {t.id: t for t in tasks}
        self.order = [t.id for t in tasks]
        self.domains = sorted({t.domain for t in tasks})
        self.run_id = run_id or f"serve-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        self.store = Store.open(store, must_exist=False) if store else None
        self._writer = StoreWriter(self.store, self.run_id, WriterOptions(seconds_per_shard=60.0)) if self.store else None
        self._lock = threading.Lock()
        self.sessions: dict[str, Session] = {}
        self.episodes_written = 0
        self.idle_timeout_s: float | None = None  # the server's idle limit (close() tells an idle session's end by it)
        self.closed = False

    def open_session(self) -> Session:
        with self._lock:
            if self.closed:
                raise SessionError("the server is shutting down")
            s = Session(self, uuid.uuid4().hex)
            self.sessions[s.id] = s
            return s

    def forget(self, session: Session) -> None:
        with self._lock:
            self.sessions.pop(session.id, None)

    def task_for(self, task_id: str | None, seed: int | None) -> Task:
        if task_id is not None:
            if not isinstance(task_id, str) or task_id not in self.tasks:
                shown = ", ".join(self.order[:10]) + (" ..." if len(self.order) > 10 else "")
                raise SessionError(f"reset: unknown task_id {str(task_id)[:100]!r} (serving: {shown})")
            return self.tasks[task_id]
        if seed is not None:
            return self.tasks[self.order[seed % len(self.order)]]
        return self.tasks[random.choice(self.order)]

    def write(self, transitions: list[Transition]) -> None:
        """One episode, whole, sent to the shard at once (a kill of the server keeps it)."""
        if self._writer is None or not transitions:
            return
        with self._lock:
            w = self._writer.writer(transitions[0].domain)
            w.write_episode(transitions)
            w.flush()
            self.episodes_written += 1

    def close(self) -> None:
        """Close every session (their episodes written), then the writer: the shards are
        finished and listed in the run manifest."""
        with self._lock:
            self.closed = True
            sessions = list(self.sessions.values())
        for s in sessions:
            try:
                s.close("closed")
            except Exception as exc:  # one environment that fails to close must not keep the others open
                print(f"serve: session {s.id[:8]}: close failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


@dataclass
class _Episode:
    task: Task
    recorder: Recorder
    policy: str
    model: str | None
    seed: int
    done: bool = False


@dataclass
class Session:
    """One client's environment and its current episode."""

    served: Served
    id: str
    env: Any = None
    key: tuple[str, str, str] | None = None
    episode: _Episode | None = None
    episodes: int = 0
    last_activity: float = field(default_factory=time.monotonic)
    closed: bool = False

    # -- the protocol's calls ------------------------------------------------------------
    def reset(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        policy: str | None = None,
        model: str | None = None,
    ) -> tuple[Observation, dict[str, Any]]:
        self._touch()
        if self.episode is not None and not self.episode.done:
            self._end("reset")
        task = self.served.task_for(task_id, seed)
        job = self.served.job
        key = env_key(task)
        if self.env is not None and key != self.key:
            self._drop_env()
        if self.env is None:
            self.env = new_env(task, job, f"{self.served.run_id}-{self.id[:8]}")
            self.key = key
        seed = task.seed if seed is None else seed
        base = self.env
        provenance = Provenance(
            run_id=self.served.run_id,
            collector=COLLECTOR,
            collector_version=COLLECTOR_VERSION,
            sandbox_backend=base.sandbox_backend,
            image_digest=base.image_digest,
            seed=seed,
            policy=_name(policy, "policy") or "remote",
            model=_name(model, "model"),
            job_id=self.id,
        )
        recorder = Recorder(
            StepLimit(WallTimeLimit(base, episode_timeout(task, job)), task.max_steps or job.max_steps),
            trajectory_id=f"{self.id}-{self.episodes}",
            provenance=provenance,
        )
        self.episodes += 1
        try:
            obs, info = recorder.reset(seed=seed, task=task)
        except Exception:
            self._drop_env()  # a failed start is never reused
            raise
        self.episode = _Episode(task, recorder, provenance.policy, provenance.model, seed)
        return obs, info

    def step(self, action: Any) -> tuple[Observation, float | None, bool, bool, dict[str, Any]]:
        """One step; at the episode's end the task's check gives the reward and the
        episode is written. A malformed action is a recorded action error, not a failure."""
        self._touch()
        ep = self.episode
        if ep is None:
            raise SessionError("step before reset: send a reset first")
        if ep.done:
            raise SessionError("the episode is over: send a reset to start the next one")
        if isinstance(action, dict) and action.get("action") == END_EPISODE:
            return self._end_by_client()
        try:
            obs, reward, terminated, truncated, info = ep.recorder.step(action)
        except Exception:
            self._end("infra_error")
            self._drop_env()
            raise
        if terminated or truncated:
            stop = {"step_limit": "max_steps", "time_limit": "timeout"}.get(info.get("truncated_by"), "complete")
            written = self._end(stop)
            if written and written[-1].reward is not None:
                reward = written[-1].reward
        return obs, reward, terminated, truncated, info

    def _end_by_client(self) -> tuple[Observation, float | None, bool, bool, dict[str, Any]]:
        """The client's ``end_episode``: the last step marked truncated (the policy stopped),
        the check scores the episode as it stands, and the episode is written."""
        ep = self.episode
        assert ep is not None
        obs = ep.recorder.observation
        reward = None
        if not ep.recorder.transitions and ep.task.check:  # no step to carry it: the check still answers
            reward = ep.task.validate(self.env)[0]
        ep.recorder.end_truncated()
        written = self._end("complete")
        if written:
            reward = written[-1].reward
        return obs, reward, False, True, {"action_error": None, "truncated_by": "client"}

    @property
    def steps(self) -> int:
        return len(self.episode.recorder.transitions) if self.episode else 0

    def close(self, reason: str = "closed") -> None:
        """End the episode in flight (written, truncated) and destroy the environment;
        safe twice and from any thread of the server."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.episode is not None and not self.episode.done:
                self._end(reason)
        finally:
            self._drop_env()
            self.served.forget(self)

    # -- inside ---------------------------------------------------------------------------
    def _touch(self) -> None:
        if self.closed:
            raise SessionError("this session is closed (idle for too long, or the server is stopping): connect again")
        self.last_activity = time.monotonic()

    def _end(self, stop_reason: str) -> list[Transition]:
        """The episode's transitions, finished (check, teardown) when it ended on its own,
        marked truncated when cut short, stamped and written."""
        ep = self.episode
        assert ep is not None
        ep.done = True
        transitions = list(ep.recorder.transitions)
        if stop_reason in ("complete", "max_steps", "timeout"):
            try:
                transitions = finish_episode(self.env, ep.task, transitions)
            except Exception:  # a sandbox that died at the end: its steps are kept, unscored; it is not reused
                self._write(_cut(transitions), "infra_error")
                self._drop_env()
                raise
        else:
            transitions = _cut(transitions)
        return self._write(transitions, stop_reason)

    def _write(self, transitions: list[Transition], stop_reason: str) -> list[Transition]:
        transitions = stamped(transitions, stop_reason, extra={"served": {"session": self.id}})
        self.served.write(transitions)
        return transitions

    def _drop_env(self) -> None:
        env, self.env, self.key = self.env, None, None
        if env is not None:
            close_on_thread(env)


def _cut(transitions: list[Transition]) -> list[Transition]:
    """An episode cut short: its last step marked truncated (unless it ended)."""
    if transitions and not (transitions[-1].terminated or transitions[-1].truncated):
        transitions = [*transitions[:-1], replace(transitions[-1], truncated=True)]
    return transitions


def _name(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise SessionError(f"reset: {what} must be a name of 1 to 200 characters, got {str(value)[:60]!r}")
    return value.strip()
