"""A/B: one command timed on two revisions of this repository in the same run.

Refactors promise "no slower". This checks it on a shared, noisy machine the only fair way:
the same command, run from a clean worktree of each revision, rounds interleaved
(A B A B ...), wall seconds per round, medians and the ratio B/A.

    python benchmarks/ab.py --base HEAD~5 --rounds 3 -- python benchmarks/store.py --transitions 100000

Each side runs in its own checkout (``git worktree``), with ``PYTHONPATH`` set to it, so the
benchmark script and the code it imports are that revision's. ``--head`` defaults to the
working tree itself (uncommitted changes included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def checkout(rev: str, where: Path) -> Path:
    git = ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), rev]
    subprocess.run(git, check=True, capture_output=True)
    return where


def timed(cmd: list[str], tree: Path, log) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log.write(f"$ (cd {tree} && {' '.join(cmd)})  # {seconds:.2f} s, exit {proc.returncode}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        sys.exit(f"{tree}: {' '.join(cmd)} failed (exit {proc.returncode}); see the log")
    return seconds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the revision to compare against (A)")
    ap.add_argument("--head", help="the revision measured (B); default: this working tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--log", default=str(Path(tempfile.gettempdir()) / "ab.log"), help="the commands' output")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command, run in each checkout")
    args = ap.parse_args(argv)
    cmd = [c for c in args.command if c != "--"] or sys.exit("give the command after --")
    cmd = [sys.executable if c in ("python", "python3") else c for c in cmd]
    with tempfile.TemporaryDirectory() as tmp, open(args.log, "w") as log:
        a = checkout(args.base, Path(tmp) / "a")
        b = checkout(args.head, Path(tmp) / "b") if args.head else ROOT
        try:
            times: dict[str, list[float]] = {"A": [], "B": []}
            for r in range(args.rounds):
                for side, tree in (("A", a), ("B", b)) if r % 2 == 0 else (("B", b), ("A", a)):
                    times[side].append(timed(cmd, tree, log))
                    print(f"round {r + 1} {side}: {times[side][-1]:.2f} s", flush=True)
        finally:
            for tree in (a, b):
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    ma, mb = statistics.median(times["A"]), statistics.median(times["B"])
    print(f"A {args.base}: median {ma:.2f} s {times['A']}")
    print(f"B {args.head or 'working tree'}: median {mb:.2f} s {times['B']}")
    print(f"B/A {mb / ma:.3f}")


if __name__ == "__main__":
    main()
