"""Curation benchmark: the full pipeline on synthetic transitions with planted duplicates.

    python benchmarks/curate.py [--sizes 250000,500000,1000000]

For each size: a fresh store of synthetic transitions (5% exact and 5% near-duplicate
trajectories planted), then ``trajforge curate`` with the default config on Beam's
in-process runner in multi-process mode (one worker per core). Reports transitions/s per
core, peak memory of the driver, of the largest child (``ru_maxrss``) and, sampled per
process, of the largest pass process and Beam worker, and duplicates found vs planted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def descendants(root: int) -> list[int]:
    """Every live process under ``root`` (from each process's parent in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int(entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


class PeakSampler(threading.Thread):
    """Samples the peak resident memory (VmHWM) of every process under ``root`` twice a
    second, by role: a pass process (spawned by ``run.curate``), a Beam SDK worker, or
    other. VmHWM is the process's own high-water mark, so a sample misses at most what a
    process gained in its last half second. ``ru_maxrss`` of the children cannot say which
    process peaked; this can."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.peaks, self.done = root, {}, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            for pid in descendants(self.root):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    kb = _status_kb(pid, "VmHWM")
                except OSError:
                    continue
                role = "beam" if "sdk_worker_main" in cmd else "pass" if "spawn_main" in cmd else "other"
                old = self.peaks.get(pid, (role, 0))[1]
                self.peaks[pid] = (role, max(old, kb))

    def largest_mb(self, role: str) -> float:
        return max((kb for r, kb in self.peaks.values() if r == role), default=0) / 1e3


def run_size(n: int, work: Path, per_pass: int, keep: str | None = None) -> dict:
    store = work / f"store-{n}"
    subprocess.run(
        [sys.executable, "-m", "trajforge", "synth", str(store), "-n", str(n), "--duplicates", "0.1", "--seed", "11"],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    planted = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"from collectors.synth import Synthesizer as S; g=S(11, duplicates=0.1); "
                f"all(True for _ in g.transitions({n})); import json; g.summary.planted = len(g.summary.planted); "
                "print(json.dumps(g.summary.__dict__))",
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout
    )
    code = (
        "import json, resource; from pipelines.curate.config import load_curation; from pipelines.curate.run import curate;"
        f"cfg = load_curation('examples/curation/default.yaml'); cfg.max_transitions_per_pass = {per_pass};"
        f"r = curate(cfg, {str(store)!r}, log=lambda m: None);"
        "import dataclasses; d = dataclasses.asdict(r);"
        "d['self_rss_mb'] = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1e3;"
        "d['children_rss_mb'] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e3; print(json.dumps(d))"
    )
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    sampler = PeakSampler(proc.pid)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.done.set()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"curation of {n:,} transitions failed (exit {proc.returncode}): {stderr.strip()[-2000:]}")
    report = json.loads(stdout.strip().splitlines()[-1])
    import duckdb

    rejected = duckdb.sql(
        f"SELECT stage, count(DISTINCT trajectory_id) FROM read_parquet('{store}/rejected/*/attributes.parquet') GROUP BY 1"
    ).fetchall()
    found = dict(rejected)
    if keep:
        shutil.rmtree(keep, ignore_errors=True)
        shutil.move(str(store), keep)  # e.g. for benchmarks/release.py --store
    else:
        shutil.rmtree(store)
    return {
        "n": n,
        "wall": wall,
        "rate_core": n / wall / (os.cpu_count() or 1),
        "beam": report["seconds"]["beam"],
        "finalise": report["seconds"]["finalise"],
        "driver_mb": report["self_rss_mb"],
        "worker_mb": report["children_rss_mb"],
        "pass_mb": sampler.largest_mb("pass"),
        "beam_mb": sampler.largest_mb("beam"),
        "passes": len(report["index_rows"]),
        "exact_found": found.get("exact_dedup", 0),
        "near_found": found.get("near_dedup", 0),
        "exact_planted": planted["exact_duplicate_trajectories"],
        "near_planted": planted["near_duplicate_trajectories"],
        "kept": report["kept"],
        "rejected": report["rejected"],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="250000,500000,1000000")
    ap.add_argument("--max-per-pass", type=int, default=100_000, help="transitions per Beam pass (bounds memory)")
    ap.add_argument("--keep-largest", help="keep the largest size's curated store at this path")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="trajforge-curate-"))
    try:
        sizes = [int(n) for n in args.sizes.split(",")]
        rows = [run_size(n, work, args.max_per_pass, args.keep_largest if n == max(sizes) else None) for n in sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n### Curation ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, DirectRunner multi_processing, "
        f"{args.max_per_pass:,} transitions per Beam pass)\n"
    )
    print(
        "| transitions | wall s | Beam passes s | finalise s | transitions/s per core | driver peak MB "
        "| largest child peak MB | largest pass process peak MB | largest Beam worker peak MB | passes "
        "| exact dup trajectories found / planted | near found / planted |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['n']:,} | {r['wall']:.0f} | {r['beam']:.0f} | {r['finalise']:.0f} | {r['rate_core']:.0f} "
            f"| {r['driver_mb']:.0f} | {r['worker_mb']:.0f} | {r['pass_mb']:.0f} | {r['beam_mb']:.0f} | {r['passes']} "
            f"| {r['exact_found']} / {r['exact_planted']} "
            f"| {r['near_found']} / {r['near_planted']} |"
        )


if __name__ == "__main__":
    main()
