"""Beam collection mode: ``trajforge collect JOB.yaml --store S --runner R [Beam options]``.

The job's episodes not yet in the store are grouped into units (episodes of one domain,
``unit_size`` at a time) and become the elements of a Beam pipeline: units -> collect ->
shards. So the same Dataflow, Flink or Spark cluster that curates also collects, with the
project image as its SDK container; tests use Beam's local multi-process runner.

A unit is committed whole and at most once. A worker runs the unit's episodes as the local
runner does (``collectors.rollouts``: ``concurrency`` at once, with retries), writes them as
one run of the unit's own deterministic run id into a staging folder, then commits it: on a local or shared file
system by renaming the finished run folder into ``raw/<domain>/<run_id>`` (one atomic
rename; a second attempt's rename finds the folder there and is dropped); on an object
store by uploading the shards and then the manifest, which is what makes them visible,
after checking that no attempt has done so. A retried unit finds its commit and does
nothing, an attempt killed before the commit leaves only staging, which the next run of
the job clears. Reruns of the job collect what the store still lacks, like local runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from collectors.env import Task
from collectors.jobrun import EpisodeSpec, JobRun, JobSummary
from collectors.jobs import JobConfig
from collectors.rollouts import run_specs_blocking
from collectors.runner import ledger_entry
from pipelines.beam_options import beam_args_for, check_beam_options
from pipelines.progress import watch
from pipelines.store import Layout, Store, StoreWriter, publish_tree
from pipelines.store.manifest import RunManifest
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
def committed(store: Store, unit: Unit) -> bool:
    return RunManifest.load(store.sfs, store.layout.run_dir("raw", unit.domain, unit.run_id)) is not None


def _fault(point: str) -> None:
    """Fail once at ``point`` when a test asks for it (the marker file makes it once)."""
    spec = os.environ.get(FAULT_ENV, "")
    if spec.startswith(f"{point}:"):
        marker = Path(spec.split(":", 1)[1])
        with contextlib.suppress(FileExistsError):
            marker.open("x").close()
            raise RuntimeError(f"injected fault at {point}")


def collect_unit(unit: Unit, store: Store | str, retries: int) -> dict[str, Any]:
    """Run, stage and commit one unit; what happened, as a dict. Safe to call again."""
    store = Store.open(store, must_exist=False)
    sfs, layout = store.sfs, store.layout
    job_id = unit.specs[0].job_id
    if committed(store, unit):
        return {"unit": unit.run_id, "status": "already committed"}
    job = JobConfig.model_validate(unit.specs[0].job).model_copy(update={"retries": retries})
    results = run_specs_blocking(unit.specs, job)  # the unit's episodes, ``concurrency`` at once
    if sfs.local:  # staged beside the store: the commit is one rename on the same file system
        os.makedirs(layout.job_staging(job_id), exist_ok=True)
    stage = tempfile.mkdtemp(prefix=f"{unit.run_id}.", dir=layout.job_staging(job_id) if sfs.local else None)
    try:
        done = [r for r in results if r.ok and r.transitions]
        if done:
            with StoreWriter(stage, unit.run_id) as writer:
                for r in done:
                    writer.writer(unit.domain).write_episode(r.transitions)
        lines = "".join(json.dumps(ledger_entry(r, job)) + "\n" for r in results)
        ledger = layout.job_ledger(job_id, unit.run_id)
        sfs.makedirs(layout.job_ledger_dir(job_id))
        sfs.write_bytes_atomic(ledger, lines.encode())
        _fault("staged")
        won = False
        if done:
            staged = Layout(stage).run_dir("raw", unit.domain, unit.run_id)  # the stage is a store of its own
            won = publish_tree(sfs, staged, layout.run_dir("raw", unit.domain, unit.run_id))
        _fault("committed")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {
        "unit": unit.run_id,
        "status": "committed" if won else ("lost to another attempt" if done else "nothing to commit"),
        "episodes": len(done),
        "transitions": sum(len(r.transitions) for r in done),
    }


# -- Beam wiring --------------------------------------------------------------------------------
def _collect_transform(store: str, retries: int):
    """The Beam step that collects units; ``store`` is the store's URI (workers open it)."""
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


def run_beam_job(
    job: JobConfig,
    tasks: list[Task],
    store: Store | str,
    *,
    runner: str,
    beam_args: list[str] | None = None,
    unit_size: int = 4,
    log=None,
    units_hook=None,
) -> JobSummary:
    """Run the job's episodes not yet in the store as a Beam pipeline of units."""
    options = check_beam_options(beam_args_for(runner, list(beam_args or []), job.workers))
    import apache_beam as beam

    from sandboxes.gc import gc

    log = log or (lambda m: None)
    run = JobRun(job, tasks, store, label="beam")
    store = run.store
    with run:
        if store.sfs.local:  # attempts of killed earlier runs; no live run of this job exists (the lock)
            shutil.rmtree(store.layout.job_staging(job.job_id), ignore_errors=True)
        gc()
        todo = run.todo()
        units = make_units(todo, run.run_id, unit_size)
        log(
            f"job {job.job_id}: {run.summary.planned} episodes planned, {run.summary.already_done} already done, "
            f"{len(todo)} to run in {len(units)} Beam units on {runner}"
        )
        if units:
            elements = units_hook(units) if units_hook else units  # tests: duplicate elements
            p = beam.Pipeline(options=options)
            _ = (
                p
                | "Units" >> beam.Create(elements)
                | "Spread" >> beam.Reshuffle()
                | "Collect" >> _collect_transform(store.uri, job.retries)
            )
            try:
                with watch(f"collect {job.job_id}", len(units), _committed_units(store, job.job_id, units), unit="units"):
                    p.run().wait_until_finish()
            except Exception as exc:  # committed units stay; a rerun collects the rest
                last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
                raise TrajforgeError(f"job {job.job_id}: Beam pipeline on {runner} failed: {last[:300]}") from exc
        for unit in units:  # the summary from the units' ledgers (written by whichever worker ran each unit)
            run.count_ledger(unit.run_id)
    return run.summary


def _committed_units(store: Store, job_id: str, units: list[Unit]):
    """For the driver's progress: how many of the units have their ledger (written by the
    worker that ran the unit, just before its commit)."""
    names = {f"{u.run_id}.jsonl" for u in units}
    folder = store.layout.job_ledger_dir(job_id)
    return lambda: sum(i.base_name in names for i in store.sfs.listdir(folder))


__all__ = ["Unit", "collect_unit", "make_units", "run_beam_job"]
