"""A synchronous MCP client on the official SDK: one server connection, bounded in time.

The SDK is async; environments are not. ``Connection`` runs the SDK's ``Client`` in an
event loop on its own thread and waits for each request with a deadline, so a server
that hangs (the common failure of stdio servers) costs one timeout, never a stuck
collector: the connection is then torn down, the process tree killed, and the caller
starts a new one. A server that exits is seen at once (its stdout closes) and reported
with the tail of its stderr.

    with Connection(ServerSpec("time", command="mcp-server-time")) as c:
        tools = c.list_tools()
        result = c.call_tool("get_current_time", {"timezone": "UTC"}, timeout=10)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import tempfile
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from collectors.env import EnvError
from schemas.errors import MissingExtraError

CONNECTION_CLOSED = -32000  # the SDK's JSON-RPC code for a transport that ended


@dataclass(frozen=True)
class ServerSpec:
    """How to reach one MCP server: a command over stdio, or a streamable HTTP ``url``."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    cwd: str | None = None


class ServerTimeout(EnvError):
    """The server did not answer in time (it was stopped)."""


class ServerDied(EnvError):
    """The server process exited or the connection broke."""


class Connection:
    """One live connection; ``close`` is safe twice and kills the server process."""

    def __init__(self, spec: ServerSpec, *, startup_timeout: float = 30.0) -> None:
        try:
            import mcp
        except ImportError:
            raise MissingExtraError("mcp", "mcp") from None
        self.spec = spec
        self._mcp = mcp
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the server's log, closed in close())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp-{spec.name}", daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        self._session: asyncio.Future | None = None
        self.client: Any = None
        self.closed = False
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._session = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        if not self._ready.wait(startup_timeout) or self._failure is not None:
            failure, tail = self._failure, self._log_tail()
            self.close()
            if failure is None:
                raise ServerTimeout(f"mcp server {spec.name!r} did not start within {startup_timeout:g} s{tail}")
            raise ServerDied(f"mcp server {spec.name!r} failed to start: {_describe(failure)}{tail}")

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            from mcp import Client, StdioServerParameters
            from mcp.client.stdio import stdio_client

            if self.spec.url:
                target: Any = self.spec.url
            else:
                params = StdioServerParameters(
                    command=self.spec.command, args=list(self.spec.args), env={**self.spec.env} or None, cwd=self.spec.cwd
                )
                target = stdio_client(params, errlog=self._stderr)
            async with Client(target, cache=None) as client:
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # reported to the caller's thread
            self._failure = exc
            self._ready.set()
            if not isinstance(exc, Exception):
                raise

    def _run(self, coro: Coroutine, timeout: float, what: str) -> Any:
        if self.closed:
            coro.close()
            raise ServerDied(f"mcp server {self.spec.name!r} connection is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        # wait for the answer, the deadline, or the connection's end (a dead server), whichever comes first
        concurrent.futures.wait([future, self._session], timeout, return_when=concurrent.futures.FIRST_COMPLETED)
        if future.done() and not future.cancelled():
            exc = future.exception()
            closed = isinstance(exc, self._mcp.MCPError) and exc.code == CONNECTION_CLOSED
            if exc is None or (isinstance(exc, self._mcp.MCPError) and not closed and not self._session.done()):
                return future.result()
        name, hung = self.spec.name, not future.done() and not self._session.done()
        future.cancel()
        if hung:
            self.close()
            raise ServerTimeout(f"mcp server {name!r}: no answer to {what} within {timeout:g} s; server stopped")
        cause = self._failure or (future.exception() if future.done() and not future.cancelled() else None)
        tail = self._log_tail()
        self.close()
        raise ServerDied(f"mcp server {name!r} died during {what}: {_describe(cause) if cause else 'connection closed'}{tail}")

    # -- requests --------------------------------------------------------------------------------
    @property
    def server_info(self) -> dict[str, Any]:
        info = self.client.server_info
        return {
            "name": getattr(info, "name", self.spec.name),
            "version": getattr(info, "version", "") or "",
            "protocol": self.client.protocol_version,
            "instructions": self.client.instructions or "",
        }

    def list_tools(self, timeout: float = 30.0) -> list[Any]:
        async def every_page() -> list[Any]:
            tools, cursor = [], None
            while True:
                page = await self.client.list_tools(cursor=cursor) if cursor else await self.client.list_tools()
                tools += page.tools
                cursor = page.next_cursor
                if not cursor:
                    return tools

        return self._run(every_page(), timeout, "tools/list")

    def call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        """The ``CallToolResult``; ``mcp.MCPError`` for a JSON-RPC error; ServerTimeout, ServerDied."""
        return self._run(self.client.call_tool(name, arguments), timeout, f"tools/call {name}")

    # -- life cycle ------------------------------------------------------------------------------
    def _log_tail(self) -> str:
        with contextlib.suppress(Exception):
            self._stderr.flush()
            self._stderr.seek(0)
            lines = [ln for ln in self._stderr.read().splitlines() if ln.strip()]
            if lines:
                return f" (server stderr: {' | '.join(lines[-3:])[-300:]})"
        return ""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        with contextlib.suppress(Exception):
            self._session.result(10)  # the SDK terminates the process tree on exit
        if self._session is not None and not self._session.done():
            self._session.cancel()
            with contextlib.suppress(Exception):
                self._session.result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        with contextlib.suppress(Exception):
            self._loop.close()
        self._stderr.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def default_env() -> dict[str, str]:
    """What a server process inherits besides the SDK's safe default variables."""
    return {k: v for k, v in os.environ.items() if k in ("TZ", "LANG", "LC_ALL", "PYTHONPATH")}
