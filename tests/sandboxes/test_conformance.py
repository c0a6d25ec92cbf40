"""One conformance suite, run over both backends: the same tests, not two copies.

The docker backend runs against the Podman service that the test set-up starts; the local
backend against the debootstrapped root. Both are built by ``tests/sandboxes/conftest.py``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from sandboxes import SandboxConfig, SandboxDied, SandboxError, make_sandbox


def test_exec_exit_codes_output_and_duration(sandbox):
    r = sandbox.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.timed_out and not r.output_truncated and r.duration_ms > 0
    assert sandbox.exec("true").ok


def test_exec_stdin_env_and_cwd(sandbox):
    assert sandbox.exec("cat | tr a-z A-Z", stdin="hello").stdout == "HELLO"
    assert sandbox.exec("echo $FOO", env={"FOO": "bar"}).stdout == "bar\n"
    assert sandbox.exec("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sandbox.exec("pwd").stdout == "/work\n"
    assert sandbox.exec("cd /nonexistent", cwd=None).exit_code != 0


def test_files_round_trip_binary_and_tree(sandbox):
    blob = bytes(range(256)) * 4000
    sandbox.write_file("/work/data/blob.bin", blob)
    sandbox.write_file("/work/a.txt", "héllo\n")
    assert sandbox.read_file("/work/data/blob.bin") == blob
    assert sandbox.exec("cat /work/a.txt").stdout == "héllo\n"
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/work/missing.txt")
    tree = {e.path: e for e in sandbox.list_tree("/work", depth=2)}
    assert tree["data"].kind == "dir" and tree["data/blob.bin"].size == len(blob) and tree["a.txt"].kind == "file"
    assert "data/blob.bin" not in {e.path for e in sandbox.list_tree("/work", depth=1)}


def test_shell_keeps_cwd_env_functions_and_jobs(sandbox):
    sh = sandbox.shell()
    r = sh.run("mkdir -p /tmp/x && cd /tmp/x && export GREETING=hi && f() { echo fn-$1; }")
    assert r.exit_code == 0 and r.cwd == "/tmp/x"
    r = sh.run("echo $GREETING $PWD; f 1")
    assert r.output == "hi /tmp/x\nfn-1\n" and r.exit_code == 0
    assert sh.run("false").exit_code == 1
    sh.run("sleep 300 &")
    jobs = sh.run("jobs")
    assert "sleep 300" in jobs.output
    for _ in range(20):
        sh.run("echo step")  # a terminal session of many commands stays in sync
    assert sh.run("echo done").output == "done\n"


def test_shell_timeout_interrupt_and_interactive_program(sandbox):
    sh = sandbox.shell()
    slow = sh.run("sleep 30; echo never", timeout=1)
    assert slow.timed_out and slow.exit_code is None
    sh.interrupt()
    after = sh.run("echo alive", timeout=10)
    assert after.output.endswith("alive\n") and after.exit_code == 0
    repl = sh.run("python3 -q", timeout=1.5)  # an interactive program: still running, shell not hung
    assert repl.timed_out
    sh.send_keys("print(6 * 7)", enter=True)
    deadline = time.monotonic() + 10
    while "42" not in sh.screen() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "42" in sh.screen()
    sh.send_keys("exit()", enter=True)
    assert sh.run("echo back", timeout=10).output.endswith("back\n")


def test_snapshot_and_restore(sandbox):
    sandbox.write_file("/work/state.txt", "v1")
    snap = sandbox.snapshot()
    sandbox.write_file("/work/state.txt", "v2")
    sandbox.write_file("/work/new.txt", "x")
    sandbox.exec("sleep 300 >/dev/null 2>&1 &")
    sandbox.restore(snap)
    assert sandbox.read_file("/work/state.txt") == b"v1"
    assert sandbox.exec("test -e /work/new.txt").exit_code == 1
    assert "sleep 300" not in sandbox.exec("ps -eo args").stdout  # processes reset too
    assert sandbox.exec("echo ok").stdout == "ok\n"


def test_timeout_kills_the_process_group_and_sandbox_stays_usable(sandbox):
    r = sandbox.exec("sleep 100 & sleep 100; echo unreachable", timeout=1)
    assert r.timed_out and r.exit_code == 137 and "unreachable" not in r.stdout
    assert r.duration_ms < 8000
    time.sleep(0.3)
    assert "sleep 100" not in sandbox.exec("ps -eo args").stdout
    assert sandbox.exec("echo still here").stdout == "still here\n"


def test_output_cap_is_flagged(sandbox):
    r = sandbox.exec("head -c 5000000 /dev/zero | tr '\\0' a; echo; echo tail >&2")
    assert r.output_truncated and len(r.stdout) == sandbox.config.output_cap_bytes
    assert r.exit_code == 0 and r.stderr == "tail\n"


def test_memory_limit(sandbox):
    hog = "python3 -c \"b = bytearray(600 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print('survived')\""
    r = sandbox.exec(hog, timeout=60)
    assert r.exit_code == 137 and "survived" not in r.stdout
    assert sandbox.exec("echo ok").stdout == "ok\n"


def test_pid_limit_stops_a_fork_bomb(sandbox):
    r = sandbox.exec("for i in $(seq 200); do sleep 30 & done 2>&1; wait", timeout=8)
    assert "Resource temporarily unavailable" in r.stdout + r.stderr or "retry: " in r.stdout + r.stderr
    count = int(sandbox.exec("ps -e --no-headers | wc -l").stdout or 0) if sandbox.alive() else 0
    assert count <= sandbox.config.pids


def test_cpu_limit(sandbox):
    script = (
        "import os, time\n"
        "w0, c0 = time.monotonic(), os.times()\n"
        "while time.monotonic() - w0 < 1.5: pass\n"
        "c1 = os.times()\n"
        "print((c1.user + c1.system - c0.user - c0.system) / (time.monotonic() - w0))\n"
    )
    sandbox.write_file("/work/burn.py", script)
    share = float(sandbox.exec("python3 /work/burn.py", timeout=30).stdout)
    assert share < sandbox.config.cpus + 0.15  # cpus=0.5: at most about half a core


def test_no_network_by_default(sandbox):
    probe = (
        'python3 -c "import socket; s = socket.socket(); s.settimeout(2); '
        "s.connect(('1.1.1.1', 53))\" 2>&1; ip -o link 2>/dev/null; cat /proc/net/dev"
    )
    r = sandbox.exec(probe, timeout=20)
    assert "unreachable" in r.stdout.lower() or "timed out" in r.stdout.lower()
    assert "eth0" not in r.stdout


def test_host_environment_does_not_leak(sandbox, monkeypatch):
    monkeypatch.setenv("TRAJFORGE_TEST_SECRET", "sk-do-not-leak")
    r = sandbox.exec("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'")
    assert "sk-do-not-leak" not in r.stdout
    assert "PATH=" in r.stdout


def test_host_file_system_is_not_writable(sandbox, tmp_path):
    marker = tmp_path / f"escape-{uuid.uuid4().hex}"
    r = sandbox.exec(f"touch {marker}; touch /etc/escape-test; echo x > /usr/escape; ls {tmp_path}")
    assert not marker.exists() and not os.path.exists("/usr/escape")
    assert sandbox.exec("touch /work/ok && echo ok").stdout == "ok\n"
    assert r.exit_code != 0 or not os.path.exists("/etc/escape-test")


def test_sandbox_killed_from_outside_raises_promptly(sandbox_factory, kill_from_outside):
    sb = sandbox_factory()
    result: dict = {}

    def long_exec():
        try:
            result["r"] = sb.exec("sleep 60", timeout=120)
        except SandboxError as exc:
            result["error"] = exc

    t0 = time.monotonic()
    th = threading.Thread(target=long_exec)
    th.start()
    time.sleep(1.0)
    kill_from_outside(sb)
    th.join(timeout=20)
    assert not th.is_alive(), "exec hung after the sandbox died"
    assert isinstance(result.get("error"), SandboxDied), result
    assert time.monotonic() - t0 < 20
    with pytest.raises(SandboxError):
        sb.exec("true")
    sb.close()


def test_close_twice_and_use_after_close(sandbox_factory):
    sb = sandbox_factory()
    sb.exec("true")
    sb.close()
    sb.close()
    with pytest.raises(SandboxError, match="closed"):
        sb.exec("true")


def test_bad_config_is_refused():
    from schemas.errors import ConfigError

    for bad in ({"backend": "vm"}, {"memory_mb": 0}, {"cpus": 0}, {"exec_timeout_s": -1}, {"run_id": "a/b"}):
        with pytest.raises(ConfigError):
            SandboxConfig(**bad)


def test_gc_removes_only_sandboxes_of_dead_owners(backend, sandbox_config, orphan_factory):
    from sandboxes.gc import gc

    live = make_sandbox(sandbox_config).start()
    try:
        orphan = orphan_factory()
        report = gc(docker=backend == "docker", local=backend == "local")
        removed = report.containers + report.local
        assert any(orphan in name for name in removed), report.lines()
        assert not any(live.id in name for name in removed)
        assert live.exec("echo alive").stdout == "alive\n"
    finally:
        live.close()


def test_first_exec_right_after_start_always_works(sandbox_config):
    # bwrap reports its pid before its mounts are done; a sandbox is usable once start returns
    for _ in range(10):
        with make_sandbox(sandbox_config).start() as sb:
            assert sb.exec("cat /etc/debian_version").exit_code == 0
