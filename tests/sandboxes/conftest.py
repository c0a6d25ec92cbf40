"""Sandbox fixtures: the real Podman service and the real debootstrapped root.

The session set-up builds (or reuses from the cache) the Debian root and the images, and
starts the Podman service; a machine without them fails here with the reason, it does
not skip: `make test` installs everything these tests need.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from sandboxes import SandboxConfig, make_sandbox


@pytest.fixture
def sandbox_config(backend):
    return SandboxConfig(
        backend=backend,
        memory_mb=256,
        cpus=0.5,
        pids=64,
        output_cap_bytes=64 * 1024,
        exec_timeout_s=30,
        run_id="pytest",
    )


@pytest.fixture
def sandbox_factory(sandbox_config):
    made = []

    def make():
        sb = make_sandbox(sandbox_config).start()
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.close()


@pytest.fixture
def sandbox(sandbox_factory):
    return sandbox_factory()


@pytest.fixture
def kill_from_outside(backend, built):
    def kill(sb):
        if backend == "docker":
            from sandboxes.engine import client

            client(built).containers.get(sb.container.id).kill()
        else:
            os.kill(sb.init_pid, signal.SIGKILL)

    return kill


@pytest.fixture
def orphan_factory(sandbox_config):
    """Start a sandbox in a process that then dies without closing it; return its id."""

    def make() -> str:
        code = textwrap.dedent(
            f"""
            import os
            from sandboxes import SandboxConfig, make_sandbox
            sb = make_sandbox(SandboxConfig(backend={sandbox_config.backend!r}, run_id="orphan")).start()
            print(sb.id, flush=True)
            os._exit(0)
            """
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        return out.stdout.strip()

    return make
