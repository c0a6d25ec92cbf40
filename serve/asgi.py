"""The served app for ASGI servers and OpenEnv's runtime (``openenv.yaml``: ``app:
serve.asgi:app``), configured by the environment, since such servers take no arguments:

    TRAJFORGE_SERVE_SUITE    a task suite or job file (default: examples/tasks/terminal.yaml)
    TRAJFORGE_SERVE_TOKEN    the bearer token clients must send: required (the server's
                             address is not known here, and a container binds beyond loopback)
    TRAJFORGE_SERVE_BACKEND  real | sim            TRAJFORGE_SERVE_STORE  store (default /data/serve-store)
    TRAJFORGE_SERVE_MAX_SESSIONS (64)              TRAJFORGE_SERVE_IDLE_TIMEOUT (600 s)

``trajforge serve`` is the same app with flags; prefer it where you start the process.
"""

from __future__ import annotations

import os

from schemas.errors import ConfigError
from serve.app import build_app
from serve.session import Served, load_served


def app_from_environment():
    token = os.environ.get("TRAJFORGE_SERVE_TOKEN")
    if not token:
        raise ConfigError("TRAJFORGE_SERVE_TOKEN: the bearer token clients must send (this app may be reached beyond loopback)")
    suite = os.environ.get("TRAJFORGE_SERVE_SUITE", "examples/tasks/terminal.yaml")
    job, tasks = load_served(suite, backend=os.environ.get("TRAJFORGE_SERVE_BACKEND") or None)
    served = Served(job, tasks, store=os.environ.get("TRAJFORGE_SERVE_STORE", "/data/serve-store"))
    return build_app(
        served,
        max_sessions=int(os.environ.get("TRAJFORGE_SERVE_MAX_SESSIONS", "64")),
        idle_timeout_s=float(os.environ.get("TRAJFORGE_SERVE_IDLE_TIMEOUT", "600")) or None,
        token=token,
    )


app = app_from_environment()
