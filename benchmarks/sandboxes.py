"""Sandbox benchmark: both backends, beside plain ``docker run`` / ``docker exec`` through
the same engine (the docker CLI against the same Docker API endpoint).

    python benchmarks/sandboxes.py [--repeats 30]

For each: cold start (start + first command ready), ``exec("true")`` latency p50/p95, a
20-command shell session, snapshot + restore (an episode reset) p50, and 8 sandboxes in
parallel on this machine (start, 20 execs each, close). Prints a Markdown report.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandboxes import SandboxConfig, make_sandbox
from sandboxes.engine import engine_version, podman_env, start_podman_service
from sandboxes.images import IMAGES

IMAGE = IMAGES["terminal"]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def summarize(starts, execs, shells, resets, worker) -> dict[str, float]:
    """Medians and percentiles of the steps, and 8 workers in parallel."""
    with ThreadPoolExecutor(8) as pool:
        t0 = time.perf_counter()
        list(pool.map(worker, range(8)))
        parallel = time.perf_counter() - t0
    return {
        "start": statistics.median(starts),
        "exec_p50": pct(execs, 0.5),
        "exec_p95": pct(execs, 0.95),
        "shell20": statistics.median(shells),
        "reset": statistics.median(resets),
        "parallel_s": parallel,
        "parallel_rate": 8 * 20 / parallel,
    }


def bench_backend(backend: str, repeats: int) -> dict[str, float]:
    cfg = SandboxConfig(backend=backend, run_id="bench")
    starts = []
    for _ in range(max(5, repeats // 3)):
        sb = make_sandbox(cfg)
        starts.append(timed(lambda sb=sb: (sb.start(), sb.exec("true"))))
        sb.close()
    with make_sandbox(cfg).start() as sb:
        execs = [timed(lambda: sb.exec("true")) for _ in range(repeats)]
        shells = []
        for _ in range(3):

            def session():
                sh = sb.shell()
                for i in range(20):
                    sh.run(f"echo {i} > /tmp/f && cat /tmp/f")
                sh.close()

            shells.append(timed(session))
        sb.write_file("/work/state.txt", "base")
        resets = []
        for i in range(max(5, repeats // 3)):

            def reset(i=i):
                snap = sb.snapshot()
                sb.write_file("/work/state.txt", f"changed {i}")
                sb.restore(snap)

            resets.append(timed(reset))

    def worker(_):
        with make_sandbox(cfg).start() as s:
            for _ in range(20):
                s.exec("true")

    return summarize(starts, execs, shells, resets, worker)


def bench_cli(host: str, repeats: int) -> dict[str, float]:
    docker = shutil.which("docker")
    env = {**os.environ, "DOCKER_HOST": host}

    def run(*args: str) -> str:
        return subprocess.run([docker, *args], env=env, capture_output=True, text=True, check=True).stdout.strip()

    base = ["--network", "none", "--memory", "1024m", "--pids-limit", "256"]
    starts, made = [], []
    for _ in range(max(5, repeats // 3)):

        def start():
            made.append(run("run", "-d", *base, IMAGE, "sleep", "infinity"))
            run("exec", made[-1], "true")

        starts.append(timed(start))
        run("rm", "-f", made[-1])
    cid = run("run", "-d", *base, IMAGE, "sleep", "infinity")
    try:
        execs = [timed(lambda: run("exec", cid, "true")) for _ in range(repeats)]
        shells = [
            timed(lambda: [run("exec", cid, "bash", "-c", f"echo {i} > /tmp/f && cat /tmp/f") for i in range(20)])
            for _ in range(3)
        ]
        resets, images = [], []
        current = cid
        for i in range(max(5, repeats // 3)):

            def reset(i=i):
                nonlocal current
                # docker CLI's commit gets "Decode(): EOF" from Podman 4.3's compat API: podman CLI
                image = subprocess.run(
                    ["podman", "commit", "-q", current], env=podman_env(), capture_output=True, text=True, check=True
                ).stdout.strip()
                run("exec", current, "bash", "-c", f"echo changed {i} > /work/state.txt")
                new = run("run", "-d", *base, image, "sleep", "infinity")
                run("rm", "-f", current)
                current = new
                images.append(image)

            resets.append(timed(reset))
        cid = current
    finally:
        run("rm", "-f", cid)
        for image in images:
            subprocess.run([docker, "rmi", "-f", image], env=env, capture_output=True)

    def worker(_):
        c = run("run", "-d", *base, IMAGE, "sleep", "infinity")
        for _ in range(20):
            run("exec", c, "true")
        run("rm", "-f", c)

    return summarize(starts, execs, shells, resets, worker)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    host = start_podman_service()
    results = {
        "DockerSandbox": bench_backend("docker", args.repeats),
        "LocalSandbox": bench_backend("local", args.repeats),
        "plain docker CLI": bench_cli(host, args.repeats),
    }
    base = results["plain docker CLI"]
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    print(f"\n### Sandboxes ({datetime.now(UTC):%Y-%m-%d}, {cpu}, {os.cpu_count()} cores)")
    print(
        f"Engine: {engine_version(host)} (Docker API at {host}); Python {platform.python_version()}; "
        f"{args.repeats} repeats; times in ms unless noted; ratio = plain CLI time / ours.\n"
    )
    rows = [
        ("cold start (start + first exec), median", "start"),
        ('`exec("true")` p50', "exec_p50"),
        ('`exec("true")` p95', "exec_p95"),
        ("20-command shell session, median", "shell20"),
        ("snapshot + restore (reset), median", "reset"),
        ("8 sandboxes in parallel × 20 execs, wall s", "parallel_s"),
    ]
    print("| step | " + " | ".join(results) + " | docker ratio | local ratio |")
    print("|---|" + "---|" * (len(results) + 2))
    for label, key in rows:
        vals = [r[key] for r in results.values()]
        ratios = [base[key] / results[b][key] for b in ("DockerSandbox", "LocalSandbox")]
        print(f"| {label} | " + " | ".join(f"{v:,.1f}" for v in vals) + " | " + " | ".join(f"{x:.2f}x" for x in ratios) + " |")
    print("| parallel throughput, execs/s | " + " | ".join(f"{r['parallel_rate']:,.1f}" for r in results.values()) + " | | |")


if __name__ == "__main__":
    main()
