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
import hashlib
import json
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from collectors.env import Task
from collectors.jobs import JobConfig
from collectors.policies import make_policy
from collectors.registry import env_class, make_env
from collectors.wrappers import Recorder, StepLimit, WallTimeLimit
from pipelines.store import Store, StoreWriter
from pipelines.store.fs import StoreFS
from pipelines.store.ledger import Ledger
from schemas.errors import TrajforgeError
from schemas.transition import Provenance, Transition

COLLECTOR = "trajforge.collectors"
COLLECTOR_VERSION = "1"


@dataclass(frozen=True)
class EpisodeSpec:
    job_id: str
    run_id: str
    task: Task
    index: int
    seed: int
    job: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.task.id}#{self.index}"

    @property
    def trajectory_id(self) -> str:
        return f"{self.job_id}:{self.task.id}:{self.index}"


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


def episode_seed(job_seed: int, key: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{job_seed}:{key}".encode(), digest_size=8).digest(), "big") >> 1


# -- worker side --------------------------------------------------------------------------------
_ENVS: dict[tuple[str, str], Any] = {}  # one live environment per (domain, env_id) in a worker


def _env_for(spec: EpisodeSpec, job: JobConfig):
    key = (spec.task.domain, spec.task.env_id)
    env = _ENVS.get(key)
    if env is None or env.closed:
        real = lambda: make_env(spec.task.domain, job.sandbox_config(spec.run_id), spec.task.env_id,  # noqa: E731
                                **job.env_options(spec.task.domain))  # fmt: skip
        if job.backend == "sim":  # a world model plays the environment; real() gives its initial observations
            from simulate.env import SimEnv

            env = _ENVS[key] = SimEnv(spec.task.domain, job.sim, spec.task.env_id, real=real)
        else:
            env = _ENVS[key] = real()
    return env


def _drop_env(spec: EpisodeSpec) -> None:
    env = _ENVS.pop((spec.task.domain, spec.task.env_id), None)
    if env is not None:
        with contextlib.suppress(Exception):  # the sandbox is already broken; gc sweeps what is left
            env.close()


def run_episode_once(spec: EpisodeSpec) -> tuple[list[Transition], float]:
    """One attempt: reset, let the policy act until the episode ends, check the task."""
    job = JobConfig.model_validate(spec.job)
    task = spec.task
    base = _env_for(spec, job)
    policy = make_policy(job.policy_options(), env_class(task.domain).action_space)
    provenance = Provenance(
        run_id=spec.run_id, collector=COLLECTOR, collector_version=COLLECTOR_VERSION,
        sandbox_backend=base.sandbox_backend, image_digest=base.image_digest, seed=spec.seed, policy=policy.name,
        model=policy.model or job.policy.model, job_id=spec.job_id,
    )  # fmt: skip
    env = Recorder(
        StepLimit(WallTimeLimit(base, job.episode_timeout_s), task.max_steps or job.max_steps),
        trajectory_id=spec.trajectory_id, provenance=provenance,
    )  # fmt: skip
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
            return EpisodeResult(spec.key, spec.trajectory_id, spec.task.domain, True, attempt, transitions,
                                 retried_after=reasons, reset_ms=reset_ms, seconds=time.monotonic() - t0)  # fmt: skip
        except TrajforgeError as exc:
            reasons.append(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug or an unexpected engine error: record it, do not kill the job
            reasons.append(f"{type(exc).__name__}: {exc} ({traceback.format_exc(limit=3).splitlines()[-2].strip()})")
        _drop_env(spec)  # a fresh environment for the next attempt
    return EpisodeResult(spec.key, spec.trajectory_id, spec.task.domain, False, retries + 1, reason=reasons[-1],
                         retried_after=reasons[:-1], seconds=time.monotonic() - t0)  # fmt: skip


def _worker_exit() -> None:
    for key in list(_ENVS):
        env = _ENVS.pop(key)
        with contextlib.suppress(Exception):
            env.close()


# -- parent side --------------------------------------------------------------------------------
@dataclass
class JobSummary:
    job_id: str
    run_id: str
    planned: int = 0
    already_done: int = 0
    collected: int = 0
    failed: int = 0
    transitions: int = 0
    retried: int = 0
    seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        return (
            f"job {self.job_id} run {self.run_id}: {self.collected} episodes collected ({self.transitions} transitions), "
            f"{self.already_done} already done, {self.failed} failed, {self.retried} retried, {self.seconds:.1f} s"
        )


def done_trajectories(store: str, job_id: str) -> set[str]:
    """Trajectory ids of this job already in the store's finished shards."""
    sfs = StoreFS.open(store)
    if not sfs.is_dir(sfs.root):
        return set()
    from pipelines.query import connect

    con = connect(Store(store), release_stages=())
    rows = con.execute("SELECT DISTINCT trajectory_id FROM transitions WHERE provenance.job_id = ?", [job_id]).fetchall()
    return {r[0] for r in rows}


def shard_of(key: str, num_shards: int) -> int:
    """Which of ``num_shards`` shards an episode belongs to: a hash of its key, so the split
    does not depend on the order of tasks or on which shards run, and never changes."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % num_shards


def plan(job: JobConfig, tasks: list[Task], run_id: str, shard: tuple[int, int] = (0, 1)) -> list[EpisodeSpec]:
    """The job's episodes, or shard ``I`` of ``N`` of them (``shard=(I, N)``)."""
    specs = []
    job_dict = job.model_dump()
    index, count = shard
    for task in sorted(tasks, key=lambda t: t.id):
        for i in range(job.episodes_per_task):
            key = f"{task.id}#{i}"
            if count == 1 or shard_of(key, count) == index:
                specs.append(EpisodeSpec(job.job_id, run_id, task, i, episode_seed(job.seed + task.seed, key), job_dict))
    return specs


def run_job(job: JobConfig, tasks: list[Task], store: str, *, progress=None, log=None,
            shard: tuple[int, int] = (0, 1)) -> JobSummary:  # fmt: skip
    """Run the job's episodes not yet in the store, or those of shard ``(I, N)`` only: shards
    run anywhere at once (a Kubernetes Indexed Job, a Slurm array), each with its own lock
    and runs, and together collect exactly the episodes of the whole job."""
    index, count = shard
    if not (count >= 1 and 0 <= index < count):
        from schemas.errors import ConfigError

        raise ConfigError(f"--shard {index} --num-shards {count}: need 0 <= shard < num-shards")
    sfs = StoreFS.open(store)
    job_dir = sfs.join("jobs", job.job_id)
    sfs.makedirs(job_dir)
    part = f"{job.job_id}-s{index}of{count}" if count > 1 else job.job_id
    run_id = f"{part}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}"
    summary = JobSummary(job.job_id, run_id)
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    t0 = time.monotonic()
    with sfs.lock(f"{job_dir}/.lock" + (f"-s{index}of{count}" if count > 1 else "")):
        from pipelines.store.repair import repair
        from sandboxes.gc import gc

        if sfs.is_dir(sfs.join("raw")):  # a killed earlier run of this shard may have left unfinished shards
            repair(store, run_prefix=f"{part}-")
        gc()  # sandboxes that dead runs left behind (live ones, other shards' included, are kept)
        specs = plan(job, tasks, run_id, shard)
        done = done_trajectories(store, job.job_id)
        todo = [s for s in specs if s.trajectory_id not in done]
        summary.planned, summary.already_done = len(specs), len(specs) - len(todo)
        which = f" (shard {index} of {count})" if count > 1 else ""
        log(f"job {job.job_id}{which}: {len(specs)} episodes planned, {summary.already_done} already done, {len(todo)} to run")
        with Ledger(sfs, job_dir, run_id) as ledger, StoreWriter(sfs, run_id) as writer:
            for result in _results(job, todo):
                _record(result, writer, ledger, summary)
                if progress:
                    progress(summary)
        summary.seconds = time.monotonic() - t0
        sfs.makedirs(f"{job_dir}/runs")
        sfs.write_bytes_atomic(f"{job_dir}/runs/{run_id}.json", json.dumps(asdict(summary), indent=1).encode())
    return summary


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
    entry = {"episode": result.key, "trajectory_id": result.trajectory_id, "attempts": result.attempts,
             "seconds": round(result.seconds, 3), "at": datetime.now(UTC).isoformat()}  # fmt: skip
    if result.ok and result.transitions:
        entry |= {"status": "done", "steps": len(result.transitions), "reward": result.transitions[-1].reward}
    else:
        entry |= {"status": "failed", "reason": result.reason or "the episode produced no step"}
    if result.retried_after:
        entry["retried_after"] = result.retried_after
    return entry


def tally(entry: dict[str, Any], summary: JobSummary) -> None:
    """Count a ledger line into a run's summary."""
    summary.retried += entry["attempts"] > 1
    if entry["status"] == "done":
        summary.collected += 1
        summary.transitions += entry["steps"]
    else:
        summary.failed += 1
        summary.failures[entry["episode"]] = entry["reason"]


def _record(result: EpisodeResult, writer: StoreWriter, ledger, summary: JobSummary) -> None:
    entry = ledger_entry(result)
    if entry["status"] == "done":
        writer.writer(result.domain).write_episode(result.transitions)
    tally(entry, summary)
    ledger.write(entry)


__all__ = ["EpisodeResult", "EpisodeSpec", "JobSummary", "plan", "run_episode", "run_job"]
