"""Sandbox attacks, each tried on both backends (docker over Podman, local over bubblewrap):
a disk flood, fork bombs (through ``exec`` and orphaned by a killed owner), missing tools,
host details read from /proc, and the network. Each test fails if its hole reopens."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from sandboxes import SandboxError, make_sandbox
from sandboxes.base import GRACE_S
from sandboxes.images import TOOLS
from sandboxes.paths import cache_dir, sandboxes_state, state_dir

BOMB = ":(){ :|:& };:"


@pytest.fixture
def small_disk(sandbox_config):
    sb = make_sandbox(dataclasses.replace(sandbox_config, disk_mb=64)).start()
    yield sb
    sb.close()


def leftovers(sandbox_id: str) -> list[str]:
    """Everything a sandbox can leave on this host: cgroups, folders, mounts, containers, processes."""
    from sandboxes.engine import client, find_engine

    found = glob.glob(f"/sys/fs/cgroup/*/trajforge/{sandbox_id}") + glob.glob(f"/sys/fs/cgroup/trajforge/{sandbox_id}")
    found += glob.glob(f"{state_dir()}/*/{sandbox_id}")
    with open("/proc/self/mountinfo") as f:
        found += [line.split()[4] for line in f if sandbox_id in line]
    engine = client(find_engine())
    found += [c.name for c in engine.containers.list(all=True, filters={"label": f"trajforge.sandbox={sandbox_id}"})]
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found += [line for line in ps.splitlines() if sandbox_id in line]
    return found


def test_disk_quota_gives_enospc_and_spares_the_host(small_disk):
    sb = small_disk
    assert "no disk quota" not in sb.describe()["disk"], sb.describe()
    snap = sb.snapshot()
    free_before = shutil.disk_usage(state_dir()).free
    for path in ("/work/big", "/tmp/big", "/var/tmp/big", "/work/.cache/big"):
        r = sb.exec(f"mkdir -p $(dirname {path}) && dd if=/dev/zero of={path} bs=1M count=400", timeout=60)
        assert r.exit_code != 0, (path, r)
        assert "No space left on device" in r.stderr or "Read-only file system" in r.stderr, (path, r.stderr)
    assert "No space left on device" in sb.exec("dd if=/dev/zero of=/work/more bs=1M count=8").stderr
    used = (free_before - shutil.disk_usage(state_dir()).free) >> 20
    assert used < 64 + 150, f"the host lost {used} MB to a 64 MB sandbox"  # slack: other work on this host
    for path in ("/", "/etc", "/usr/local", "/root"):  # nothing else is writable
        assert sb.exec(f"echo x > {path}/escape").exit_code != 0, path
    assert sb.exec("rm -f /work/big /tmp/big /var/tmp/big /work/.cache/big /work/more && echo ok > /work/s").ok
    assert sb.read_file("/work/s") == b"ok\n"
    sb.restore(snap)  # a restore keeps the quota and brings back the snapshot's files only
    assert sb.exec("test -e /work/s").exit_code == 1
    assert "No space left on device" in sb.exec("dd if=/dev/zero of=/work/big bs=1M count=400", timeout=60).stderr


def test_disk_quota_is_configurable_and_validated():
    from collectors.jobs import SandboxSection
    from sandboxes import SandboxConfig
    from schemas.errors import ConfigError

    assert SandboxConfig().disk_mb >= 1024 and SandboxSection().disk_mb == SandboxConfig().disk_mb
    for bad in (0, -5):
        with pytest.raises(ConfigError, match="disk_mb"):
            SandboxConfig(disk_mb=bad)
    assert SandboxSection(disk_mb=64).disk_mb == 64


def test_fork_bomb_ends_within_the_step_timeout(sandbox):
    t0 = time.monotonic()
    r = sandbox.exec(BOMB, timeout=3)
    assert time.monotonic() - t0 < 3 + GRACE_S + 15, "the fork bomb outlived its step"  # slack: a loaded host
    # killed at its deadline (137), or, on a host where every copy failed to fork, died out by itself sooner
    assert (r.timed_out and r.exit_code == 137) or r.duration_ms < 3000, r
    after = sandbox.exec("ps -e --no-headers | wc -l", timeout=10)
    assert after.ok and int(after.stdout) < 10, after  # the copies are gone: the sandbox is usable
    sid = sandbox.id
    sandbox.close()
    assert leftovers(sid) == []


def test_escaped_background_copies_are_killed_at_the_deadline(sandbox):
    # copies that outlive the exec's leader (and leave its process group) still end with the step
    r = sandbox.exec("(set -m; (while :; do sleep 0.2; done) & ) ; echo started", timeout=2)
    assert r.timed_out and "started" in r.stdout
    time.sleep(0.5)
    assert "sleep 0.2" not in sandbox.exec("ps -eo args").stdout
    # a background program whose output is redirected is a legitimate server: it stays
    assert sandbox.exec("sleep 300 >/dev/null 2>&1 & echo ok", timeout=5).stdout == "ok\n"
    assert "sleep 300" in sandbox.exec("ps -eo args").stdout


def test_fork_bomb_of_a_killed_owner_is_collected_by_gc(backend, sandbox_config):
    from sandboxes.gc import gc

    code = textwrap.dedent(
        f"""
        import os
        from sandboxes import SandboxConfig, make_sandbox
        sb = make_sandbox(SandboxConfig(backend={backend!r}, run_id="orphan-bomb", pids=64)).start()
        print(sb.id, flush=True)
        sb.exec("({BOMB}) >/dev/null 2>&1 &", timeout=5)
        os._exit(0)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    sandbox_id = out.stdout.strip()
    report = gc(docker=backend == "docker", local=backend == "local")
    assert any(sandbox_id in line for line in report.lines()), report.lines()
    assert leftovers(sandbox_id) == []


