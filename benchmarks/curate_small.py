"""A small curation end to end, from the command line: in this process against on Beam.

    python benchmarks/curate_small.py [--transitions 1000] [--repeats 5]

Writes one synthetic store (all seven domains, 10% duplicates), copies it once per run,
and times ``python trajforge.py curate examples/curation/default.yaml --store COPY
--engine E`` as a user would run it (a fresh interpreter, imports included), alternating
``local`` (the default for 10,000 transitions or fewer) and ``beam``. Reports median wall
seconds and the ratio; the goal (issue 24) is a 1,000-transition curation under 5 s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transitions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    from collectors.synth import synth_store

    tmp = Path(tempfile.mkdtemp(prefix="trajforge-curate-small-"))
    try:
        synth_store(str(tmp / "source"), transitions=args.transitions, seed=1, duplicates=0.1)
        runs: dict[str, list[float]] = {"local": [], "beam": []}
        for r in range(args.repeats):
            for engine in ("local", "beam") if r % 2 == 0 else ("beam", "local"):
                store = tmp / f"{engine}-{r}"
                shutil.copytree(tmp / "source", store)
                cmd = [sys.executable, str(ROOT / "trajforge.py"), "curate", str(ROOT / "examples/curation/default.yaml")]
                t0 = time.perf_counter()
                subprocess.run([*cmd, "--store", str(store), "--engine", engine], check=True, capture_output=True)
                runs[engine].append(time.perf_counter() - t0)
                print(f"  {engine} run {r + 1}: {runs[engine][-1]:.2f} s", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    local, beam = statistics.median(runs["local"]), statistics.median(runs["beam"])
    day = time.strftime("%Y-%m-%d")
    print(f"\n### A {args.transitions:,}-transition curation end to end ({day}, median of {args.repeats})\n")
    print("| engine | median s | runs s | vs beam |")
    print("|---|---|---|---|")
    for engine, secs in runs.items():
        med = statistics.median(secs)
        print(f"| {engine} | {med:.2f} | {', '.join(f'{s:.2f}' for s in secs)} | {med / beam:.2f}x |")
    verdict = "met" if local < 5 else "MISSED"
    print(f"\nGoal: a {args.transitions:,}-transition curation under 5 s: {verdict} ({local:.2f} s in this process).")


if __name__ == "__main__":
    main()
