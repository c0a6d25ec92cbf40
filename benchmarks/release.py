"""Release benchmark: build a release (CPT, SFT, RL; the default mixture) from curated data.

    python benchmarks/release.py [--sizes 1000000] [--store CURATED_STORE] [--reruns 5]

For each size: synthetic transitions (5% exact, 5% near copies planted), the default
curation, a byte-level BPE tokenizer trained on the store (4,096 tokens); none of that is
timed. Then ``trajforge release create`` with the default mixture on Beam's in-process
runner in multi-process mode (one worker per core), timed. Reports samples/s and tokens/s
per core, peak memory, and the release's bytes against the curated shards' bytes. Then the
same command again on the unchanged inputs, ``--reruns`` times: the CLI's wall time (process
start included) and the in-process call, medians; each must answer "identical" from the
manifest's input hash, against the first build's time measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "trajforge", *args], check=True, capture_output=True, text=True, cwd=ROOT).stdout


def reruns(store: Path, times: int) -> dict:
    """The unchanged rerun: ``trajforge release create`` (wall, process start included) and the
    in-process ``create_release`` call, medians of ``times``."""
    cli, calls = [], []
    for _ in range(times):
        t0 = time.perf_counter()
        out = _run(
            "release", "create", "examples/mixtures/default.yaml", "--store", str(store), "--name", "bench", "--version", "1"
        )
        cli.append(time.perf_counter() - t0)
        if "identical" not in out:
            sys.exit(f"the rerun rebuilt instead of answering identical:\n{out}")
        code = (
            "import time; from pipelines.release.config import load_mixture; from pipelines.release.build import create_release;"
            f"cfg = load_mixture('examples/mixtures/default.yaml', {str(store)!r}); t = time.perf_counter();"
            f"r = create_release(cfg, {str(store)!r}, 'bench', '1', log=lambda m: None); "
            "print(time.perf_counter() - t, r.identical)"
        )
        took, identical = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
        ).stdout.split()[-2:]
        assert identical == "True"
        calls.append(float(took))
    return {"rerun_cli": statistics.median(cli), "rerun_call": statistics.median(calls), "reruns": times}


def run_size(n: int, work: Path, existing: str | None = None, times: int = 0) -> dict:
    store = Path(existing) if existing else work / f"store-{n}"
    if not existing:
        _run("synth", str(store), "-n", str(n), "--duplicates", "0.1", "--seed", "11")
        _run("curate", "examples/curation/default.yaml", "--store", str(store))
    if not (store / "tokenizer.json").exists():
        _run("tokenizer", "train", "--store", str(store), "--out", str(store / "tokenizer.json"), "--vocab-size", "4096")
    shutil.rmtree(store / "releases" / "bench", ignore_errors=True)
    curated = sum(f.stat().st_size for f in (store / "curated").rglob("*.arrow"))
    kept = json.loads(next((store / "curated").glob("*/report.json")).read_text())["kept"]
    code = (
        "import json, resource, dataclasses; from pipelines.release.config import load_mixture;"
        "from pipelines.release.build import create_release;"
        f"cfg = load_mixture('examples/mixtures/default.yaml', {str(store)!r});"
        f"r = create_release(cfg, {str(store)!r}, 'bench', '1', log=lambda m: None);"
        "d = dataclasses.asdict(r);"
        "d['self_rss_mb'] = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1e3;"
        "d['children_rss_mb'] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e3; print(json.dumps(d))"
    )
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if out.returncode:
        sys.exit(
            f"release create failed after {wall:.0f} s:\n"
            + "\n".join(line for line in out.stderr.splitlines() if not line.startswith(("INFO:", "WARNING:root")))[-6000:]
        )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    release = Path(report["path"])
    size = sum(f.stat().st_size for f in release.rglob("*") if f.is_file())
    by_stage = {st: sum(splits.values()) for st, splits in report["samples"].items()}
    tokens = {st: sum(splits.values()) for st, splits in report["tokens"].items()}
    cores = os.cpu_count() or 1
    return {
        "n": n,
        "kept": kept,
        "wall": wall,
        "samples": sum(by_stage.values()),
        "by_stage": by_stage,
        "tokens": sum(tokens.values()),
        "samples_core": sum(by_stage.values()) / wall / cores,
        "tokens_core": sum(tokens.values()) / wall / cores,
        "driver_mb": report["self_rss_mb"],
        "worker_mb": report["children_rss_mb"],
        "curated_mb": curated / 1e6,
        "release_mb": size / 1e6,
        **(reruns(store, times) if times else {}),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000")
    ap.add_argument(
        "--store",
        help="a store curated already (e.g. by benchmarks/curate.py --keep-largest); its size is the raw transitions it holds",
    )
    ap.add_argument("--reruns", type=int, default=5, help="unchanged reruns timed after the build (0: none)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="trajforge-release-"))
    try:
        if args.store:
            raw = json.loads(next(Path(args.store, "curated").glob("*/report.json")).read_text())["transitions_in"]
            rows = [run_size(raw, work, args.store, args.reruns)]
        else:
            rows = [run_size(int(n), work, times=args.reruns) for n in args.sizes.split(",")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n### Release build ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, DirectRunner multi_processing, "
        "default mixture: CPT + SFT + RL; a given --store uses its own tokenizer, else a 4,096-token BPE)\n"
    )
    print(
        "| raw transitions | curated kept | wall s | samples (cpt / sft / rl) | tokens | samples/s per core "
        "| tokens/s per core | driver peak MB | largest worker peak MB | curated MB | release MB | release / curated |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        st = r["by_stage"]
        print(
            f"| {r['n']:,} | {r['kept']:,} | {r['wall']:.0f} | {st.get('cpt', 0):,} / {st.get('sft', 0):,} / "
            f"{st.get('rl', 0):,} | {r['tokens']:,} | {r['samples_core']:.0f} | {r['tokens_core']:,.0f} "
            f"| {r['driver_mb']:.0f} | {r['worker_mb']:.0f} | {r['curated_mb']:.0f} | {r['release_mb']:.0f} "
            f"| {r['release_mb'] / r['curated_mb']:.2f}x |"
        )
    if any("rerun_cli" in r for r in rows):
        print("\nUnchanged rerun (answered from the manifest's input hash, no Beam), medians:\n")
        print("| raw transitions | first build s | reruns | `release create` wall s | `create_release` call s | build / rerun |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['n']:,} | {r['wall']:.1f} | {r['reruns']} | {r['rerun_cli']:.2f} | {r['rerun_call']:.3f} "
                f"| {r['wall'] / r['rerun_cli']:.0f}x |"
            )


if __name__ == "__main__":
    main()
