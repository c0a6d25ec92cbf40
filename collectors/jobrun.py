"""One run of a collection job, whichever runner runs its episodes (local workers or Beam).

A job's episodes are planned deterministically: each (task, episode index) has a key, a
trajectory id and a seed that never change, and a hash of the key puts it in one of N
shards. ``JobRun`` is what a run does around its episodes: it takes the job's lock (one run
of a job, or of one shard of it, at a time), knows its run id, plans the episodes the store
does not have yet (``Store.trajectory_ids``), counts each episode's ledger line into its
``JobSummary`` and, at the end, writes that summary as ``jobs/<job_id>/runs/<run_id>.json``::

    with JobRun(job, tasks, store, shard=(0, 1)) as run:
        for spec in run.todo():
            ...
            run.count(entry)          # a ledger line: done or failed
    run.summary.line()
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from collectors.env import Task
from collectors.jobs import JobConfig
from pipelines.store import Store
from pipelines.store.ledger import Ledger
from pipelines.tally import Tally
from schemas.errors import ConfigError

_LABEL = {"merge": False}  # which job and run a summary is of: kept, not added, when summaries merge


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


def episode_seed(job_seed: int, key: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{job_seed}:{key}".encode(), digest_size=8).digest(), "big") >> 1


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


@dataclass
class JobSummary(Tally):
    """What a run of a job did, counted from its ledger lines (summaries of shards merge)."""

    job_id: str = field(default="", metadata=_LABEL)
    run_id: str = field(default="", metadata=_LABEL)
    planned: int = 0
    already_done: int = 0
    collected: int = 0
    failed: int = 0
    transitions: int = 0
    retried: int = 0
    seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)
    stop_reasons: dict[str, int] = field(default_factory=dict)
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_retries: int = 0
    cost: float = 0.0
    interrupted: bool = field(default=False, metadata=_LABEL)

    def count(self, entry: dict[str, Any]) -> None:
        """Count one ledger line (see ``collectors.runner.ledger_entry``)."""
        self.retried += entry["attempts"] > 1
        reason = entry.get("stop_reason")
        if reason:
            self.stop_reasons[reason] = self.stop_reasons.get(reason, 0) + 1
        llm = entry.get("llm") or {}
        self.llm_calls += llm.get("calls", 0)
        self.prompt_tokens += llm.get("prompt_tokens", 0)
        self.completion_tokens += llm.get("completion_tokens", 0)
        self.llm_retries += llm.get("retries", 0)
        self.cost += llm.get("cost", 0.0)
        if entry["status"] == "done":
            self.collected += 1
            self.transitions += entry["steps"]
        else:
            self.failed += 1
            self.failures[entry["episode"]] = entry["reason"]

    def line(self) -> str:
        return (
            f"job {self.job_id} run {self.run_id}: {self.collected} episodes collected ({self.transitions} transitions), "
            f"{self.already_done} already done, {self.failed} failed, {self.retried} retried, {self.seconds:.1f} s"
            + (
                f"; model: {self.llm_calls} calls, {self.prompt_tokens} prompt + {self.completion_tokens} completion "
                f"tokens, {self.llm_retries} retries" + (f", cost {self.cost:.4f}" if self.cost else "")
                if self.llm_calls
                else ""
            )
            + ("; interrupted" if self.interrupted else "")
        )


def tally(entry: dict[str, Any], summary: JobSummary) -> None:
    """Count a ledger line into a run's summary."""
    summary.count(entry)


class JobRun:
    """One run of a job (or of shard ``(I, N)`` of it) on a store; see the module docstring.

    ``label`` tells runs of different runners apart in the run id (``beam``):
    ``<job_id>[-sIofN][-<label>]-<UTC time>-<pid>``."""

    def __init__(
        self, job: JobConfig, tasks: list[Task], store: Store | str, *, shard: tuple[int, int] = (0, 1), label: str | None = None
    ) -> None:
        index, count = shard
        if not (count >= 1 and 0 <= index < count):
            raise ConfigError(f"--shard {index} --num-shards {count}: need 0 <= shard < num-shards")
        self.job, self.tasks, self.shard = job, tasks, shard
        self.store = Store.open(store, must_exist=False)
        self.job_dir = self.store.layout.job_dir(job.job_id)
        #: the prefix of the run ids of this job (or of this shard of it): earlier runs' leftovers are found by it
        self.part = f"{job.job_id}-s{index}of{count}" if count > 1 else job.job_id
        stamp = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}"
        self.run_id = f"{self.part}-{label}-{stamp}" if label else f"{self.part}-{stamp}"
        self.summary = JobSummary(job.job_id, self.run_id)
        self._held = contextlib.ExitStack()
        self._t0 = time.monotonic()

    # -- the run's life: locked while it runs, its summary written when it ends well ------------------
    def __enter__(self) -> JobRun:
        self.store.sfs.makedirs(self.job_dir)
        self._held.enter_context(self.store.lock(self.store.layout.job_lock(self.job.job_id, self.shard)))
        self._t0 = time.monotonic()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                self.finish()
        finally:
            self._held.close()

    def todo(self) -> list[EpisodeSpec]:
        """The episodes of this run: the job's (or its shard's) whose trajectory the store lacks."""
        specs = plan(self.job, self.tasks, self.run_id, self.shard)
        done = self.store.trajectory_ids(job_id=self.job.job_id)
        todo = [s for s in specs if s.trajectory_id not in done]
        self.summary.planned, self.summary.already_done = len(specs), len(specs) - len(todo)
        return todo

    def ledger(self) -> Ledger:
        """This run's ledger, for runs whose parent writes every line."""
        return Ledger(self.store.sfs, self.job_dir, self.run_id)

    def count(self, entry: dict[str, Any]) -> None:
        self.summary.count(entry)

    def count_ledger(self, run_id: str) -> None:
        """Count the lines of ``jobs/<job>/ledger/<run_id>.jsonl`` (written by a worker), if there."""
        path = self.store.layout.job_ledger(self.job.job_id, run_id)
        if self.store.sfs.exists(path):
            for line in self.store.sfs.read_bytes(path).decode().splitlines():
                self.count(json.loads(line))

    def finish(self) -> JobSummary:
        """Write the run's summary to ``jobs/<job_id>/runs/<run_id>.json``."""
        self.summary.seconds = time.monotonic() - self._t0
        layout = self.store.layout
        self.store.sfs.makedirs(layout.job_runs_dir(self.job.job_id))
        body = json.dumps(asdict(self.summary), indent=1).encode()
        self.store.sfs.write_bytes_atomic(layout.job_run_summary(self.job.job_id, self.run_id), body)
        return self.summary


__all__ = ["EpisodeSpec", "JobRun", "JobSummary", "episode_seed", "plan", "shard_of", "tally"]
