"""Collection benchmark: environment steps per second for terminal and SWE on both
backends, episode reset time, and what recording costs over the bare calls.

    python benchmarks/collect.py [--episodes 6]

Three timings of the same scripted episodes (the example tasks' actions), in one run:
  bare     the sandbox calls alone: ``sandbox.exec`` of each command (terminal) or the
           equivalent shell/git commands (SWE);
  env      ``env.step`` (the shell, observation rendering, file diff, volatile spans);
  recorded ``env.step`` under ``Recorder`` plus writing the episode to a store, which is
           what ``trajforge collect`` does per step.
The recorder's overhead is recorded/env - 1 (target under 10%).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.env import load_suite
from collectors.registry import make_env
from collectors.wrappers import Recorder
from pipelines.store import StoreWriter
from sandboxes import SandboxConfig
from sandboxes.engine import start_podman_service
from schemas.transition import Provenance

ROOT = Path(__file__).resolve().parents[1]


def bare_command(action: dict) -> str:
    """What a step costs without the environment: the command, or the tool's shell equivalent."""
    kind = action["action"]
    if kind == "run":
        return action["command"]
    if kind == "view":
        return f"sed -n '{action.get('start', 1)},{action.get('end', 100)}p' repo/{action['path']}"
    if kind == "search":
        return f"grep -rn -e '{action['pattern']}' repo | head -n 50"
    if kind in ("run_tests", "submit"):
        return "cd repo && python3 -m pytest -q tests"
    if kind == "str_replace":
        return f"cat repo/{action['path']} > /dev/null"
    return "true"


def bench(backend: str, domain: str, episodes: int, store: str) -> dict[str, float]:
    suite = "terminal.yaml" if domain == "terminal" else "swe.yaml"
    tasks = load_suite(ROOT / "examples" / "tasks" / suite)
    cfg = SandboxConfig(backend=backend, image="localhost/trajforge-swe:latest", run_id=f"bench-{backend}-{domain}")
    env = make_env(domain, cfg)
    resets, bare, stepped, recorded, steps = [], 0.0, 0.0, 0.0, 0
    try:
        for i in range(episodes):
            task = tasks[i % len(tasks)]
            t0 = time.perf_counter()
            env.reset(seed=i, task=task)
            resets.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            for a in task.actions:
                env.sandbox.exec(bare_command(a), cwd="/work", timeout=60)
            bare += time.perf_counter() - t0
            env.reset(seed=i, task=task)
            t0 = time.perf_counter()
            for a in task.actions:
                env.step(a)
            stepped += time.perf_counter() - t0
            rec = Recorder(env, trajectory_id=f"bench-{i}", provenance=Provenance(run_id=f"bench-{backend}"))
            rec.reset(seed=i, task=task)
            t0 = time.perf_counter()
            for a in task.actions:
                rec.step(a)
            with StoreWriter(store, f"bench-{backend}") as w:
                w.writer(domain).write_episode(rec.transitions)
            recorded += time.perf_counter() - t0
            steps += len(task.actions)
    finally:
        env.close()
    cores = os.cpu_count() or 1
    return {
        "steps": steps,
        "reset_ms": statistics.median(resets),
        "bare_steps_s": steps / bare,
        "env_steps_s": steps / stepped,
        "recorded_steps_s": steps / recorded,
        "per_core": steps / recorded / cores,
        "overhead": recorded / stepped - 1,
        "env_over_bare": stepped / bare,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=6)
    args = ap.parse_args(argv)
    start_podman_service()
    store = tempfile.mkdtemp(prefix="trajforge-bench-")
    try:
        rows = [(b, d, bench(b, d, args.episodes, store)) for b in ("local", "docker") for d in ("terminal", "swe")]
    finally:
        shutil.rmtree(store, ignore_errors=True)
    print(f"\n### Collection ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; {args.episodes} scripted episodes each)\n")
    print(
        "| backend | domain | steps | reset p50 ms | bare calls steps/s | env.step steps/s | recorded steps/s "
        "| recorded steps/s per core | env / bare time | recorder overhead |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b, d, r in rows:
        print(
            f"| {b} | {d} | {r['steps']} | {r['reset_ms']:.0f} | {r['bare_steps_s']:.1f} | {r['env_steps_s']:.1f} "
            f"| {r['recorded_steps_s']:.1f} | {r['per_core']:.1f} | {r['env_over_bare']:.2f}x | {r['overhead']:+.1%} |"
        )


if __name__ == "__main__":
    main()
