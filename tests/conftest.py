"""Shared fixtures: small synthetic transitions and stores made in the test itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collectors.synth import Synthesizer
from pipelines.store import StoreWriter, WriterOptions

BACKENDS = ["docker", "local"]

#: Fixtures that start the real sandboxes (the Podman service, the built Debian root).
SANDBOX_FIXTURES = {"built", "backend"}
#: Test modules that need more than `make install` as a whole, and what (see the markers in
#: pyproject.toml): a real browser, desktop or phone bridge from the system packages, the
#: published MCP servers, or a container engine.
NEEDS = {
    "collectors/test_web.py": "system",
    "collectors/test_os.py": "system",
    "collectors/test_android.py": "system",
    "collectors/test_mcp.py": "mcp_servers",
    "deploy/test_image.py": "sandbox",
}


def pytest_collection_modifyitems(config, items):
    """Mark each test by what it needs beyond `make install`, so `make test-unit` can leave
    those out: the sandbox fixtures mark themselves, the modules above as listed."""
    here = Path(__file__).parent
    for item in items:
        if SANDBOX_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.sandbox)
        need = NEEDS.get(Path(item.fspath).relative_to(here).as_posix())
        if need:
            item.add_marker(getattr(pytest.mark, need))


@pytest.fixture(scope="session")
def built():
    """The real Podman service, Debian root and images (cached; built when missing)."""
    from sandboxes.engine import client, start_podman_service
    from sandboxes.images import build_images, build_root

    root = build_root(log=lambda m: print(m, file=sys.stderr))
    host = start_podman_service()
    build_images(client(host), root=root, log=lambda m: print(m, file=sys.stderr))
    return host


@pytest.fixture(params=BACKENDS, scope="session")
def backend(request, built):
    return request.param


SMALL = {"min_obs_bytes": 200, "max_obs_bytes": 800, "pool_size": 300}


def make_transitions(n: int, seed: int = 0, **kw):
    return list(Synthesizer(seed, **{**SMALL, **kw}).transitions(n))


@pytest.fixture
def transitions():
    return make_transitions(300)


@pytest.fixture
def store(tmp_path, transitions):
    """A store with one synthetic run, small shards (several per domain)."""
    path = tmp_path / "store"
    with StoreWriter(str(path), "synth-s0", WriterOptions(rows_per_batch=8, rows_per_shard=20)) as w:
        w.write_many(transitions)
    return path


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real front door in a subprocess, as a user would."""
    proc = subprocess.run([sys.executable, "-m", "trajforge", *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"trajforge {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc
