"""Beam collection mode: ``trajforge collect JOB.yaml --store S --runner R [Beam options]``.

The job's episodes not yet in the store are grouped into units (episodes of one domain,
``unit_size`` at a time) and become the elements of a Beam pipeline: units -> collect ->
shards. So the same Dataflow, Flink or Spark cluster that curates also collects, with the
project image as its SDK container; tests use Beam's local multi-process runner.

A unit is committed whole and at most once. A worker runs the unit's episodes (as the local
runner does: ``run_episode``, with retries), writes them as one run of the unit's own
deterministic run id into a staging folder, then commits it: on a local or shared file
system by renaming the finished run folder into ``raw/<domain>/<run_id>`` (one atomic
rename; a second attempt's rename finds the folder there and is dropped); on an object
store by uploading the shards and then the manifest, which is what makes them visible,
after checking that no attempt has done so. A retried unit finds its commit and does
nothing, an attempt killed before the commit leaves only staging, which the next run of
the job clears. Reruns of the job collect what the store still lacks, like local runs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.env import Task
from collectors.jobs import JobConfig
from collectors.runner import EpisodeSpec, JobSummary, done_trajectories, ledger_entry, plan, run_episode, tally
from pipelines.beam_options import beam_args_for, check_beam_options
from pipelines.progress import watch
from pipelines.store import StoreFS, StoreWriter
from pipelines.store.layout import run_dir
from pipelines.store.manifest import MANIFEST, RunManifest
from schemas.errors import ConfigError, TrajforgeError

FAULT_ENV = "TRAJFORGE_BEAM_FAULT"  # tests: "<point>:<marker file>" fails once at staged|committed


@dataclass(frozen=True)
class Unit:
    """Episodes of one domain committed together as the run ``run_id``."""

    run_id: str
    domain: str
    specs: tuple[EpisodeSpec, ...]


def make_units(specs: list[EpisodeSpec], run_prefix: str, unit_size: int) -> list[Unit]:
    """Group episodes by domain, ``unit_size`` at a time, each unit a run id of its own."""
    if unit_size < 1:
        raise ConfigError(f"--unit-size {unit_size}: must be >= 1")
    units: list[Unit] = []
    for domain in sorted({s.task.domain for s in specs}):
        mine = [s for s in specs if s.task.domain == domain]
        for start in range(0, len(mine), unit_size):
            run_id = f"{run_prefix}-u{len(units):05d}"
            units.append(Unit(run_id, domain, tuple(replace(s, run_id=run_id) for s in mine[start : start + unit_size])))
    return units


# -- one unit, on a worker ---------------------------------------------------------------------
def committed(sfs: StoreFS, unit: Unit) -> bool:
    return RunManifest.load(sfs, run_dir(sfs, "raw", unit.domain, unit.run_id)) is not None


def _staging_root(sfs: StoreFS, job_id: str) -> str:
    return sfs.join("jobs", job_id, "staging")


def _ledger_path(sfs: StoreFS, job_id: str, run_id: str) -> str:
    return sfs.join("jobs", job_id, "ledger", f"{run_id}.jsonl")


def _fault(point: str) -> None:
    """Fail once at ``point`` when a test asks for it (the marker file makes it once)."""
    spec = os.environ.get(FAULT_ENV, "")
    if spec.startswith(f"{point}:"):
        marker = Path(spec.split(":", 1)[1])
        with contextlib.suppress(FileExistsError):
            marker.open("x").close()
            raise RuntimeError(f"injected fault at {point}")


def _commit_local(staged: str, final: str) -> bool:
    os.makedirs(os.path.dirname(final), exist_ok=True)
    try:
        os.rename(staged, final)  # atomic; refused when an earlier attempt's folder is there
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    fd = os.open(os.path.dirname(final), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _commit_remote(sfs: StoreFS, staged: str, final: str, unit: Unit) -> bool:
    if committed(sfs, unit):
        return False
    sfs.makedirs(final)
    names = sorted(n for n in os.listdir(staged) if n not in (MANIFEST, ".lock"))
    for name in [*names, MANIFEST]:  # the manifest last: it is what makes the shards visible
        with open(os.path.join(staged, name), "rb") as src, sfs.fs.open_output_stream(f"{final}/{name}") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
    return True


def collect_unit(unit: Unit, store: str, retries: int) -> dict[str, Any]:
    """Run, stage and commit one unit; what happened, as a dict. Safe to call again."""
    sfs = StoreFS.open(store)
    job_id = unit.specs[0].job_id
    if committed(sfs, unit):
        return {"unit": unit.run_id, "status": "already committed"}
    results = [run_episode(spec, retries) for spec in unit.specs]
    if sfs.local:
        os.makedirs(_staging_root(sfs, job_id), exist_ok=True)
    stage = tempfile.mkdtemp(prefix=f"{unit.run_id}.", dir=_staging_root(sfs, job_id) if sfs.local else None)
    try:
        done = [r for r in results if r.ok and r.transitions]
        if done:
            with StoreWriter(stage, unit.run_id) as writer:
                for r in done:
                    writer.writer(unit.domain).write_episode(r.transitions)
        lines = "".join(json.dumps(ledger_entry(r)) + "\n" for r in results)
        ledger = _ledger_path(sfs, job_id, unit.run_id)
        sfs.makedirs(os.path.dirname(ledger))
        sfs.write_bytes_atomic(ledger, lines.encode())
        _fault("staged")
        won = False
        if done:
            staged, final = os.path.join(stage, "raw", unit.domain, unit.run_id), run_dir(sfs, "raw", unit.domain, unit.run_id)
            won = _commit_local(staged, final) if sfs.local else _commit_remote(sfs, staged, final, unit)
        _fault("committed")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {"unit": unit.run_id, "status": "committed" if won else ("lost to another attempt" if done else "nothing to commit"),
            "episodes": len(done), "transitions": sum(len(r.transitions) for r in done)}  # fmt: skip


# -- Beam wiring --------------------------------------------------------------------------------
def _collect_transform(store: str, retries: int):
    import apache_beam as beam

    from collectors.runner import _worker_exit

    class CollectUnit(beam.DoFn):
        def process(self, unit: Unit):
            out = collect_unit(unit, store, retries)
            beam.metrics.Metrics.counter("collect", "units_" + out["status"].replace(" ", "_")).inc()
            yield out

        def teardown(self) -> None:
            _worker_exit()  # close this worker's sandboxes

    return beam.ParDo(CollectUnit())


def run_beam_job(job: JobConfig, tasks: list[Task], store: str, *, runner: str, beam_args: list[str] | None = None,
                 unit_size: int = 4, log=None, units_hook=None) -> JobSummary:  # fmt: skip
    """Run the job's episodes not yet in the store as a Beam pipeline of units."""
    options = check_beam_options(beam_args_for(runner, list(beam_args or []), job.workers))
    import apache_beam as beam

    from sandboxes.gc import gc

    log = log or (lambda m: None)
    sfs = StoreFS.open(store)
    job_dir = sfs.join("jobs", job.job_id)
    sfs.makedirs(job_dir)
    run_id = f"{job.job_id}-beam-{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}"
    summary = JobSummary(job.job_id, run_id)
    t0 = time.monotonic()
    with sfs.lock(f"{job_dir}/.lock"):
        if sfs.local:  # attempts of killed earlier runs; no live run of this job exists (the lock)
            shutil.rmtree(_staging_root(sfs, job.job_id), ignore_errors=True)
        gc()
        specs = plan(job, tasks, run_id)
        done = done_trajectories(store, job.job_id)
        todo = [s for s in specs if s.trajectory_id not in done]
        units = make_units(todo, run_id, unit_size)
        summary.planned, summary.already_done = len(specs), len(specs) - len(todo)
        log(f"job {job.job_id}: {len(specs)} episodes planned, {summary.already_done} already done, "
            f"{len(todo)} to run in {len(units)} Beam units on {runner}")  # fmt: skip
        if units:
            elements = units_hook(units) if units_hook else units  # tests: duplicate elements
            p = beam.Pipeline(options=options)
            _ = (
                p
                | "Units" >> beam.Create(elements)
                | "Spread" >> beam.Reshuffle()
                | "Collect" >> _collect_transform(store, job.retries)
            )
            try:
                with watch(f"collect {job.job_id}", len(units), _committed_units(sfs, job.job_id, units), unit="units"):
                    p.run().wait_until_finish()
            except Exception as exc:  # committed units stay; a rerun collects the rest
                last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
                raise TrajforgeError(f"job {job.job_id}: Beam pipeline on {runner} failed: {last[:300]}") from exc
        _tally(sfs, job.job_id, units, summary)
        summary.seconds = time.monotonic() - t0
        sfs.makedirs(sfs.join("jobs", job.job_id, "runs"))
        sfs.write_bytes_atomic(
            sfs.join("jobs", job.job_id, "runs", f"{run_id}.json"), json.dumps(asdict(summary), indent=1).encode()
        )
    return summary


def _committed_units(sfs: StoreFS, job_id: str, units: list[Unit]):
    """For the driver's progress: how many of the units have their ledger (written by the
    worker that ran the unit, just before its commit)."""
    names = {f"{u.run_id}.jsonl" for u in units}
    folder = os.path.dirname(_ledger_path(sfs, job_id, units[0].run_id))
    return lambda: sum(i.base_name in names for i in sfs.listdir(folder))


def _tally(sfs: StoreFS, job_id: str, units: list[Unit], summary: JobSummary) -> None:
    """The summary from the units' ledgers (written by whichever worker ran each unit)."""
    for unit in units:
        path = _ledger_path(sfs, job_id, unit.run_id)
        if sfs.exists(path):
            for line in sfs.read_bytes(path).decode().splitlines():
                tally(json.loads(line), summary)


__all__ = ["Unit", "collect_unit", "make_units", "run_beam_job"]
