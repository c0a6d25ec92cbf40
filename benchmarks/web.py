"""Web benchmark: steps per second, observation extraction and reset times, parallel browsers.

    python benchmarks/web.py [--rounds 3] [--workers 1,2,4]

Each round replays every scripted task of ``examples/tasks/web.yaml`` (real Chromium, the
shipped sites) in one environment: steps/s (action + settle + observation), the
observation's extraction time p50/p95, beside Playwright's own ``aria_snapshot()`` of the
same page (the baseline, measured in the same run), and reset time p50/p95. Then 1, 2, 4
worker processes, one browser each, replaying the tasks for ``--seconds``: total steps/s
and per core.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _tasks():
    from collectors.env import load_suite

    return load_suite(ROOT / "examples" / "tasks" / "web.yaml")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def single(rounds: int) -> dict:
    from collectors.web.env import WebEnv
    from collectors.web.page import WALK_JS

    steps, observe, baseline, walk, resets, seconds = 0, [], [], [], [], 0.0
    with WebEnv() as env:
        env.reset(task=_tasks()[0])  # browser start, not timed
        for _ in range(rounds):
            for task in _tasks():
                _, info = env.reset(seed=0, task=task)
                resets.append(info["reset_ms"])
                for action in task.actions:
                    t0 = time.perf_counter()
                    _, _, _, _, info = env.step(action)
                    seconds += time.perf_counter() - t0
                    steps += 1
                    observe.append(info["observe_ms"])
                    t1 = time.perf_counter()
                    env.page.locator("body").aria_snapshot()
                    t2 = time.perf_counter()
                    env.page.evaluate(WALK_JS, env.options.obs_cap_chars)
                    t3 = time.perf_counter()
                    baseline.append((t2 - t1) * 1000)
                    walk.append((t3 - t2) * 1000)
    return {"steps": steps, "steps_s": steps / seconds, "observe": observe, "walk": walk, "baseline": baseline, "resets": resets}


def _worker(seconds: float, out) -> None:
    from collectors.web.env import WebEnv

    tasks, steps = _tasks(), 0
    with WebEnv() as env:
        env.reset(task=tasks[0])
        out.put(("ready", 0))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for task in tasks:
                env.reset(seed=0, task=task)
                for action in task.actions:
                    env.step(action)
                    steps += 1
    out.put(("done", steps))


def parallel(workers: int, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(seconds, q)) for _ in range(workers)]
    for p in procs:
        p.start()
    for _ in procs:  # all browsers up before the clock starts
        q.get()
    t0 = time.monotonic()
    total = sum(q.get()[1] for _ in procs)
    wall = time.monotonic() - t0
    for p in procs:
        p.join()
    return total / wall


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args(argv)
    s = single(args.rounds)
    cores = os.cpu_count() or 1
    par = [(int(w), parallel(int(w), args.seconds)) for w in args.workers.split(",")]
    print(
        f"\n### Web (Chromium {_chromium_version()}, {time.strftime('%Y-%m-%d')}, {cores} cores, {args.rounds} rounds of "
        f"{len(_tasks())} scripted tasks = {s['steps']} steps)\n"
    )
    print("| what | p50 ms | p95 ms |")
    print("|---|---|---|")
    print(f"| step (action + settle + observation), one environment | {1000 / s['steps_s']:.0f} (mean) | - |")
    obs = s["observe"]
    print(f"| observation (tree walk + header + extra), in the step | {_pct(obs, 0.5):.1f} | {_pct(obs, 0.95):.1f} |")
    print(f"| tree walk alone (WALK_JS) | {_pct(s['walk'], 0.5):.1f} | {_pct(s['walk'], 0.95):.1f} |")
    print(
        f"| baseline: Playwright aria_snapshot() of the same page | {_pct(s['baseline'], 0.5):.1f} "
        f"| {_pct(s['baseline'], 0.95):.1f} |"
    )
    print(
        f"| reset (new context, fresh database, open start page, settle) | {_pct(s['resets'], 0.5):.0f} "
        f"| {_pct(s['resets'], 0.95):.0f} |"
    )
    ratio = statistics.median(s["walk"]) / statistics.median(s["baseline"])
    print(f"\nTree walk / aria_snapshot (medians): {ratio:.2f}x. One environment: {s['steps_s']:.1f} steps/s.\n")
    print("| worker processes (one browser each) | steps/s | steps/s per core |")
    print("|---|---|---|")
    for w, rate in par:
        print(f"| {w} | {rate:.1f} | {rate / cores:.1f} |")


def _chromium_version() -> str:
    import subprocess

    from collectors.web.env import chromium_path

    path = chromium_path()
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.split() if path else []
    return out[1] if len(out) > 1 else "(Playwright's)"


if __name__ == "__main__":
    main()
