"""MCP benchmark: tool calls per second over stdio, per core, and what a server start costs.

    python benchmarks/mcp_tools.py [--calls 500] [--repeats 5]

Two servers: the stub testbed's ``echo`` (the SDK's own server, near-zero tool work) and
the published mcp-server-time's ``convert_time`` (a real server from PyPI). For each, the
same calls through the bare SDK connection (``collectors.mcp.client.Connection``, the
baseline) and through the environment's ``step`` (schema check, rendering, volatile
spans), one after another, ``--repeats`` times: calls/s (median), p50/p95 latency, the
environment's cost as a ratio of the baseline; and the time to start each server and
list its tools (a per-episode server pays it at every reset). Prints a markdown table.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.timing import options, rate  # noqa: E402 (needs ROOT on the path)

CASES = {
    "testbed": ("echo", {"text": "hello world"}),
    "time": ("convert_time", {"source_timezone": "UTC", "time": "09:30", "target_timezone": "Asia/Tokyo"}),
}


def main(argv: list[str] | None = None) -> None:
    args = options(__doc__, argv, calls=500, repeats=5)
    from collectors.mcp.client import Connection
    from collectors.mcp.env import MCPEnv
    from collectors.mcp.servers import expand, server_spec

    cores = os.cpu_count() or 1
    rows = []
    for env_id, (tool, arguments) in CASES.items():
        starts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            with Connection(expand(server_spec(env_id), "/tmp", 0)) as c:
                c.list_tools()
                starts.append(time.perf_counter() - t0)
        with Connection(expand(server_spec(env_id), "/tmp", 0)) as c:
            c.list_tools()
            base = rate(lambda _, c=c, t=tool, a=arguments: c.call_tool(t, a, 30), range(args.calls), args.repeats)
        with MCPEnv(env_id=env_id) as env:
            env.reset(seed=0)
            action = {"action": "call_tool", "name": tool, "arguments": arguments}
            stepped = rate(lambda _, env=env, a=action: env.step(a), range(args.calls), args.repeats)
        rows.append((env_id, tool, statistics.median(starts), base, stepped))
    when = time.strftime("%Y-%m-%d")
    print(f"\n### MCP ({when}, {cores} cores, stdio, {args.calls} calls x {args.repeats} repeats, medians)\n")
    print(
        "| server | tool | start + tools/list s | SDK calls/s | SDK calls/s per core | SDK p50 / p95 ms "
        "| env.step calls/s | env.step p50 / p95 ms | env.step / SDK rate |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for env_id, tool, start, (b, b50, b95), (s, s50, s95) in rows:
        print(
            f"| {env_id} | {tool} | {start:.2f} | {b:.0f} | {b / cores:.0f} | {b50:.2f} / {b95:.2f} | {s:.0f} "
            f"| {s50:.2f} / {s95:.2f} | {s / b:.2f} |"
        )


if __name__ == "__main__":
    main()
