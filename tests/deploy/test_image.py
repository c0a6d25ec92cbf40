"""The project image (top-level Dockerfile, `make image`): built here with Podman from the
offline debootstrapped Debian base the sandboxes make (no registry), it runs `trajforge --help`,
has what the collectors need, and collects a tiny job into a store mounted from the host.

The first build on a fresh machine installs Chromium, the desktop stack and the Python
packages (a few minutes, from the host's apt archive and the network); Podman's layer cache
makes later builds take seconds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pipelines.query import run_query

ROOT = Path(__file__).resolve().parents[2]
TAG = "localhost/trajforge:test"
BUILD_TIMEOUT_S = 2400  # a first build on a loaded 2-core machine; a cached one takes seconds


def _podman(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    from sandboxes.engine import podman_env

    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, env=podman_env())


@pytest.fixture(scope="module")
def image(built) -> str:
    """The project image, built by scripts/build-image.sh from localhost/trajforge-base."""
    from sandboxes.engine import podman_env
    from sandboxes.images import BASE_IMAGE

    assert shutil.which("podman"), "podman is not installed (make system-deps)"
    env = {**podman_env(), "IMAGE": TAG, "BASE_IMAGE": BASE_IMAGE, "BEAM_BOOT_IMAGE": BASE_IMAGE, "ENGINE": "podman"}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-image.sh")],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"building the project image failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}"
    return TAG


def test_the_image_runs_trajforge_help(image):
    proc = _podman("run", "--rm", "--network=none", image, "--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("collect", "curate", "release", "sandboxes"):
        assert command in proc.stdout


def test_the_image_has_what_the_collectors_need(image):
    checks = (
        "chromium --version && adb version | head -1 && bwrap --version && tmux -V && command -v Xvfb openbox xdotool"
        " && /usr/bin/python3 -c 'import pyatspi' && python -c 'import apache_beam, playwright, tantivy, mcp, adbutils;"
        ' print("beam", apache_beam.__version__)\' && ls .venv-mcp && test -x /usr/local/bin/trajforge-entrypoint'
    )
    proc = _podman("run", "--rm", "--network=none", "--entrypoint", "sh", image, "-c", checks)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    out = proc.stdout
    assert "Chromium" in out and "Android Debug Bridge" in out and "bubblewrap" in out and "tmux" in out
    assert "beam 2." in out and "mcp-server-time" in out and "mcp-server-sqlite" in out


def test_the_image_holds_the_bytecode_of_every_module(image):
    """Modules `trajforge --help` does not import are compiled too: a container writes no
    bytecode that outlives it, so a job would compile them at every start."""
    check = (
        "import importlib.util, pathlib; "
        "py = [p for d in ('formats', 'pipelines', 'collectors') for p in pathlib.Path(d).rglob('*.py')]; "
        "missing = [str(p) for p in py if not pathlib.Path(importlib.util.cache_from_source(str(p))).exists()]; "
        "print(len(py), 'modules', missing)"
    )
    proc = _podman("run", "--rm", "--network=none", "--entrypoint", "python", image, "-c", check)
    assert proc.returncode == 0, proc.stderr
    count = int(proc.stdout.split()[0])
    assert count > 50 and proc.stdout.strip().endswith("modules []"), proc.stdout


def test_the_image_collects_a_tiny_job_into_a_mounted_store(image, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = _podman(
        "run",
        "--rm",
        "--network=none",
        "-v",
        f"{data}:/data",
        image,
        "collect",
        "examples/jobs/search.yaml",
        "--store",
        "/data/store",
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "8 episodes collected" in proc.stdout, proc.stdout
    rows = run_query("SELECT count(DISTINCT trajectory_id) AS n, max(reward) AS best FROM transitions", str(data / "store"))
    assert rows.to_pylist() == [{"n": 8, "best": 1.0}]


def test_the_entrypoint_says_so_when_started_as_a_beam_worker_without_the_launcher(image):
    """Built offline (BEAM_BOOT_IMAGE is the base), the image has no Beam boot launcher to hand
    worker arguments to: one line saying so, not a confusing trajforge usage error."""
    proc = _podman("run", "--rm", "--network=none", image, "--id=1", "--control_endpoint=localhost:1")
    assert proc.returncode == 2 and "no /opt/apache/beam/boot (rebuild with BEAM_BOOT_IMAGE)" in proc.stderr, proc.stderr
