"""Curation on a Dask cluster against Beam's in-process runner.

    python benchmarks/beam_dask.py [--n 200000] [--repeats 1]

One store of synthetic transitions (10% planted duplicates), copied fresh for each run of
``trajforge curate examples/curation/default.yaml --engine beam``: on Beam's in-process
runner (multi-process, one worker per core: the default), and on a
``distributed.LocalCluster`` of 1 and of 2 worker processes (one thread each) through
``--runner DaskRunner``. Reports wall time (median of the repeats), the peak memory of each
Dask worker process (its VmHWM, read from the worker after the run), the speed-up of 2
workers over 1, and what the measured cost per transition says of 100M transitions on 100
cores. Every run's curated and rejected files must equal the in-process runner's, byte for
byte (the report's timings aside).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _hwm_mb() -> float:
    return int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) / 1e3


def written(store: Path) -> str:
    """A digest of every file the curation wrote (kept and rejected rows, indexes), less the
    report's timings: two runners that agree byte for byte give the same digest."""
    h = hashlib.blake2b(digest_size=16)
    for part in ("curated", "rejected"):
        for p in sorted(Path(store, part).rglob("*")):
            if p.is_file() and p.name != "report.json":
                h.update(str(p.relative_to(store)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def curate(base: Path, work: Path, extra: list[str]) -> tuple[float, dict]:
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(base, store)
    args = [sys.executable, "-m", "trajforge", "curate", "examples/curation/default.yaml", "--store", str(store)]
    t0 = time.perf_counter()
    proc = subprocess.run([*args, "--engine", "beam", "--json", *extra], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"curation failed ({' '.join(extra) or 'in-process'}): {proc.stderr.strip()[-2000:]}")
    return wall, json.loads(proc.stdout) | {"written": written(store)}


def on_dask(base: Path, work: Path, workers: int, repeats: int) -> dict:
    from distributed import Client, LocalCluster

    walls, peaks, report = [], [], {}
    for _ in range(repeats):  # a fresh cluster each time: a worker's high-water mark is its whole life's
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c:
            wall, report = curate(base, work, ["--runner", "DaskRunner", f"--dask_client_address={c.scheduler_address}"])
            with Client(c) as client:
                peaks += list(client.run(_hwm_mb).values())
        walls.append(wall)
    return {"wall": statistics.median(walls), "worker_peak_mb": max(peaks), "kept": report["kept"], "written": report["written"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="trajforge-dask-"))
    try:
        base = work / "base"
        synth = [sys.executable, "-m", "trajforge", "synth", str(base), "-n", str(args.n), "--duplicates", "0.1", "--seed", "11"]
        subprocess.run(synth, check=True, capture_output=True, cwd=ROOT)
        walls, kept, files = [], None, None
        for _ in range(args.repeats):
            wall, report = curate(base, work, [])
            walls.append(wall)
            kept, files = report["kept"], report["written"]
        rows = {"in-process (DirectRunner, 1 worker per core)": {"wall": statistics.median(walls), "worker_peak_mb": None}}
        for workers in (1, 2):
            r = on_dask(base, work, workers, args.repeats)
            assert r["kept"] == kept, f"Dask with {workers} worker(s) kept {r['kept']}, the in-process runner {kept}"
            assert r["written"] == files, f"Dask with {workers} worker(s) wrote other files than the in-process runner"
            rows[f"Dask, {workers} worker{'s' if workers > 1 else ''}"] = r
        one, two = rows["Dask, 1 worker"]["wall"], rows["Dask, 2 workers"]["wall"]
        print(f"# {args.n:,} transitions, {platform.node()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
        print("| runner | wall s | transitions/s | peak MB per Dask worker |")
        print("|---|---:|---:|---:|")
        for name, r in rows.items():
            peak = f"{r['worker_peak_mb']:.0f}" if r["worker_peak_mb"] else "-"
            print(f"| {name} | {r['wall']:.1f} | {args.n / r['wall']:,.0f} | {peak} |")
        core_s = two * 2 / args.n  # core-seconds per transition on the 2-worker cluster
        local = rows["in-process (DirectRunner, 1 worker per core)"]["wall"]
        print(f"\nspeed-up, 2 workers over 1: {one / two:.2f}x; 2 Dask workers take {two / local:.2f}x the in-process wall time")
        print(
            f"cost: {core_s * 1e3:.2f} core-ms per transition; 100M transitions on 100 cores at this cost, "
            f"if it scales linearly: {1e8 * core_s / 100 / 3600:.1f} h"
        )
        print(json.dumps({"n": args.n, "kept": kept, "rows": rows, "core_ms_per_transition": core_s * 1e3}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
