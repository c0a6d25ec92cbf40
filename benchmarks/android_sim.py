"""Android environment against the simulated device (collectors/android/sim), through the
real adb server and adbutils: UI dump time, the adb round trip per shell command, and
scripted steps per second through ``env.step`` (action + dump + dumpsys per step).

The simulator answers in well under a millisecond, so these figures are the client's and
adb's own overhead: a real emulator's ``uiautomator dump`` takes 0.5-3 s more per step.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from pathlib import Path

from collectors.android.adb import adb
from collectors.android.env import AndroidEnv
from collectors.env import load_suite

ROOT = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(port)  # a private adb server, killed at the end
    adb(port, "start-server")
    tasks = load_suite(ROOT / "examples" / "tasks" / "android.yaml")
    try:
        with AndroidEnv(options={"simulator": True}) as env:
            env.reset(task=tasks[0])
            d = env.device
            rtt = []
            for _ in range(200):
                t0 = time.perf_counter()
                d.shell("echo ok")
                rtt.append((time.perf_counter() - t0) * 1000)
            dumps = []
            for _ in range(200):
                t0 = time.perf_counter()
                d.dump()
                dumps.append((time.perf_counter() - t0) * 1000)
            steps, t0, action_ms = 0, time.perf_counter(), []
            for _ in range(5):
                for task in tasks:
                    env.reset(task=task)
                    for action in task.actions:
                        _, _, _, _, info = env.step(action)
                        action_ms.append(info["action_ms"])
                        steps += 1
            elapsed = time.perf_counter() - t0
    finally:
        adb(port, "kill-server")
    print(f"adb round trip (shell echo): p50 {statistics.median(rtt):.2f} ms, p95 {pct(rtt, 0.95):.2f} ms")
    print(f"uiautomator dump + cat: p50 {statistics.median(dumps):.2f} ms, p95 {pct(dumps, 0.95):.2f} ms")
    print(f"action (adb input/am) per step: p50 {statistics.median(action_ms):.2f} ms, p95 {pct(action_ms, 0.95):.2f} ms")
    print(f"scripted steps/s including resets: {steps / elapsed:.1f} ({steps} steps, {len(tasks) * 5} episodes, {elapsed:.1f} s)")


if __name__ == "__main__":
    main()
