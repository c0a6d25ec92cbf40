"""OS desktop benchmark: what a desktop session costs and how fast episodes step.

    python benchmarks/os_desktop.py [--sessions 5] [--reads 300] [--episodes 3]

- session start: a fresh ``DesktopSession`` (Xvfb, D-Bus, the AT-SPI bus, openbox, the
  tree helper) until the helper answers and the window manager is up; median of
  ``--sessions``;
- tree reads: ``session.tree()`` (JSON lines to the helper, which walks AT-SPI) with a
  mousepad window and a zenity dialog open, p50/p95 over ``--reads``; and the same read
  plus rendering to observation text;
- memory per session: the sum of RSS over the session's processes (found by its marker
  in /proc) with and without the two applications;
- scripted steps per second: the example task suite's actions through ``env.step`` (each
  an xdotool call, then reads until the tree settles), and episodes per minute with
  resets, over ``--episodes`` rounds of the suite.

Prints a markdown table.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.timing import options, pct  # noqa: E402 (needs ROOT on the path)


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def main(argv: list[str] | None = None) -> None:
    args = options(__doc__, argv, sessions=5, reads=300, episodes=3)
    from collectors.env import load_suite
    from collectors.os.env import OSEnv
    from collectors.os.session import DesktopSession, wait_for
    from collectors.os.tree import render

    starts, bare_mb = [], []
    for _ in range(args.sessions):
        t0 = time.perf_counter()
        with DesktopSession() as s:
            starts.append(time.perf_counter() - t0)
            time.sleep(0.3)
            bare_mb.append(rss_mb(s.pids()))
    with DesktopSession() as s:
        s.run("mousepad & zenity --entry --title Bench --text 'Your name?' &")
        wait_for(lambda: len(s.tree()["windows"]) >= 2, 15, "two windows")
        time.sleep(0.5)
        apps_mb = rss_mb(s.pids())
        reads, renders, nodes = [], [], len(s.tree()["nodes"])
        for _ in range(args.reads):
            t = time.perf_counter()
            tree = s.tree()
            reads.append((time.perf_counter() - t) * 1000)
            render(tree, 20_000)
            renders.append((time.perf_counter() - t) * 1000)
    tasks = load_suite(ROOT / "examples" / "tasks" / "os.yaml")
    steps, step_s, t_all = 0, 0.0, time.perf_counter()
    with OSEnv(options={"check_wait_s": 0.0}) as env:
        for _ in range(args.episodes):
            for task in tasks:
                env.reset(task=task)
                t = time.perf_counter()
                for action in task.actions:
                    env.step(action)
                step_s += time.perf_counter() - t
                steps += len(task.actions)
                assert env.check_task(task)[0] == 1.0, task.id
    episodes = args.episodes * len(tasks)
    per_min = episodes / ((time.perf_counter() - t_all) / 60)
    rows = [
        ("session start (Xvfb, D-Bus, AT-SPI, openbox, helper): median", f"{statistics.median(starts):.2f} s"),
        ("memory per session, bare (sum of RSS)", f"{statistics.median(bare_mb):.0f} MB"),
        ("memory per session with mousepad + a zenity dialog", f"{apps_mb:.0f} MB"),
        (f"tree read ({nodes} nodes): p50 / p95", f"{pct(reads, 0.5):.1f} / {pct(reads, 0.95):.1f} ms"),
        ("tree read + render to text: p50 / p95", f"{pct(renders, 0.5):.1f} / {pct(renders, 0.95):.1f} ms"),
        (f"scripted steps/s (act + settle + observe, {steps} steps)", f"{steps / step_s:.2f}"),
        (f"scripted episodes/min with resets ({episodes} episodes)", f"{per_min:.1f}"),
    ]
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
