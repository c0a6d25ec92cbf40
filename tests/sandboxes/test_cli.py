from __future__ import annotations

import os
import subprocess
import sys

from sandboxes.images import debian_mirror, root_path
from tests.conftest import cli


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trajforge", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_doctor_reports_each_backend(built):
    out = cli("sandboxes", "doctor").stdout.splitlines()
    assert out[0].startswith("docker: ok (podman") and "start" in out[0] and "exec" in out[0]
    assert out[1].startswith("local: ok (bwrap, cgroup")


def test_doctor_fails_when_no_backend_works(built, tmp_path):
    env = {
        "DOCKER_HOST": f"unix://{tmp_path}/none.sock",
        "TRAJFORGE_PODMAN_SOCK": f"{tmp_path}/none.sock",
        "TRAJFORGE_BWRAP": "/nonexistent/bwrap",
    }
    proc = run_cli("sandboxes", "doctor", env=env)
    assert proc.returncode == 1
    docker_line, local_line = proc.stdout.splitlines()
    assert docker_line.startswith("docker: unavailable (no container engine answers") and "engine start" in docker_line
    assert local_line.startswith("local: unavailable (/nonexistent/bwrap is not installed")
    assert "Traceback" not in proc.stderr


def test_build_is_cached_and_names_its_outputs(built):
    out = cli("sandboxes", "build").stdout
    assert f"root: {root_path()}" in out
    assert "terminal: localhost/trajforge-terminal:latest" in out and "swe: localhost/trajforge-swe:latest" in out
    assert (root_path() / "work").is_dir() and (root_path() / "usr/bin/tmux").exists()


def test_engine_start_is_idempotent(built):
    assert cli("sandboxes", "engine", "start").stdout.strip() == f"DOCKER_HOST={built}"


def test_gc_cli_removes_orphans(built, orphan_factory):
    orphan = orphan_factory()
    out = cli("sandboxes", "gc").stdout
    assert orphan in out and out.strip().splitlines()[-1].endswith("removed")


def test_debian_mirror_is_read_from_apt_sources():
    assert debian_mirror().startswith("http")
