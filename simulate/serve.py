"""``trajforge sim serve``: an OpenAI-compatible chat endpoint over a local world model.

    trajforge sim serve --model runs/sft/final --port 8000   # POST /v1/chat/completions, GET /v1/models

Enough of the API for ``SimEnv``'s endpoint backend and any OpenAI client: ``messages``,
``temperature``, ``top_p``, ``max_tokens``, ``seed`` (and vLLM's ``min_tokens``), ``stream``
(the whole answer in one event; ``stream_options.include_usage``); the reply carries ``usage``.
Requests are answered one generate at a time. For real serving at
scale use vLLM or SGLang; this serves tests, laptops and a single GPU.
"""

from __future__ import annotations

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from simulate.backends import Backend


def chat_reply(backend: Backend, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """One ``/chat/completions`` answer; ``ValueError`` names what is wrong with the request."""
    messages = body.get("messages")
    ok = (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and isinstance(m.get("content"), str) and isinstance(m.get("role"), str) for m in messages)
    )
    if not ok:
        raise ValueError("messages: a non-empty list of {role, content} strings is required")
    try:
        c = backend.complete(
            [{"role": m["role"], "content": m["content"]} for m in messages],
            temperature=float(body.get("temperature") or 0.0),
            top_p=float(body.get("top_p") or 1.0),
            max_new_tokens=int(body.get("max_tokens") or 512),
            seed=int(body.get("seed") or 0),
            min_new_tokens=int(body.get("min_tokens") or 0),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad sampling parameter: {exc}") from None
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens,
            "total_tokens": c.prompt_tokens + c.completion_tokens,
        },
    }


def make_server(backend: Backend, name: str, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, reply: dict[str, Any], options: Any) -> None:
            """``reply`` as the API's server-sent events: the answer in one chunk, the finish,
            the usage when ``stream_options.include_usage`` asks, then ``[DONE]``."""
            head = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
            choice = reply["choices"][0]
            chunks = [
                head | {"choices": [{"index": 0, "delta": choice["message"], "finish_reason": None}]},
                head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
            ]
            if isinstance(options, dict) and options.get("include_usage") is True:
                chunks.append(head | {"choices": [], "usage": reply["usage"]})
            data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "trajforge"}]})
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {"status": "ok"})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                reply = chat_reply(backend, name, body)
                if body.get("stream") is True:
                    self._stream(reply, body.get("stream_options"))
                else:
                    self._send(200, reply)
            except ValueError as exc:
                self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})

        def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise here
            pass

    return ThreadingHTTPServer((host, port), Handler)
