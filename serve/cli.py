"""``trajforge serve``: a suite's tasks as remote environments for RL trainers, over
OpenEnv's protocol, every served step recorded into a store."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
from typing import Annotated

import typer

from schemas.errors import ConfigError

TOKEN_ENV = "TRAJFORGE_SERVE_TOKEN"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    suite_or_job: Annotated[str, typer.Argument(help="A task suite (YAML/JSONL) or a job file (its tasks and settings).")],
    backend: Annotated[str | None, typer.Option(help="real | sim (default: the job's; sim needs the job's sim section).")] = None,
    host: Annotated[str, typer.Option(help="Address to bind; any but loopback needs a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one; the line printed says which).")] = 8000,
    store: Annotated[str | None, typer.Option(help="Store the served steps are recorded into.")] = "serve-store",
    no_store: Annotated[bool, typer.Option("--no-store", help="Record nothing.")] = False,
    max_sessions: Annotated[int, typer.Option(min=1, help="Concurrent sessions; one more is refused, never queued.")] = 64,
    idle_timeout: Annotated[float, typer.Option(min=0, help="Seconds before an idle session is closed (0: never).")] = 600.0,
    max_frame_mb: Annotated[float, typer.Option(min=0.01, help="Largest WebSocket frame accepted, MiB.")] = 8.0,
    token: Annotated[str | None, typer.Option(help=f"Bearer token clients must send (default: ${TOKEN_ENV}).")] = None,
    run_id: Annotated[str | None, typer.Option(help="Run id of the recorded steps (default: serve-<time>-<random>).")] = None,
) -> None:
    """Serve the tasks of SUITE_OR_JOB at ws://HOST:PORT/ws until interrupted (SIGINT/SIGTERM
    close every session, record their episodes and destroy their sandboxes)."""
    import uvicorn

    from serve.app import build_app
    from serve.session import Served, load_served

    token = token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and not token:
        raise ConfigError(f"--host {host}: serving beyond this machine needs a bearer token (--token or ${TOKEN_ENV})")
    if backend not in (None, "real", "sim"):
        raise ConfigError(f"--backend: expected real or sim, got {backend!r}")
    job, tasks = load_served(suite_or_job, backend=backend)
    served = Served(job, tasks, store=None if no_store else store, run_id=run_id)
    app = build_app(served, max_sessions=max_sessions, idle_timeout_s=idle_timeout or None, token=token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # before the line below: a client that reads it may connect at once
    except OSError as exc:
        raise ConfigError(f"--host {host} --port {port}: cannot bind ({exc.strerror})") from None
    config = uvicorn.Config(
        app, log_level="warning", ws_max_size=int(max_frame_mb * (1 << 20)), ws_ping_interval=20, timeout_graceful_shutdown=30
    )
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(
        f"serving {len(tasks)} tasks ({', '.join(served.domains)}; backend {job.backend}) at ws://{shown}:{sock.getsockname()[1]}/ws"
        f" (run {served.run_id}{', recording into ' + store if store and not no_store else ''})",
        flush=True,
    )
    for sig in (signal.SIGINT, signal.SIGTERM):  # uvicorn shuts down gracefully, then raises the signal again:
        signal.signal(sig, lambda *_: None)  # once it has, the cleanup below runs and the process exits 0
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        served.close()  # whatever shutdown left (a crash of the server loop): episodes written, sandboxes destroyed
        print(f"stopped: {served.episodes_written} episodes recorded in run {served.run_id}", file=sys.stderr, flush=True)
