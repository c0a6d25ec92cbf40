"""Shared fixtures: small synthetic transitions and stores made in the test itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

from collectors.synth import Synthesizer
from pipelines.store import StoreWriter, WriterOptions

BACKENDS = ["docker", "local"]


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
