"""An OpenAI-compatible chat endpoint that plays a scripted agent, for benchmarks and tests.

    python benchmarks/fake_llm.py --port 8000 --latency 1 --calls 6 --p429 0.1 --p500 0.02 --preset 0.01

``POST /v1/chat/completions`` answers like a model that makes ``calls`` tool calls (``run``
with ``echo step K``) and then a text answer. Which step a request is at comes from the id
of the newest tool result it carries (``call-K``), so a policy that drops old turns from
its prompt still gets the right next step. A request without tools (a summary) gets a
short text. Each answer waits ``latency`` seconds (plus up to ``jitter``), and reports
``usage`` (prompt tokens: the request's characters / 4; completion tokens: 20).

Faults, drawn per request from a seeded generator: HTTP 429 with ``Retry-After`` (``p429``),
HTTP 500 (``p500``), the connection reset without an answer (``preset``), and a 400
``context_length_exceeded`` whenever the prompt is longer than ``max_prompt_chars``.
``stats`` counts requests, faults, tokens served and the peak of requests in flight.

A raw asyncio HTTP/1.1 server (keep-alive, Content-Length bodies): small, and able to
reset a connection mid-request, which a framework would not let a handler do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
from dataclasses import dataclass, field


@dataclass
class Script:
    latency: float = 1.0
    jitter: float = 0.0
    calls: int = 6
    p429: float = 0.0
    p500: float = 0.0
    preset: float = 0.0
    retry_after: float = 0.2
    max_prompt_chars: int = 10_000_000
    completion_tokens: int = 20
    seed: int = 0
    faults: tuple[int, ...] = ()  # the first requests' answers, in order: 429, 500, 401 or 0 (a reset)
    keep_requests: bool = False  # keep each request's body in ``requests`` (tests)
    tool: str = "run"  # the tool each call names; its arguments: ``echo step K`` for run, else ``arguments``
    arguments: dict | None = None


@dataclass
class Stats:
    requests: int = 0
    answered: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    r429: int = 0
    r500: int = 0
    resets: int = 0
    context_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    by_status: dict[int, int] = field(default_factory=dict)


class FakeLLM:
    """The server; ``start()`` runs it on a thread of its own and returns its base URL."""

    def __init__(self, script: Script | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.script = script or Script()
        self.stats = Stats()
        self.rng = random.Random(self.script.seed)
        self.host, self.port = host, port
        self.faults = list(self.script.faults)
        self.requests: list[dict] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: asyncio.base_events.Server | None = None

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> str:
        ready = threading.Event()

        def main() -> None:
            self.loop = asyncio.new_event_loop()
            self.server = self.loop.run_until_complete(
                asyncio.start_server(self._serve, self.host, self.port, backlog=4096, limit=1 << 24)
            )
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=main, name="fake-llm", daemon=True)
        self.thread.start()
        ready.wait(10)
        return self.url

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def close(self) -> None:
        if self.loop is not None:

            async def stop() -> None:
                self.server.close()
                self.loop.stop()

            asyncio.run_coroutine_threadsafe(stop(), self.loop)
            self.thread.join(5)

    # -- HTTP --------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines[1:] if ":" in h)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self._answer(method, path, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _answer(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection was reset on purpose."""
        s, stats = self.script, self.stats
        stats.requests += 1
        stats.in_flight += 1
        stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
        try:
            await asyncio.sleep(s.latency + (self.rng.random() * s.jitter if s.jitter else 0.0))
            if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
                self._send(writer, 404, {"error": {"message": f"no route {method} {path}"}})
                return True
            draw = self.rng.random()
            if self.faults:
                fault = self.faults.pop(0)
                draw = 2.0  # no drawn fault after a scripted one
                if fault == 0:
                    stats.resets += 1
                    writer.transport.abort()
                    return False
                if fault == 429:
                    stats.r429 += 1
                    self._send(writer, 429, {"error": {"message": "rate limited"}}, {"Retry-After": f"{s.retry_after:g}"})
                    return True
                self._send(
                    writer,
                    fault,
                    {"error": {"message": f"scripted {fault}", "code": "invalid_api_key" if fault == 401 else None}},
                )
                return True
            if draw < s.preset:
                stats.resets += 1
                writer.transport.abort()
                return False
            if draw < s.preset + s.p429:
                stats.r429 += 1
                retry = {"Retry-After": f"{s.retry_after:g}"}
                self._send(writer, 429, {"error": {"message": "rate limited", "code": "rate_limit_exceeded"}}, retry)
                return True
            if draw < s.preset + s.p429 + s.p500:
                stats.r500 += 1
                self._send(writer, 500, {"error": {"message": "overloaded"}})
                return True
            request = json.loads(body)
            if s.keep_requests:
                self.requests.append(request)
            messages = request.get("messages") or []
            chars = sum(len(json.dumps(m)) for m in messages)
            if chars > s.max_prompt_chars:
                stats.context_errors += 1
                error = {"message": "This model's maximum context length is exceeded", "code": "context_length_exceeded"}
                self._send(writer, 400, {"error": error, "code": "context_length_exceeded"})
                return True
            message = self._reply(request, messages)
            usage = {"prompt_tokens": chars // 4, "completion_tokens": s.completion_tokens}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            stats.prompt_tokens += usage["prompt_tokens"]
            stats.completion_tokens += usage["completion_tokens"]
            stats.answered += 1
            reply = {
                "id": f"chatcmpl-{stats.requests}",
                "object": "chat.completion",
                "created": 0,
                "model": request.get("model", "fake"),
                "choices": [
                    {"index": 0, "message": message, "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}
                ],
                "usage": usage,
            }
            self._send(writer, 200, reply)
            return True
        finally:
            stats.in_flight -= 1

    def _reply(self, request: dict, messages: list) -> dict:
        if not request.get("tools"):
            return {"role": "assistant", "content": "The agent ran echo commands and saw their output."}
        step = 0
        for m in reversed(messages):
            if m.get("role") == "tool" and str(m.get("tool_call_id", "")).startswith("call-"):
                step = int(m["tool_call_id"].split("-", 1)[1]) + 1
                break
        if step >= self.script.calls:
            return {"role": "assistant", "content": "Done."}
        args = {"command": f"echo step {step}"} if self.script.tool == "run" else (self.script.arguments or {})
        call = {"id": f"call-{step}", "type": "function", "function": {"name": self.script.tool, "arguments": json.dumps(args)}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    def _send(self, writer: asyncio.StreamWriter, status: int, body: dict, headers: dict | None = None) -> None:
        self.stats.by_status[status] = self.stats.by_status.get(status, 0) + 1
        data = json.dumps(body).encode()
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests"}.get(
            status, "Internal Server Error"
        )
        head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json", f"Content-Length: {len(data)}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    for name, default in (("latency", 1.0), ("jitter", 0.0), ("p429", 0.0), ("p500", 0.0), ("preset", 0.0)):
        ap.add_argument(f"--{name}", type=float, default=default)
    ap.add_argument("--calls", type=int, default=6)
    args = ap.parse_args(argv)
    server = FakeLLM(Script(args.latency, args.jitter, args.calls, args.p429, args.p500, args.preset), port=args.port)
    print(server.start(), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
