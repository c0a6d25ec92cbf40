"""LLM-driven collection at concurrency: episodes and steps per second against the ideal.

    python benchmarks/collect_llm.py [--latencies 1 5] [--concurrency 8 32 128 256] [--calls 6]
                                     [--workers 2] [--waves 2] [--faults] [--sigint] [--steps]

A fake OpenAI-compatible endpoint (``benchmarks/fake_llm.py``) plays an agent that makes
``calls`` tool calls (``run echo ...``) and then answers, each after ``latency`` seconds.
Terminal tasks on the local backend; ``workers`` processes with ``concurrency / workers``
episodes each; ``waves`` x concurrency episodes a run (the second wave reuses the pool).

For each (latency, concurrency): wall time, episodes/s and steps/s against the ideal
(concurrency / (calls + 1) / latency episodes a second, the answer call included), p50 and
p99 step latency (the server's time between an episode's requests), the collector's
overhead per model call (that gap less the model's latency and the action's own time,
p50), peak requests in flight, and peak memory (PSS) of the whole process tree (runner, workers,
sandboxes) with the RSS per in-flight episode (peak less the idle baseline, over the
episodes in flight).

``--faults``: 10% HTTP 429, 2% HTTP 500 and 1% connection resets, share of episodes that
complete. ``--sigint``: SIGINT mid-run, then the sandboxes left behind and a rerun's
duplicates. ``--steps``: recorded terminal steps a second on one core against a bare exec.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.fake_llm import FakeLLM, Script  # noqa: E402


class Timeline:
    """Request times per episode, kept by wrapping the fake server's answer."""

    def __init__(self, server: FakeLLM) -> None:
        self.times: dict[str, list[float]] = {}
        real = server._reply

        def reply(request, messages):
            key = next((m["content"].split("\n", 1)[0] for m in messages if m.get("role") == "user"), "?")
            self.times.setdefault(key, []).append(time.monotonic() - server.script.latency)
            return real(request, messages)

        server._reply = reply


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for q in procs:
        with contextlib.suppress(psutil.Error):
            total += _pss(q)
    return total


def _pss(process) -> int:
    """Proportional set size: shared pages (Chromium's, Python's libraries) split between the
    processes that share them, so a sum over processes is not inflated by sharing."""
    return process.memory_full_info().pss


def _sandbox_rss() -> int:
    """RSS of the local sandboxes' processes (tmux servers, their shells and the shells' step
    channels): they are not children of the runner (tmux daemonises; a channel's bash is the
    child of an nsenter, reparented when the runner's worker ends)."""
    import psutil

    total = 0
    for q in psutil.process_iter(["cmdline", "memory_info"]):
        cmd = " ".join(q.info["cmdline"] or [])
        if ".tf-" in cmd or "read -r tag n end" in cmd:  # a shell's tmux and bash, or its step channel
            with contextlib.suppress(psutil.Error):
                total += _pss(q)
    return total