def test_common_tools_are_installed(sandbox):
    r = sandbox.exec(f"for t in {' '.join(TOOLS)}; do command -v $t >/dev/null || echo missing $t; done")
    assert r.stdout == "", r.stdout
    r = sandbox.exec(
        "vim --version | head -1; echo '{\"a\": 41}' | jq '.a + 1'; "
        "printf 'int main(){return 7;}' > /tmp/t.c && gcc /tmp/t.c -o /tmp/t && /tmp/t; echo rc=$?"
    )
    assert "VIM - Vi IMproved" in r.stdout and "\n42\n" in r.stdout and "rc=7" in r.stdout, r


def test_environment_and_mounts_reveal_no_host_details(backend, sandbox_factory, monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"] + ":/opt/host-only/bin")
    monkeypatch.setenv("TF_HOST_CANARY", "canary-8c1f3b")
    sb = sandbox_factory()
    r = sb.exec(
        "for f in /proc/1/environ /proc/self/environ; do tr '\\0' '\\n' < $f; done; env; "
        "cat /proc/mounts /proc/self/mountinfo /proc/1/mountinfo; df -a 2>/dev/null"
    )
    assert r.ok and "PATH=" in r.stdout
    assert "canary-8c1f3b" not in r.stdout and "TF_HOST_CANARY" not in r.stdout
    assert "/opt/host-only" not in r.stdout  # the host's PATH, in PID 1 too
    host_paths = [str(state_dir()), str(cache_dir()), sb.id, os.path.expanduser("~") + "/"]
    if backend == "local":
        host_paths.append(str(sb.work))
    for path in host_paths:  # Podman's own storage paths remain in its overlay's options (see docs/security.md)
        assert path not in r.stdout, path


def test_no_network_to_the_host(sandbox):
    r = sandbox.exec(
        "curl -s -m 3 http://127.0.0.1:1/ ; echo curl=$?; "
        "python3 -c \"import socket; s = socket.socket(); s.settimeout(2); s.connect(('10.0.2.2', 22))\" 2>&1; "
        "echo links: $(ip -o link | cut -d: -f2)",
        timeout=20,
    )
    assert "curl=0" not in r.stdout and "unreachable" in r.stdout.lower(), r.stdout
    assert r.stdout.rstrip().endswith("links: lo"), r.stdout  # no interface but loopback


def test_a_dead_sandbox_is_an_error_not_a_result(sandbox_factory, kill_from_outside):
    sb = sandbox_factory()
    kill_from_outside(sb)
    with pytest.raises(SandboxError):
        for _ in range(20):  # the engine may report the death a moment late
            sb.exec("true", timeout=5)
            time.sleep(0.1)


def test_no_device_nodes_and_snapshots_stay_private(backend, sandbox):
    """Snapshots copy agent-made files to the host: no device node can be made inside, and
    the backend's host folder is private to its owner (set-id bits kept by the copy)."""
    r = sandbox.exec("mknod /work/mem c 1 1 && echo made", timeout=10)
    assert r.exit_code != 0 and "made" not in r.stdout, r
    sandbox.snapshot()
    assert os.stat(sandboxes_state(backend)).st_mode & 0o777 == 0o700
