"""``trajforge serve`` under load: concurrent sessions, the server's added latency per step,
memory per idle session, the sim backend, and a fuzz run of hostile frames.

    python benchmarks/serve.py [--sessions 128] [--steps 3] [--fuzz 1000] [--sim-sessions 16]

The server is the real CLI (``trajforge serve``) in its own process, terminal tasks on the
local sandbox backend; the client is openenv-core's own ``GenericEnvClient``, one per
session, all on one event loop in this process (the same 2 cores as the server).

- **Load**: ``--sessions`` episodes at once (reset, ``--steps`` shell commands,
  ``end_episode``); completed = reward received. Goal: >= 128 sessions, >= 99% complete.
- **Added latency**: the median round trip of a step whose action the session refuses
  (an unknown action: no sandbox work, a recorded action error) against ``env.step`` of the
  same action in-process, one session, nothing else running; and the same for
  ``run echo``. Goal: added <= 10 ms p50.
- **Memory per idle session**: the PSS of the server and all its children (sandboxes
  included), before and after opening ``--idle`` sessions, connected only and reset (their
  sandbox up), divided by their number.
- **sim**: the same episodes with ``backend: sim`` and a planted tiny world model.
- **Fuzz**: ``--fuzz`` frames of bad JSON, wrong types, huge payloads, other sessions' ids,
  other domains' actions; then the server must answer ``/health`` and leave no sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from sandboxes.local import sandboxes_dir  # noqa: E402

TASKS = [
    {
        "id": f"bench/{i}",
        "domain": "terminal",
        "env_id": "bash",
        "instruction": "Write ok to out.txt.",
        "check": "grep -qx ok /work/out.txt",
    }
    for i in range(4)
]


SERVERS: list[subprocess.Popen] = []  # stopped on the way out whatever happens, so none outlives the run


def start_server(tmp: Path, job: dict, run_id: str, **flags) -> tuple[subprocess.Popen, str]:
    (tmp / "suite.yaml").write_text(yaml.safe_dump({"tasks": TASKS}))
    (tmp / f"{run_id}.yaml").write_text(yaml.safe_dump({"job_id": run_id, "tasks": ["suite.yaml"], **job}))
    cmd = [sys.executable, "trajforge.py", "serve", str(tmp / f"{run_id}.yaml"), "--port", "0", "--run-id", run_id]
    cmd += ["--store", str(tmp / "store")]
    for k, v in flags.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    SERVERS.append(proc)
    line = proc.stdout.readline()
    if "ws://" not in line:
        raise SystemExit(f"server did not start: {line}{proc.stderr.read()}")
    return proc, "http://127.0.0.1:" + line.split("ws://127.0.0.1:")[1].split("/")[0]


def stop_server(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=300)


def pss_mib(pid: int) -> float:
    total = 0
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_full_info().pss
    return total / (1 << 20)


def leaked(run_id: str) -> int:
    base = sandboxes_dir()
    return sum(1 for d in base.iterdir() if d.name.startswith(run_id)) if base.is_dir() else 0


async def episode(url: str, i: int, steps: int, timings: list[float]) -> tuple[bool, bool]:
    """(completed: the episode ended with done, rewarded: its check passed)."""
    try:
        async with GenericEnvClient(base_url=url, message_timeout_s=600, connect_timeout_s=120) as env:
            await env.reset(task_id=TASKS[i % len(TASKS)]["id"], policy="bench")
            for s in range(steps):
                cmd = "echo ok > out.txt" if s == steps - 1 else f"echo step {s}"
                t = time.perf_counter()
                await env.step({"action": "run", "command": cmd})
                timings.append((time.perf_counter() - t) * 1000)
            end = await env.step({"action": "end_episode"})
            return end.done, end.reward == 1.0
    except Exception as exc:
        print(f"  episode {i}: {type(exc).__name__}: {str(exc)[:160]}", file=sys.stderr)
        return False, False


async def load(url: str, sessions: int, steps: int) -> dict:
    timings: list[float] = []
    t = time.perf_counter()
    ok = await asyncio.gather(*(episode(url, i, steps, timings) for i in range(sessions)))
    wall = time.perf_counter() - t
    return {
        "sessions": sessions,
        "completed": sum(done for done, _ in ok),
        "rewarded": sum(r for _, r in ok),
        "share": sum(done for done, _ in ok) / sessions,
        "wall_s": round(wall, 1),
        "step_p50_ms": round(statistics.median(timings), 1) if timings else None,
        "step_p95_ms": round(statistics.quantiles(timings, n=20)[-1], 1) if len(timings) > 20 else None,
    }


async def round_trips(url: str, action: dict, n: int) -> list[float]:
    async with GenericEnvClient(base_url=url) as env:
        await env.reset(task_id=TASKS[0]["id"], policy="bench")
        out = []
        for _ in range(n):
            t = time.perf_counter()
            r = await env.step(action)
            out.append((time.perf_counter() - t) * 1000)
            if r.done:
                await env.reset(task_id=TASKS[0]["id"], policy="bench")
        return out


def in_process(action: dict, n: int) -> list[float]:
    from collectors.env import Task
    from collectors.registry import make_env
    from sandboxes.base import SandboxConfig

    env = make_env("terminal", SandboxConfig(backend="local", run_id="bench-inproc"), "bash")
    try:
        env.reset(task=Task(**{k: v for k, v in TASKS[0].items()}))
        out = []
        for _ in range(n):
            t = time.perf_counter()
            env.step(action)
            out.append((time.perf_counter() - t) * 1000)
        return out
    finally:
        env.close()


async def idle_memory(url: str, pid: int, n: int) -> dict:
    before = pss_mib(pid)
    clients = [GenericEnvClient(base_url=url) for _ in range(n)]
    for c in clients:
        await c.connect()
        await c.state()  # the session exists on the server once a frame was answered
    connected = pss_mib(pid)
    for c in clients:
        await c.reset(task_id=TASKS[0]["id"], policy="bench")
    reset = pss_mib(pid)
    for c in clients:
        await c.close()
    return {
        "idle_sessions": n,
        "pss_before_mib": round(before, 1),
        "per_connected_session_mib": round((connected - before) / n, 2),
        "per_reset_session_mib": round((reset - before) / n, 2),
    }


def fuzz_frames(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    kinds = [
        lambda: "{not json",
        lambda: json.dumps([1, 2, 3]),
        lambda: json.dumps({"type": "step", "data": rng.choice(["x", 1, None, [1]])}),
        lambda: json.dumps({"type": rng.choice(["warp", "", None, 7, "mcp"])}),
        lambda: json.dumps(
            {"type": "reset", "data": {"task_id": rng.choice(["../x", "nope", 5, None]), "seed": rng.choice([-1, "a", 1.5])}}
        ),
        lambda: json.dumps(
            {"type": "step", "data": {"action": rng.choice(["click", "goto", "tap"]), "x": 1, "url": "file:///etc/passwd"}}
        ),
        lambda: json.dumps({"type": "step", "data": {"action": "run", "command": rng.choice([5, None, [], {"a": 1}])}}),
        lambda: json.dumps(
            {"type": "mcp", "data": {"method": "openenv/session/close", "params": {"session_id": os.urandom(16).hex()}}}
        ),
        lambda: json.dumps({"type": "state", "session_id": os.urandom(16).hex()}),
        lambda: json.dumps({"type": "step", "data": {"action": "run", "command": "x" * rng.choice([10_000, 600_000])}}),
        lambda: json.dumps({"type": "step", "data": {"action": "run", "command": "x" * (3 << 20)}}),  # over the frame limit
        lambda: json.dumps({"type": "reset", "data": {"task_id": TASKS[0]["id"]}}),
        lambda: "\x00\xff" * rng.randint(1, 50),
        lambda: json.dumps({"type": "step", "data": {"action": "end_episode"}}),
        lambda: "[" * 10_000 + "]" * 10_000,
    ]
    return [rng.choice(kinds)() for _ in range(n)]


async def fuzz(url: str, n: int) -> dict:
    frames = fuzz_frames(n)
    ws_url = url.replace("http", "ws") + "/ws"
    answered = closed = 0
    ws = None
    for f in frames:
        if ws is None:
            ws = await connect(ws_url, max_size=None)
        try:
            await ws.send(f)
            json.loads(await asyncio.wait_for(ws.recv(), 60))
            answered += 1
        except Exception:
            closed += 1  # a frame over the limit, or a session the frame ended: the connection is gone, open another
            await ws.close()
            ws = None
    if ws is not None:
        await ws.close()
    return {"frames": n, "answered": answered, "connections_closed": closed}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--idle", type=int, default=32)
    ap.add_argument("--fuzz", type=int, default=1000)
    ap.add_argument("--sim-sessions", type=int, default=16)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="trajforge-serve-bench-"))
    job = {"sandbox": {"backend": "local", "memory_mb": 256, "pids": 64}, "max_steps": 500}
    results: dict = {"machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}

    # added latency: in-process first, then the same actions over the server (one session, nothing else)
    refused, echo = {"action": "fly"}, {"action": "run", "command": "echo hi"}
    base_refused, base_echo = in_process(refused, 200), in_process(echo, 60)
    proc, url = start_server(tmp, job, "bench-lat", max_sessions=args.sessions + 32, max_frame_mb=2)
    served_refused = asyncio.run(round_trips(url, refused, 200))
    served_echo = asyncio.run(round_trips(url, echo, 60))
    results["latency"] = {
        "refused_in_process_p50_ms": round(statistics.median(base_refused), 3),
        "refused_served_p50_ms": round(statistics.median(served_refused), 2),
        "echo_in_process_p50_ms": round(statistics.median(base_echo), 1),
        "echo_served_p50_ms": round(statistics.median(served_echo), 1),
    }
    results["latency"]["added_p50_ms"] = round(statistics.median(served_refused) - statistics.median(base_refused), 2)
    results["latency"]["added_echo_p50_ms"] = round(statistics.median(served_echo) - statistics.median(base_echo), 1)
    print(json.dumps(results["latency"]), flush=True)
    results["memory"] = asyncio.run(idle_memory(url, proc.pid, args.idle))
    print(json.dumps(results["memory"]), flush=True)
    results["load"] = asyncio.run(load(url, args.sessions, args.steps))
    print(json.dumps(results["load"]), flush=True)
    results["fuzz"] = asyncio.run(fuzz(url, args.fuzz))
    results["fuzz"]["health_after"] = httpx.get(f"{url}/health").status_code
    results["fuzz"]["server_alive"] = proc.poll() is None
    results["exit_code"] = stop_server(proc)
    results["fuzz"]["leaked_sandboxes"] = leaked("bench-lat")
    print(json.dumps(results["fuzz"]), flush=True)

    # the sim backend: a planted tiny world model behind the same protocol
    from simulate.tiny import planted_model

    model = planted_model(tmp / "wm", "ok\n[exit 0] /work$")
    sim_job = {**job, "backend": "sim", "sim": {"model": model, "temperature": 0.0, "max_new_tokens": 16}}
    proc, url = start_server(tmp, sim_job, "bench-sim", max_sessions=args.sim_sessions + 8)
    sim_echo = asyncio.run(round_trips(url, echo, 30))
    results["sim"] = {"step_p50_ms": round(statistics.median(sim_echo), 1)}
    sim_load = asyncio.run(load(url, args.sim_sessions, args.steps))
    results["sim"] |= {"sessions": sim_load["sessions"], "completed": sim_load["completed"], "wall_s": sim_load["wall_s"]}
    results["sim"]["memory"] = asyncio.run(idle_memory(url, proc.pid, 4))
    stop_server(proc)
    results["sim"]["leaked_sandboxes"] = leaked("bench-sim")
    print(json.dumps(results["sim"]), flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in SERVERS:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=300)
