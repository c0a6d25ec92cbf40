"""Stub MCP servers: stateful, deterministic tool environments built with the SDK's server side.

Each module builds an ``MCPServer`` from a seed (``build(seed)``) and runs it with
``python -m collectors.mcp.stubs.<name> --seed N [--transport streamable-http --port P]``.
State lives in the server process: the environment starts a fresh process per episode, so
state is seeded at reset and nothing leaks between episodes. Tools validate their
arguments and fail with the messages a real service would give (``ToolError``: the call
returns ``isError``), and ids and clocks are simulated, so the same calls under the same
seed give the same results.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from datetime import datetime, timedelta

NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
DOMAIN = "example.com"


class Clock:
    """A simulated clock: starts at a seeded date and moves a few minutes per call."""

    def __init__(self, rng: random.Random) -> None:
        self.now = datetime(2026, 3, 2, 9, 0) + timedelta(days=rng.randint(0, 200))

    def tick(self, minutes: int = 3) -> str:
        self.now += timedelta(minutes=minutes)
        return self.now.strftime("%Y-%m-%d %H:%M")


def serve(build: Callable[[int], object], argv: list[str] | None = None) -> None:
    """The command line of every stub: ``--seed``, ``--transport``, ``--host``, ``--port``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    server = build(args.seed)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)