def _job(tmp: Path, name: str, server: FakeLLM, episodes: int, concurrency: int, workers: int, domain: str = "terminal") -> Path:
    suite = tmp / f"{name}-suite.yaml"
    tasks = [{"id": f"bench/{i}", "domain": domain, "instruction": f"task {i}"} for i in range(episodes)]
    if domain == "web":  # the shipped sites, from the shop's front page
        tasks = [t | {"env_id": "sites", "extra": {"start_url": "/shop/"}} for t in tasks]
    suite.write_text(yaml.safe_dump(tasks))
    job = {
        "job_id": name,
        "tasks": [str(suite)],
        "workers": workers,
        "concurrency": max(1, concurrency // max(workers, 1)),
        "retries": 2,
        "max_steps": 50,
        "episode_timeout_s": 600,
        "start_timeout_s": 300,
        "sandbox": {"backend": "local", "memory_mb": 256},
        "policy": {"kind": "openai", "model": "fake", "base_url": server.url, "retries": 8, "timeout_s": 120},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def run_collect(job: Path, store: Path, *, sigint_after: float | None = None) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS of the tree (bytes), the exit code and stderr's tail."""
    cmd = [sys.executable, str(ROOT / "trajforge.py"), "collect", str(job), "--store", str(store)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    # the memory sampler runs in a process of its own at the lowest priority: in a thread it
    # held this process's GIL, delaying the fake endpoint's answers, and took CPU from the run
    import psutil  # noqa: F401  (imported before the fork: no import lock is held in the child)

    peak, stop = multiprocessing.Value("q", 0), multiprocessing.Event()
    sampler = multiprocessing.get_context("fork").Process(target=_sample, args=(proc.pid, peak, stop), daemon=True)
    sampler.start()
    if sigint_after is not None:
        time.sleep(sigint_after)
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate()
    stop.set()
    sampler.join()
    return time.monotonic() - t0, peak.value, proc.returncode, err[-1500:]


def _sample(pid: int, peak, stop) -> None:
    """Every 2 s, the PSS of the collector's tree and of the sandboxes; the largest in ``peak``."""
    os.nice(19)
    while not stop.wait(2.0):
        total = _tree_rss(pid) + _sandbox_rss()
        with peak.get_lock():
            peak.value = max(peak.value, total)


def _store_rows(store: Path, sql: str) -> list[dict]:
    from pipelines.query import run_query

    return run_query(sql, str(store)).to_pylist()


def throughput(tmp: Path, latency: float, concurrency: int, calls: int, workers: int, waves: int) -> dict:
    server = FakeLLM(Script(latency=latency, calls=calls))
    server.start()
    timeline = Timeline(server)
    episodes = waves * concurrency
    name = f"tp-{latency:g}-{concurrency}"
    job = _job(tmp, name, server, episodes, concurrency, workers)
    idle = _sandbox_rss()
    try:
        wall, peak, code, err = run_collect(job, tmp / f"store-{name}")
    finally:
        server.close()
    if code != 0:
        raise SystemExit(f"{name}: collect failed: {err}")
    steps = episodes * calls
    ideal = concurrency / (calls + 1) / latency
    gaps, overheads = [], []
    action = {
        (r["t"], r["s"]): r["a"]
        for r in _store_rows(
            tmp / f"store-{name}",
            "SELECT task_id AS t, step AS s, action_ms + observe_ms AS a FROM transitions",
        )
    }
    for key, times in timeline.times.items():
        task = "bench/" + key.split()[-1] if key.startswith("task ") else key
        for k in range(1, len(times)):
            gap = times[k] - times[k - 1]
            gaps.append(gap)
            overheads.append(gap - latency - action.get((task, k - 1), 0.0) / 1000)
    gaps.sort()
    first = min(t[0] for t in timeline.times.values())
    last = max(t[-1] for t in timeline.times.values()) + latency
    active = last - first  # from the first model call to the last answer: the run without start-up
    row = {
        "latency_s": latency,
        "concurrency": concurrency,
        "episodes": episodes,
        "wall_s": round(wall, 1),
        "episodes_per_s": round(episodes / wall, 2),
        "ideal_episodes_per_s": round(ideal, 2),
        "of_ideal": round(episodes / wall / ideal, 2),
        "active_s": round(active, 1),
        "of_ideal_active": round(episodes / active / ideal, 2),
        "steps_per_s": round(steps / wall, 1),
        "step_p50_s": round(gaps[len(gaps) // 2], 3) if gaps else None,
        "step_p99_s": round(gaps[int(len(gaps) * 0.99)], 3) if gaps else None,
        "overhead_p50_ms": round(statistics.median(overheads) * 1000, 1) if overheads else None,
        "peak_requests_in_flight": server.stats.peak_in_flight,
        "peak_rss_mib": round(peak / 2**20),
        "rss_per_episode_mib": round((peak - idle) / 2**20 / concurrency, 1),
    }
    print(json.dumps(row), flush=True)
    return row


def faults(tmp: Path, concurrency: int, calls: int, workers: int) -> dict:
    server = FakeLLM(Script(latency=1.0, calls=calls, p429=0.10, p500=0.02, preset=0.01, retry_after=0.5, seed=7))
    server.start()
    episodes = 2 * concurrency
    job = _job(tmp, "faults", server, episodes, concurrency, workers)
    try:
        wall, _, code, _err = run_collect(job, tmp / "store-faults")
    finally:
        server.close()
    (done,) = _store_rows(tmp / "store-faults", "SELECT count(DISTINCT trajectory_id) AS n FROM transitions")
    complete = _store_rows(
        tmp / "store-faults",
        "SELECT count(DISTINCT trajectory_id) AS n FROM transitions"
        " WHERE json_extract_string(provenance.extra, '$.stop_reason') = 'complete'",
    )[0]["n"]
    row = {
        "episodes": episodes,
        "recorded": done["n"],
        "complete": complete,
        "complete_share": round(complete / episodes, 4),
        "injected_429": server.stats.r429,
        "injected_500": server.stats.r500,
        "injected_resets": server.stats.resets,
        "requests": server.stats.requests,
        "wall_s": round(wall, 1),
        "exit": code,
    }
    print(json.dumps(row), flush=True)
    return row


def sigint(tmp: Path, concurrency: int, calls: int, workers: int) -> dict:
    from sandboxes.gc import gc

    server = FakeLLM(Script(latency=1.0, calls=calls))
    server.start()
    episodes = 3 * concurrency
    job = _job(tmp, "sigint", server, episodes, concurrency, workers)
    store = tmp / "store-sigint"
    try:
        _, _, code, _err = run_collect(job, store, sigint_after=12.0)
        first = _store_rows(store, "SELECT count(DISTINCT trajectory_id) AS n FROM transitions")[0]["n"]
        left = gc(docker=False)
        _, _, code2, _err2 = run_collect(job, store)
    finally:
        server.close()
    dups = _store_rows(store, "SELECT count(*) AS n FROM (SELECT transition_id FROM transitions GROUP BY 1 HAVING count(*) > 1)")
    total = _store_rows(store, "SELECT count(DISTINCT trajectory_id) AS n FROM transitions")[0]["n"]
    row = {
        "episodes": episodes,
        "exit_after_sigint": code,
        "recorded_before_sigint": first,
        "leaked_sandboxes": len(left.local) + len(left.cgroups) + len(left.disks),
        "rerun_exit": code2,
        "after_rerun": total,
        "duplicate_transitions": dups[0]["n"],
    }
    print(json.dumps(row), flush=True)
    return row


def web(tmp: Path, concurrency: int, calls: int, workers: int) -> dict:
    """Web episodes (Playwright, real Chromium, the shipped sites), each step a scroll."""
    server = FakeLLM(Script(latency=1.0, calls=calls, tool="scroll", arguments={"dy": 200}))
    server.start()
    timeline = Timeline(server)
    episodes = 2 * concurrency
    job = _job(tmp, "web", server, episodes, concurrency, workers, domain="web")
    try:
        wall, peak, code, err = run_collect(job, tmp / "store-web")
    finally:
        server.close()
    sql = (
        "SELECT count(DISTINCT trajectory_id) AS n, count(*) FILTER (action_error IS NULL) AS good,"
        " count(*) AS steps FROM transitions"
    )
    ok = _store_rows(tmp / "store-web", sql)[0]
    first = min(t[0] for t in timeline.times.values())
    last = max(t[-1] for t in timeline.times.values()) + 1.0
    ideal = concurrency / (calls + 1) / 1.0
    row = {
        "concurrency": concurrency,
        "episodes": episodes,
        "recorded": ok["n"],
        "steps_without_error": ok["good"],
        "steps": ok["steps"],
        "wall_s": round(wall, 1),
        "of_ideal": round(episodes / wall / ideal, 2),
        "of_ideal_active": round(episodes / (last - first) / ideal, 2),
        "peak_rss_mib": round(peak / 2**20),
        "exit": code,
        "stderr_tail": err[-300:] if code else "",
    }
    print(json.dumps(row), flush=True)
    return row


def step_cost(n: int = 200) -> dict:
    """Recorded terminal steps a second on one core, and a bare exec's, medians of ``n``."""
    from collectors.terminal import TerminalEnv
    from sandboxes.base import SandboxConfig

    def median_ms(fn) -> float:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1000

    env = TerminalEnv(SandboxConfig(backend="local"))
    try:
        env.reset(seed=0, task=None)
        bare = median_ms(lambda: env.sandbox.exec("echo hi"))
        step = median_ms(lambda: env.step({"action": "run", "command": "echo hi"}))
    finally:
        env.close()
    row = {
        "bare_exec_ms": round(bare, 1),
        "recorded_step_ms": round(step, 1),
        "steps_per_s": round(1000 / step, 1),
        "ratio": round(step / bare, 1),
    }
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latencies", type=float, nargs="+", default=[1.0, 5.0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 128, 256])
    ap.add_argument("--calls", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--faults", action="store_true")
    ap.add_argument("--sigint", action="store_true")
    ap.add_argument("--steps", action="store_true")
    ap.add_argument("--web", type=int, default=0, metavar="N", help="web episodes at concurrency N")
    ap.add_argument("--out", default=None, help="write every row as JSON here")
    args = ap.parse_args(argv)
    rows: dict[str, list] = {"throughput": [], "faults": [], "sigint": [], "steps": [], "web": []}
    with tempfile.TemporaryDirectory(prefix="trajforge-collect-llm-") as tmp:
        tmp = Path(tmp)
        if args.steps:
            rows["steps"].append(step_cost())
        for latency in args.latencies:
            for c in args.concurrency:
                rows["throughput"].append(throughput(tmp, latency, c, args.calls, args.workers, args.waves))
        if args.faults:
            rows["faults"].append(faults(tmp, 32, args.calls, args.workers))
        if args.sigint:
            rows["sigint"].append(sigint(tmp, 32, args.calls, args.workers))
        if args.web:
            rows["web"].append(web(tmp, args.web, args.calls, args.workers))
    tp = sorted(rows["throughput"], key=lambda r: r["concurrency"])
    if len({r["concurrency"] for r in tp}) > 1:  # what one more episode in flight adds: the slope, no fixed costs
        lo, hi = tp[0], tp[-1]
        slope = (hi["peak_rss_mib"] - lo["peak_rss_mib"]) / (hi["concurrency"] - lo["concurrency"])
        print(json.dumps({"rss_per_added_episode_mib": round(slope, 1), "between": [lo["concurrency"], hi["concurrency"]]}))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
