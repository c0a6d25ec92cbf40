"""A collection job as a 2-task Slurm array against one unsharded run of the same job.

    python benchmarks/slurm.py [--episodes-per-task 4] [--repeats 3]

The job: the example terminal suite (examples/tasks/terminal.yaml, scripted actions) in the
local sandbox, ``workers: 1``. Timed, each into a fresh store, median of ``--repeats``:
  unsharded   ``trajforge collect JOB`` on this host, outside Slurm;
  workers 2   the same episodes in one run with ``workers: 2`` (the in-process way to use 2 cores);
  array       ``deploy/slurm/collect-array.sh`` as ``sbatch --array=0-1 --cpus-per-task=1``
              on a one-node Slurm of 2 CPUs (tests/deploy/slurm_cluster.py), from sbatch
              until squeue shows no task (polled every 50 ms).
Beside the array's wall time: its slowest task's own run time (from its summary line) and
the rest, which is Slurm's start and finish plus the second CLI start. Needs root and
slurm-wlm, munge (make system-deps) and the sandbox root (make sandboxes). Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.jobrun import plan, shard_of
from collectors.jobs import load_job
from pipelines.query import run_query
from tests.deploy.slurm_cluster import slurm_cluster

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "slurm" / "collect-array.sh"
TRAJFORGE = [sys.executable, str(ROOT / "trajforge.py")]


def write_job(folder: Path, episodes_per_task: int, workers: int) -> Path:
    path = folder / f"job-w{workers}.yaml"
    body = {
        "job_id": "bench-slurm",
        "tasks": [str(ROOT / "examples" / "tasks" / "terminal.yaml")],
        "policy": {"kind": "scripted"},
        "episodes_per_task": episodes_per_task,
        "workers": workers,
        "sandbox": {"backend": "local"},
    }
    path.write_text(yaml.safe_dump(body))
    return path


def count(store: Path) -> int:
    return run_query("SELECT count(DISTINCT trajectory_id) AS n FROM transitions", str(store)).to_pylist()[0]["n"]


def run_seconds(log: str) -> float:
    """A run's own time, from its summary line (``... retried, 4.2 s``)."""
    return float(re.findall(r"retried, ([\d.]+) s", log)[-1])


def unsharded(job: Path, store: Path) -> tuple[float, float]:
    """Wall time of one run, and its own run time."""
    t0 = time.perf_counter()
    proc = subprocess.run([*TRAJFORGE, "collect", str(job), "--store", str(store)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"collect failed: {proc.stderr[-2000:]}")
    return wall, run_seconds(proc.stdout + proc.stderr)


def array(cluster, job: Path, store: Path, logs: Path) -> tuple[float, float]:
    """Wall time of the 2-task array, and its slowest task's own run time."""
    logs.mkdir(parents=True, exist_ok=True)
    env = {"JOB": str(job), "STORE": str(store), "TRAJFORGE": " ".join(TRAJFORGE)}
    args = ["--array=0-1", "--cpus-per-task=1", "--mem=1G", f"--output={logs}/%A-%a.log", str(SCRIPT)]
    t0 = time.perf_counter()
    jid = cluster.sbatch(*args, env=env, cwd=logs)
    states = cluster.wait(jid, poll=0.05)
    wall = time.perf_counter() - t0
    if set(states.values()) != {"COMPLETED"}:
        raise SystemExit(f"array {jid}: {states}\n{cluster.logs()}")
    return wall, max(run_seconds((logs / f"{jid}-{i}.log").read_text()) for i in (0, 1))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes-per-task", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from sandboxes.images import build_root

    build_root(log=lambda m: print(m, file=sys.stderr))
    work = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    try:
        job1, job2 = (write_job(work, args.episodes_per_task, w) for w in (1, 2))
        specs = plan(*load_job(job1), "")
        split = [sum(shard_of(s.key, 2) == i for s in specs) for i in (0, 1)]
        walls: dict[str, list[float]] = {"unsharded": [], "workers 2": [], "array": []}
        own: dict[str, list[float]] = {k: [] for k in walls}  # the (slowest) run's own time
        with slurm_cluster(work / "slurm") as cluster:
            for r in range(args.repeats):
                for name, job in (("unsharded", job1), ("workers 2", job2)):
                    store = work / f"{name.replace(' ', '')}-{r}"
                    wall, run = unsharded(job, store)
                    assert count(store) == len(specs)
                    walls[name].append(wall)
                    own[name].append(run)
                store = work / f"array-{r}"
                wall, run = array(cluster, job1, store, work / f"logs-{r}")
                assert count(store) == len(specs)
                walls["array"].append(wall)
                own["array"].append(run)
        med = {k: statistics.median(v) for k, v in walls.items()}
        print(
            f"# {len(specs)} episodes (terminal suite x {args.episodes_per_task}, shards of {split[0]} and {split[1]}),"
            f" median of {args.repeats}; {platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d}"
        )
        print("| run | wall s | episodes/s | speed-up over unsharded | run's own s (array: slowest task) | the rest s |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, wall in med.items():
            run = statistics.median(own[name])
            speedup = med["unsharded"] / wall
            print(f"| {name} | {wall:.1f} | {len(specs) / wall:.2f} | {speedup:.2f}x | {run:.1f} | {wall - run:.1f} |")
        print("\nthe rest: the CLI's start and, for the array, Slurm's start and end of its tasks")
        print("each run, wall s:", {k: [round(x, 1) for x in v] for k, v in walls.items()})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
