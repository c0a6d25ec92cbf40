"""Collection scaling benchmark: throughput of one terminal+SWE job with 1, 2 and 4 local
worker processes (the job's ``workers``), and the scaling curve as ratios against 1 worker.

    python benchmarks/collect_scale.py [--episodes-per-task 8] [--workers 1,2,4] [--rounds 3]

Each round runs the whole job into a fresh store with ``trajforge collect``'s own code
(``run_job``: planning, worker processes with their sandboxes on the local backend, the
parent writing every episode), once per worker count, counts alternating so that load from
elsewhere falls on all of them alike. The figure per count is the median over rounds of
episodes per second of wall time, the job's whole run (sandbox start-up included).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.jobs import load_job
from collectors.runner import run_job

ROOT = Path(__file__).resolve().parents[1]


def make_job(folder: Path, episodes_per_task: int) -> Path:
    """The terminal-swe example job with more episodes per task."""
    import yaml

    body = yaml.safe_load((ROOT / "examples" / "jobs" / "terminal-swe.yaml").read_text())
    suites = [str(ROOT / "examples" / "tasks" / name) for name in ("terminal.yaml", "swe.yaml")]
    body |= {"job_id": "scale", "episodes_per_task": episodes_per_task, "tasks": suites}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def one_run(job_file: Path, workers: int, store: Path) -> dict[str, float]:
    job, tasks = load_job(job_file)
    job = job.model_copy(update={"workers": workers})
    t0 = time.monotonic()
    summary = run_job(job, tasks, str(store), log=lambda m: None)
    seconds = time.monotonic() - t0
    if summary.failed:
        raise SystemExit(f"{summary.failed} episodes failed: {summary.failures}")
    return {"seconds": seconds, "episodes": summary.collected, "transitions": summary.transitions}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes-per-task", type=int, default=8)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="collect-scale-"))
    try:
        job_file = make_job(tmp, args.episodes_per_task)
        one_run(job_file, 1, tmp / "warm")  # warm the Debian root, page cache and imports
        runs: dict[int, list[dict[str, float]]] = {w: [] for w in counts}
        for r in range(args.rounds):
            for w in counts if r % 2 == 0 else reversed(counts):
                store = tmp / f"store-{w}-{r}"
                runs[w].append(one_run(job_file, w, store))
                shutil.rmtree(store)
                print(f"round {r + 1} workers {w}: {runs[w][-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = {}
    for w in counts:
        seconds = statistics.median(x["seconds"] for x in runs[w])
        rows[w] = {
            "seconds": seconds,
            "episodes": runs[w][0]["episodes"],
            "transitions": runs[w][0]["transitions"],
            "episodes_per_s": runs[w][0]["episodes"] / seconds,
            "steps_per_s": runs[w][0]["transitions"] / seconds,
            "all_seconds": [round(x["seconds"], 2) for x in runs[w]],
        }
    base = rows[counts[0]]["seconds"]
    print(
        f"Collection scaling ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{rows[counts[0]]['episodes']} terminal+SWE episodes, local backend, median of {args.rounds})\n"
    )
    print("| workers | wall s (median) | episodes/s | steps/s | speed-up vs 1 worker | runs (s) |")
    print("|---:|---:|---:|---:|---:|---|")
    for w, row in rows.items():
        print(
            f"| {w} | {row['seconds']:.1f} | {row['episodes_per_s']:.2f} | {row['steps_per_s']:.1f} | "
            f"{base / row['seconds']:.2f}x | {', '.join(map(str, row['all_seconds']))} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({str(w): r for w, r in rows.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
