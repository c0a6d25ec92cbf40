"""The container engine behind ``DockerSandbox``: any Docker Engine API endpoint.

Users with Docker set nothing (``DOCKER_HOST`` or the default socket). Where Docker is
absent, ``start_podman_service`` runs Podman's Docker-compatible API service with the
project's ``containers.conf`` on ``/run/trajforge/podman.sock``; ``make test`` and the
README use it (``trajforge sandboxes engine start``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import time
from importlib import resources
from pathlib import Path

from sandboxes.errors import SandboxError
from sandboxes.paths import cache_dir, podman_socket, state_dir
from schemas.errors import require

API_VERSION = "1.41"


def containers_conf() -> Path:
    path = cache_dir() / "containers.conf"
    text = resources.files("sandboxes").joinpath("containers.conf").read_text()
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def podman_env() -> dict[str, str]:
    """Environment for podman commands (CLI or service) with the project's settings."""
    return {**os.environ, "CONTAINERS_CONF": str(containers_conf())}


def candidate_hosts(explicit: str | None = None) -> list[str]:
    hosts = [explicit] if explicit else []
    if os.environ.get("DOCKER_HOST"):
        hosts.append(os.environ["DOCKER_HOST"])
    hosts += [f"unix://{podman_socket()}", "unix:///var/run/docker.sock"]
    return list(dict.fromkeys(hosts))


@functools.lru_cache(maxsize=16)
def client(host: str, *, timeout: float = 600):
    """One SDK client per endpoint and process. API 1.41 is pinned (Podman 4's compat API;
    Docker accepts it too) so making a client costs no version round trip."""
    docker = require("docker", "docker")
    return docker.DockerClient(base_url=host, version=API_VERSION, timeout=timeout)


def ping(host: str) -> bool:
    if host.startswith("unix://") and not Path(host[7:]).exists():
        return False
    try:
        api = client(host).api
        return api._get(api._url("/_ping"), timeout=3).ok  # a short timeout: a hung endpoint is "down"
    except Exception:  # any transport failure means "not answering"
        client.cache_clear()  # a dead endpoint's client is not kept
        return False


def find_engine(explicit: str | None = None) -> str:
    """The first Docker Engine API endpoint that answers, or SandboxError with the fix."""
    for host in candidate_hosts(explicit):
        if ping(host):
            return host
    raise SandboxError(
        f"no container engine answers at {', '.join(candidate_hosts(explicit))} "
        "(start one: trajforge sandboxes engine start, or set DOCKER_HOST)"
    )


def start_podman_service(timeout: float = 30.0) -> str:
    """Start Podman's Docker API service on the project socket (no-op if it answers)."""
    sock = podman_socket()
    host = f"unix://{sock}"
    if ping(host):
        return host
    podman = shutil.which("podman")
    if podman is None:
        raise SandboxError("podman is not installed (apt-get install podman runc, or make test)")
    sock.parent.mkdir(parents=True, exist_ok=True)
    if sock.exists():
        sock.unlink()
    log = open(state_dir() / "podman-service.log", "ab")  # noqa: SIM115 (the service keeps it)
    proc = subprocess.Popen(
        [podman, "system", "service", "--time=0", host],
        env=podman_env(),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        # the service outlives this command: never in the caller's folder, which may be a
        # checkout that is deleted later (conmon then fails "to get working directory" and
        # no container starts again)
        cwd="/",
    )
    (state_dir() / "podman-service.pid").write_text(str(proc.pid))
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SandboxError(f"podman system service exited ({proc.returncode}); see {log.name}")
        if ping(host):
            return host
        time.sleep(0.1)
    raise SandboxError(f"podman system service did not answer on {host} within {timeout:.0f} s; see {log.name}")


def stop_podman_service() -> bool:
    pidfile = state_dir() / "podman-service.pid"
    if not pidfile.exists():
        return False
    with contextlib.suppress(ProcessLookupError, ValueError):
        os.kill(int(pidfile.read_text()), 15)
    pidfile.unlink()
    return True


def engine_version(host: str) -> str:
    v = client(host).version()
    name = next((c["Name"] for c in v.get("Components", []) if "podman" in c.get("Name", "").lower()), "docker")
    return f"{name.split()[0].lower()} {v.get('Version', '?')}"
