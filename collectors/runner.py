"""The episode runner and batch jobs: ``trajforge collect JOB.yaml --store STORE``.

Each (task, episode index) of a job is one episode with a deterministic trajectory id and
seed. Workers (processes, each with its own sandboxes) run episodes; the parent is the
only writer: an episode's transitions reach the store as one record batch, written whole
or not at all, so a kill never leaves half an episode in a finished shard.

Idempotent and resumable: the store itself says which episodes are done (their trajectory
ids under this job id), so a rerun after a crash or kill collects only the rest and never
duplicates a trajectory. An episode that fails on infrastructure is retried ``retries``
times, then recorded as failed with its reason in the job's ledger
(``<store>/jobs/<job_id>/ledger.jsonl``; a retried episode's entry lists why the earlier
attempts failed, e.g. an MCP server's timeout); its steps are never written. A lock keeps two
overlapping runs of one job (cron, systemd timers) from both collecting.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from collectors.env import Task
from collectors.jobrun import EpisodeSpec, JobRun, JobSummary
from collectors.jobs import JobConfig
from collectors.policies import make_policy
from collectors.registry import backend_env, env_class, make_env
from collectors.wrappers import Recorder, StepLimit, WallTimeLimit
from pipelines.store import Store, StoreWriter
from sandboxes.base import SandboxConfig
from schemas.errors import ConfigError, TrajforgeError
from schemas.transition import Provenance, Transition, canonical_json

COLLECTOR = "trajforge.collectors"
COLLECTOR_VERSION = "1"


@dataclass
class EpisodeResult:
    key: str
    trajectory_id: str
    domain: str
    ok: bool
    attempts: int
    transitions: list[Transition] = field(default_factory=list)
    reason: str | None = None
    retried_after: list[str] = field(default_factory=list)  # why earlier attempts failed (a hang, a dead server)
    reset_ms: float = 0.0
    seconds: float = 0.0


# -- worker side --------------------------------------------------------------------------------
_ENVS: dict[tuple[str, str], Any] = {}  # one live environment per (domain, env_id) in a worker


#: What a task may set of its sandbox (``extra.sandbox``: an imported task's own image and resources).
TASK_SANDBOX_KEYS = frozenset({"image", "memory_mb", "cpus", "disk_mb", "pids", "writable"})


def task_sandbox(task, base: SandboxConfig) -> SandboxConfig:
    """The job's sandbox with the task's own image and resources, where it names them."""
    own = task.extra.get("sandbox") or {}
    unknown = sorted(set(own) - TASK_SANDBOX_KEYS)
    if not isinstance(own, dict) or unknown:
        known = ", ".join(sorted(TASK_SANDBOX_KEYS))
        raise ConfigError(f"task {task.id}: extra.sandbox: expected a mapping of {known}, got {unknown[:1] or own!r}")
    return replace(base, **{k: tuple(v) if k == "writable" else v for k, v in own.items()}) if own else base


def _env_key(spec: EpisodeSpec) -> tuple[str, str, str]:
    """A worker keeps one environment per domain, environment id and task sandbox."""
    return spec.task.domain, spec.task.env_id, canonical_json(spec.task.extra.get("sandbox") or {})


def _env_for(spec: EpisodeSpec, job: JobConfig):
    key = _env_key(spec)
    env = _ENVS.get(key)
    if env is None or env.closed:

        def real():
            return make_env(
                spec.task.domain,
                task_sandbox(spec.task, job.sandbox_config(spec.run_id)),
                spec.task.env_id,
                **job.env_options(spec.task.domain),
            )

        if job.backend != "real":  # a world model plays the environment; real() gives its initial observations
            env = _ENVS[key] = backend_env(job.backend)(spec.task.domain, job.sim, spec.task.env_id, real=real)
        else:
            env = _ENVS[key] = real()
    return env


def _drop_env(spec: EpisodeSpec) -> None:
    env = _ENVS.pop(_env_key(spec), None)
    if env is not None:
        with contextlib.suppress(Exception):  # the sandbox is already broken; gc sweeps what is left
            env.close()


def episode_timeout(task, job: JobConfig) -> float:
    """The job's episode time limit, or the task's own (``extra.episode_timeout_s``) when shorter."""
    own = task.extra.get("episode_timeout_s")
    return min(job.episode_timeout_s, float(own)) if isinstance(own, int | float) and own > 0 else job.episode_timeout_s


def run_episode_once(spec: EpisodeSpec) -> tuple[list[Transition], float]:
    """One attempt: reset, let the policy act until the episode ends, check the task."""
    job = JobConfig.model_validate(spec.job)
    task = spec.task
    base = _env_for(spec, job)
    policy = make_policy(job.policy_options(), env_class(task.domain).action_space)
    provenance = Provenance(
        run_id=spec.run_id,
        collector=COLLECTOR,
        collector_version=COLLECTOR_VERSION,
        sandbox_backend=base.sandbox_backend,
        image_digest=base.image_digest,
        seed=spec.seed,
        policy=policy.name,
        model=policy.model or job.policy.model,
        job_id=spec.job_id,
    )
    env = Recorder(
        StepLimit(WallTimeLimit(base, episode_timeout(task, job)), task.max_steps or job.max_steps),
        trajectory_id=spec.trajectory_id,
        provenance=provenance,
    )
    obs, info = env.reset(seed=spec.seed, task=task)
    policy.reset(task, spec.seed)
    history: list[tuple[Any, Any]] = []
    while True:
        action = policy.act(obs, history)
        if action is None:
            env.end_truncated()
            break
        obs, _, terminated, truncated, _ = env.step(action)
        history.append((action, obs))
        if terminated or truncated:
            break
    transitions = env.transitions
    check_alive = getattr(base, "check_alive", None)
    if check_alive is not None:  # a shell or sandbox that died is an infrastructure failure, never scored
        check_alive()
    if transitions and task.check and transitions[-1].reward is None:
        reward, _ = task.validate(base)
        transitions[-1] = replace(transitions[-1], reward=reward)
    if not getattr(base, "simulated", False):  # a simulated world has nothing to tear down
        task.run_teardown(base)
    return transitions, info.get("reset_ms", 0.0)


def run_episode(spec: EpisodeSpec, retries: int) -> EpisodeResult:
    """Run with retries on infrastructure failures; agent mistakes are data, not failures."""
    t0 = time.monotonic()
    reasons: list[str] = []
    for attempt in range(1, retries + 2):
        try:
            transitions, reset_ms = run_episode_once(spec)
            return EpisodeResult(
                spec.key,
                spec.trajectory_id,
                spec.task.domain,
                True,
                attempt,
                transitions,
                retried_after=reasons,
                reset_ms=reset_ms,
                seconds=time.monotonic() - t0,
            )
        except TrajforgeError as exc:
            reasons.append(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug or an unexpected engine error: record it, do not kill the job
            reasons.append(f"{type(exc).__name__}: {exc} ({traceback.format_exc(limit=3).splitlines()[-2].strip()})")
        _drop_env(spec)  # a fresh environment for the next attempt
    return EpisodeResult(
        spec.key,
        spec.trajectory_id,
        spec.task.domain,
        False,
        retries + 1,
        reason=reasons[-1],
        retried_after=reasons[:-1],
        seconds=time.monotonic() - t0,
    )


def _worker_exit() -> None:
    for key in list(_ENVS):
        env = _ENVS.pop(key)
        with contextlib.suppress(Exception):
            env.close()


# -- parent side --------------------------------------------------------------------------------
def run_job(
    job: JobConfig, tasks: list[Task], store: Store | str, *, progress=None, log=None, shard: tuple[int, int] = (0, 1)
) -> JobSummary:
    """Run the job's episodes not yet in the store, or those of shard ``(I, N)`` only: shards
    run anywhere at once (a Kubernetes Indexed Job, a Slurm array), each with its own lock
    and runs, and together collect exactly the episodes of the whole job."""
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    run = JobRun(job, tasks, store, shard=shard)
    with run:
        from pipelines.store.repair import repair
        from sandboxes.gc import gc

        # a killed earlier run of this shard may have left unfinished shards
        if run.store.sfs.is_dir(run.store.layout.tree("raw")):
            repair(run.store.sfs, run_prefix=f"{run.part}-")
        gc()  # sandboxes that dead runs left behind (live ones, other shards' included, are kept)
        todo = run.todo()
        summary = run.summary
        index, count = shard
        which = f" (shard {index} of {count})" if count > 1 else ""
        log(
            f"job {job.job_id}{which}: {summary.planned} episodes planned, {summary.already_done} already done, "
            f"{len(todo)} to run"
        )
        with run.ledger() as ledger, StoreWriter(run.store, run.run_id) as writer:
            for result in _results(job, todo):
                _record(result, writer, ledger, summary)
                if progress:
                    progress(summary)
    return run.summary


def _results(job: JobConfig, todo: list[EpisodeSpec]):
    if job.workers == 0:
        for spec in todo:
            yield run_episode(spec, job.retries)
        _worker_exit()
        return
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    counter = ctx.Value("i", 0)  # each worker takes the next index (an Android worker's device)
    with ProcessPoolExecutor(max_workers=job.workers, mp_context=ctx, initializer=_worker_init, initargs=(counter,)) as pool:
        futures = [pool.submit(run_episode, spec, job.retries) for spec in todo]
        for f in as_completed(futures):
            yield f.result()


def _worker_init(counter: Any = None) -> None:
    if counter is not None:
        with counter.get_lock():
            os.environ["TRAJFORGE_WORKER_INDEX"], counter.value = str(counter.value), counter.value + 1
    # Pool workers leave through multiprocessing's exit path, which runs its finalizers but
    # not atexit: close this worker's sandboxes there, so no container outlives the run.
    from multiprocessing.util import Finalize

    Finalize(None, _worker_exit, exitpriority=10)


def ledger_entry(result: EpisodeResult) -> dict[str, Any]:
    """The ledger line of an episode's result (local runs and Beam units alike)."""
    entry = {
        "episode": result.key,
        "trajectory_id": result.trajectory_id,
        "attempts": result.attempts,
        "seconds": round(result.seconds, 3),
        "at": datetime.now(UTC).isoformat(),
    }
    if result.ok and result.transitions:
        entry |= {"status": "done", "steps": len(result.transitions), "reward": result.transitions[-1].reward}
    else:
        entry |= {"status": "failed", "reason": result.reason or "the episode produced no step"}
    if result.retried_after:
        entry["retried_after"] = result.retried_after
    return entry


def _record(result: EpisodeResult, writer: StoreWriter, ledger, summary: JobSummary) -> None:
    entry = ledger_entry(result)
    if entry["status"] == "done":
        writer.writer(result.domain).write_episode(result.transitions)
    summary.count(entry)
    ledger.write(entry)


__all__ = [
    "EpisodeResult",
    "EpisodeSpec",
    "JobSummary",
    "ledger_entry",
    "run_episode",
    "run_job",
]
