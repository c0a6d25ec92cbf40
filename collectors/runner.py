"""The episode runner and batch jobs: ``trajforge collect JOB.yaml --store STORE``.

Each (task, episode index) of a job is one episode with a deterministic trajectory id and
seed. ``workers`` processes each run ``concurrency`` episodes at once on one event loop
(``collectors.rollouts``: a coroutine per episode, the sandboxes' blocking calls on threads,
admission limits for starts); ``workers: 0`` runs them in this process. The parent is the
only writer: an episode's transitions reach the store as one record batch, written whole
or not at all, so a kill never leaves half an episode in a finished shard.

Idempotent and resumable: the store itself says which episodes are done (their trajectory
ids under this job id), so a rerun after a crash or kill collects only the rest and never
duplicates a trajectory. An episode that fails on infrastructure is retried ``retries``
times, then recorded as failed with its reason in the job's ledger
(``<store>/jobs/<job_id>/ledger.jsonl``; a retried episode's entry lists why the earlier
attempts failed, e.g. an MCP server's timeout); its steps are never written. A lock keeps two
overlapping runs of one job (cron, systemd timers) from both collecting.

SIGINT or SIGTERM stops admitting episodes; those in flight get ``shutdown_grace_s`` to
finish, what finished is committed, every sandbox is closed, and the summary says the run
was interrupted: the next run collects the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import sys
import threading
from datetime import UTC, datetime
from typing import Any

from collectors.env import Task
from collectors.jobrun import EpisodeSpec, JobRun, JobSummary
from collectors.jobs import JobConfig
from collectors.rollouts import (
    COLLECTOR,
    COLLECTOR_VERSION,
    TASK_SANDBOX_KEYS,
    EpisodeResult,
    EpisodeRunner,
    episode_timeout,
    run_specs,
    task_sandbox,
)
from pipelines.store import Store, StoreWriter


# -- one episode, from synchronous code ---------------------------------------------------------
def run_episode(spec: EpisodeSpec, retries: int) -> EpisodeResult:
    """One episode with ``retries`` retries on infrastructure failures, in its own event loop."""
    job = JobConfig.model_validate(spec.job).model_copy(update={"retries": retries})

    async def one() -> EpisodeResult:
        async for result in run_specs([spec], job, concurrency=1):
            return result
        raise RuntimeError("the episode produced no result")

    return asyncio.run(one())


def _worker_exit() -> None:
    """Nothing is left to close: every run closes its environments as it ends (kept for callers)."""


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
            f"{len(todo)} to run ({job.workers or 'no'} worker processes, {job.concurrency} episodes at once each)"
        )
        with run.ledger() as ledger, StoreWriter(run.store, run.run_id) as writer, _stop_signals() as stop:
            for result in _results(job, todo, stop):
                _record(result, writer, ledger, summary, job)
                if progress:
                    progress(summary)
            summary.interrupted = stop.is_set()
        if summary.interrupted:
            log(f"job {job.job_id}: interrupted; {len(todo) - summary.collected - summary.failed} episodes left for the next run")
    return run.summary


@contextlib.contextmanager
def _stop_signals():
    """An event set by SIGINT or SIGTERM while the job runs (in the main thread only)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum, frame) -> None:
        if stop.is_set() and signum == signal.SIGINT:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        stop.set()

    for s in previous:
        signal.signal(s, handler)
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _results(job: JobConfig, todo: list[EpisodeSpec], stop: threading.Event):
    if not todo:
        return
    if job.workers == 0:
        yield from _inline(job, todo, stop)
        return
    yield from _processes(job, todo, stop)


