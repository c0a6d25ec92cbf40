"""A server for fault tests: a tool that hangs, one that hangs once, one that kills the
server, one that returns huge output, one that answers with a JSON-RPC error, an echo."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from collectors.mcp.stubs import serve


def build(seed: int) -> MCPServer:
    server = MCPServer("stub-testbed", version="1.0", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    def sleep(seconds: float) -> str:
        """Sleep, then answer (a hang when longer than the client waits)."""
        time.sleep(seconds)
        return f"slept {seconds} s"

    @server.tool()
    def hang_once(marker: str) -> str:
        """Hang the first time this marker file is seen, answer afterwards."""
        path = Path(marker)
        if not path.exists():
            path.write_text("seen")
            time.sleep(3600)
        return "ok"

    @server.tool()
    def crash() -> str:
        """Kill the server process."""
        os._exit(3)

    @server.tool()
    def reject(reason: str) -> str:
        """Answer with a JSON-RPC error (invalid params) instead of a result."""
        raise MCPError(code=-32602, message=f"rejected: {reason}")

    @server.tool()
    def huge(chars: int) -> str:
        """Return this many characters of text."""
        return ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]

    return server


if __name__ == "__main__":
    serve(build)
