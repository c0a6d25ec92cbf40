"""trajforge's environments over OpenEnv's protocol, on openenv-core's own server.

openenv-core owns the wire: ``HTTPEnvServer`` runs the WebSocket sessions at ``/ws``
(``reset``, ``step``, ``state``, ``close`` frames; one environment per connection, the
session limit, the idle reaper) and ``/schema``, ``/health``, ``/metadata``. This module
supplies the environment (``ServedEnvironment``, one ``serve.session.Session`` each), the
typed action and observation, and two guards around the app:

- ``BearerAuth``: every request but ``/health`` must carry ``Authorization: Bearer
  <token>`` when the server has a token (required on any address but loopback);
- ``NoMcpFrames``: the protocol's ``mcp`` frames are refused (they may name another
  session's id; no trajforge environment is an MCP environment); the HTTP ``/mcp`` route
  answers every call with JSON-RPC's method-not-found and touches no session.

The server runs in OpenEnv's production mode: the HTTP ``/reset`` and ``/step`` routes,
which make and destroy an environment per request, are not mounted, so an episode lives in
one WebSocket session.

An action is the domain's canonical action JSON (``{"action": "run", "command": "ls"}``),
passed through unvalidated to the session: the domain's action space parses it, and what
does not parse is a recorded action error, as in collection. ``/schema`` describes the
actions of every domain the suite serves (``anyOf``, one member per domain and action).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hmac
import json
import time
from typing import Any, ClassVar

from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import (
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    Observation,
    ServerMode,
    State,
)
from pydantic import ConfigDict
from starlette.requests import Request
from starlette.websockets import WebSocketDisconnect

from schemas.domains import domain as domain_spec
from serve.session import END_EPISODE, RESET_KEYS, Served, SessionError


class ServedAction(Action):
    """A domain's action as its canonical JSON: ``{"action": KIND, ...arguments}``."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)
    domains: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return action_schema(cls.domains)

    def raw(self) -> dict[str, Any]:
        """What the client sent, as the domain's action space reads it."""
        return dict(self.model_extra or {})


def action_class(domains: list[str]) -> type[ServedAction]:
    """The action model of a server that serves ``domains``."""
    return type("TrajforgeAction", (ServedAction,), {"domains": tuple(domains), "__module__": __name__})