def _inline(job: JobConfig, todo: list[EpisodeSpec], stop: threading.Event):
    """The episodes on an event loop in a thread of this process; results as they finish."""
    out: queue.Queue = queue.Queue()
    done = object()

    def main() -> None:
        async def drive() -> None:
            runner = EpisodeRunner(job)
            watcher = asyncio.ensure_future(_watch(stop, runner))
            try:
                async for result in run_specs(todo, job, runner=runner):
                    out.put(result)
            finally:
                watcher.cancel()

        try:
            asyncio.run(drive())
        finally:
            out.put(done)

    thread = threading.Thread(target=main, name="episodes", daemon=True)
    thread.start()
    while (item := out.get()) is not done:
        yield item
    thread.join()


async def _watch(stop: threading.Event, runner: EpisodeRunner) -> None:
    while not stop.is_set():
        await asyncio.sleep(0.1)
    runner.stop()


def start_fork_server() -> None:
    """Start the server that forks the workers (``_processes``) now: it imports this program
    afresh (about a second), which then overlaps with the job's set-up instead of following it."""
    from multiprocessing import forkserver

    forkserver.ensure_running()


def _processes(job: JobConfig, todo: list[EpisodeSpec], stop: threading.Event):
    """``job.workers`` processes, each running its share of the episodes ``concurrency`` at
    once; their results stream back as they finish. A stop is passed on as SIGTERM."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    results = ctx.Queue()
    workers = []
    for i in range(min(job.workers, len(todo))):
        p = ctx.Process(target=_worker_main, args=(i, job.model_dump(), todo[i :: job.workers], results), daemon=False)
        p.start()
        workers.append(p)
    finished, signalled = 0, False
    try:
        while finished < len(workers):
            if stop.is_set() and not signalled:
                signalled = True
                for p in workers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGTERM)
            try:
                item = results.get(timeout=0.2)
            except queue.Empty:
                if all(not p.is_alive() for p in workers):  # a worker killed before its last word
                    with contextlib.suppress(queue.Empty):
                        while True:
                            item = results.get(timeout=0.5)
                            if isinstance(item, EpisodeResult):
                                yield item
                    break
                continue
            if isinstance(item, EpisodeResult):
                yield item
            else:
                finished += 1
    finally:
        for p in workers:
            p.join(timeout=job.shutdown_grace_s + 30)
            if p.is_alive():
                p.kill()
                p.join()


def _worker_main(index: int, job_dict: dict[str, Any], specs: list[EpisodeSpec], results) -> None:
    """A worker process: its episodes on one event loop, each result put on ``results``."""
    os.environ["TRAJFORGE_WORKER_INDEX"] = str(index)  # an Android worker's device
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it sends SIGTERM
    job = JobConfig.model_validate(job_dict)

    async def drive() -> None:
        runner = EpisodeRunner(job)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, runner.stop)
        async for result in run_specs(specs, job, runner=runner):
            results.put(result)

    try:
        asyncio.run(drive())
    finally:
        results.put(("done", index))


def ledger_entry(result: EpisodeResult, job: JobConfig | None = None) -> dict[str, Any]:
    """The ledger line of an episode's result (local runs and Beam units alike): its
    status, stop reason, and its model calls' tokens and cost (at the job's ``price``)."""
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
    entry["stop_reason"] = result.stop_reason
    if result.llm:
        entry["llm"] = dict(result.llm)
        if job is not None and job.price is not None:
            entry["llm"]["cost"] = round(job.price.cost(result.llm["prompt_tokens"], result.llm["completion_tokens"]), 6)
    if result.retried_after:
        entry["retried_after"] = result.retried_after
    return entry


def _record(result: EpisodeResult, writer: StoreWriter, ledger, summary: JobSummary, job: JobConfig) -> None:
    entry = ledger_entry(result, job)
    if entry["status"] == "done":
        writer.writer(result.domain).write_episode(result.transitions)
    summary.count(entry)
    ledger.write(entry)


__all__ = [
    "COLLECTOR",
    "COLLECTOR_VERSION",
    "TASK_SANDBOX_KEYS",
    "EpisodeResult",
    "EpisodeSpec",
    "JobSummary",
    "episode_timeout",
    "ledger_entry",
    "run_episode",
    "run_job",
    "task_sandbox",
]