def action_schema(domains: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """JSON Schema of every action of ``domains``, made from their action spaces."""
    members = []
    for d in domains:
        for kind, cls in domain_spec(d).action_space().actions.items():
            s = cls.json_schema()
            members.append(
                {
                    "title": f"{d}.{kind}",
                    "description": " ".join((cls.__doc__ or "").split()),
                    "type": "object",
                    "properties": {"action": {"const": kind}, **s["properties"]},
                    "required": ["action", *s["required"]],
                    "additionalProperties": False,
                }
            )
    members.append(
        {
            "title": END_EPISODE,
            "description": "End the episode here (nothing is executed): the task's check gives the reward, done is true.",
            "type": "object",
            "properties": {"action": {"const": END_EPISODE}},
            "required": ["action"],
            "additionalProperties": False,
        }
    )
    return {
        "title": "TrajforgeAction",
        "description": "The domain's canonical action JSON; the session's domain is its task's (see the observation).",
        "anyOf": members,
    }


class ServedObservation(Observation):
    """What the environment shows after a reset or a step (``done`` and ``reward`` beside it)."""

    text: str = ""
    format: str = "text"
    screenshot_png_b64: str | None = None
    domain: str = ""
    task_id: str = ""
    instruction: str | None = None
    step: int = 0
    action_error: str | None = None
    truncated: bool = False


class ServedEnvironment(Environment[ServedAction, ServedObservation, State]):
    """One WebSocket session's environment: a ``serve.session.Session`` (made cheaply here;
    its sandbox starts at the first reset)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: Served) -> None:
        super().__init__()
        self.served = served
        self.session = served.open_session()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ServedObservation:
        unknown = sorted(set(kwargs) - set(RESET_KEYS))
        if unknown:
            raise SessionError(f"reset: unknown parameter {unknown[0][:60]!r} (known: seed, episode_id, {', '.join(RESET_KEYS)})")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise SessionError(f"reset: seed must be an integer >= 0, got {str(seed)[:60]!r}")
        obs, _info = self.session.reset(seed=seed, **kwargs)
        task = self.session.episode.task
        return _observation(obs, task.domain, task.id, task.instruction, 0, None, False, False, None)

    def step(self, action: ServedAction, timeout_s: float | None = None, **kwargs: Any) -> ServedObservation:
        raw = action.raw() if isinstance(action, ServedAction) else action
        obs, reward, terminated, truncated, info = self.session.step(raw)
        task = self.session.episode.task
        return _observation(
            obs,
            task.domain,
            task.id,
            None,
            self.session.steps,
            info.get("action_error"),
            truncated,
            terminated or truncated,
            reward,
        )

    @property
    def state(self) -> State:
        ep = self.session.episode
        return State(
            episode_id=ep.recorder.trajectory_id if ep else None,
            step_count=self.session.steps,
            task_id=ep.task.id if ep else None,
            domain=ep.task.domain if ep else None,
            done=ep.done if ep else None,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        served = self.served
        return EnvironmentMetadata(
            name="trajforge",
            description=(
                f"{len(served.order)} tasks ({', '.join(served.domains)}), backend {served.job.backend}; "
                "every step recorded as world-model data"
            ),
            version="1",
            documentation_url="https://github.com/trajforge/trajforge#serving-environments",
        )

    def close(self) -> None:
        idle = self.served.idle_timeout_s
        reason = "idle_timeout" if idle and time.monotonic() - self.session.last_activity >= idle else "closed"
        self.session.close(reason)


def _observation(obs, domain, task_id, instruction, step, action_error, truncated, done, reward) -> ServedObservation:
    return ServedObservation(
        text=obs.text,
        format=obs.format,
        screenshot_png_b64=base64.b64encode(obs.screenshot_png).decode() if obs.screenshot_png else None,
        domain=domain,
        task_id=task_id,
        instruction=instruction,
        step=step,
        action_error=action_error,
        truncated=truncated,
        done=done,
        reward=reward,
    )


# -- the app ----------------------------------------------------------------------------------
class BearerAuth:
    """ASGI middleware: ``Authorization: Bearer <token>`` on every HTTP request and
    WebSocket handshake but ``GET /health`` (compared in constant time)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path") != "/health":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008, "reason": "a bearer token is required"})
                else:
                    body = b'{"detail":"a bearer token is required (Authorization: Bearer ...)"}'
                    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
                    await send({"type": "http.response.start", "status": 401, "headers": headers})
                    await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


_REFUSED_MCP = json.dumps({"type": "mcp frames are not served by trajforge"})


class NoMcpFrames:
    """ASGI middleware: a WebSocket ``mcp`` frame reaches the session as an unknown type
    (the session answers with an error frame): such frames may name other sessions. And a
    session whose client left first ends quietly (openenv-core closes the socket again)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def guarded() -> dict:
            message = await receive()
            text = message.get("text")
            if message["type"] == "websocket.receive" and text and '"mcp"' in text:
                try:
                    is_mcp = json.loads(text).get("type") == "mcp"
                except (ValueError, AttributeError, RecursionError):
                    is_mcp = False
                if is_mcp:
                    message = {**message, "text": _REFUSED_MCP}
            return message

        with contextlib.suppress(WebSocketDisconnect):  # openenv-core closing a socket the client already closed
            await self.app(scope, guarded, send)


def build_app(
    served: Served,
    *,
    max_sessions: int = 64,
    idle_timeout_s: float | None = 600.0,
    token: str | None = None,
):
    """The FastAPI app: openenv-core's routes over ``served``, with the guards above."""
    from fastapi import FastAPI

    served.idle_timeout_s = idle_timeout_s
    server = HTTPEnvServer(
        functools.partial(ServedEnvironment, served),
        action_class(served.domains),
        ServedObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s),
    )
    app = FastAPI(title="trajforge environments (OpenEnv protocol)", version="1", docs_url=None, redoc_url=None)
    server.register_routes(app, mode=ServerMode.PRODUCTION)
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", None) != "/mcp"]
    app.post("/mcp")(_no_mcp)
    app.router.on_shutdown.append(_closer(served))
    app.add_middleware(NoMcpFrames)
    if token:
        app.add_middleware(BearerAuth, token=token)
    app.state.served, app.state.env_server = served, server
    return app


async def _no_mcp(request: Request) -> dict[str, Any]:
    """JSON-RPC's method-not-found for every call: no trajforge environment is an MCP one,
    and openenv-core's handler would take other sessions' ids."""
    try:
        body = json.loads(await request.body())
        rid = body.get("id") if isinstance(body, dict) and isinstance(body.get("id"), str | int) else None
    except (ValueError, RecursionError):
        rid = None
    message = "trajforge environments are not MCP environments: run episodes in a WebSocket session at /ws"
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": message}}


def _closer(served: Served):
    async def close() -> None:  # after uvicorn closed the connections: whatever is left, and the writer
        import asyncio

        await asyncio.get_running_loop().run_in_executor(None, served.close)

    return close
