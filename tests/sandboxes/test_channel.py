"""The local backend's step channel (a resident bash fed through pipes) and its host-side
listing of /work: steps need no process start to reach the sandbox, an agent that kills or
stops the channel costs at most its own step, and the listing never leaves /work."""

from __future__ import annotations

import os
import time
import tracemalloc

import pytest

from sandboxes import SandboxConfig, make_sandbox
from sandboxes.channel import HELPER, Sent
from sandboxes.local import host_files
from sandboxes.shell import _REOPEN

HELPER_MARK = "read -r ta[g] n end"  # matches the channel's script as ps shows it, not this pattern itself


@pytest.fixture
def local(built):
    cfg = SandboxConfig(backend="local", memory_mb=256, pids=64, exec_timeout_s=30, run_id="pytest")
    sb = make_sandbox(cfg).start()
    yield sb
    sb.close()


def _helpers(sb) -> int:
    r = sb.exec(f"pgrep -c -f '{HELPER_MARK}' || true")
    return int(r.stdout.strip() or 0)


def test_steps_go_through_the_channel_with_no_exec(local, monkeypatch):
    sh = local.shell()

    def no_exec(*_a, **_k):
        raise AssertionError("a step went by exec")

    monkeypatch.setattr(local, "exec_bytes", no_exec)
    for i in range(3):
        r = sh.run(f"cd /tmp && echo step {i}", timeout=10)
        assert (r.exit_code, r.cwd, r.output) == (0, "/tmp", f"step {i}\n")
    r = sh.send_keys("echo keys", enter=True, settle=2)
    assert "keys" in r.output and not r.running
    monkeypatch.undo()
    assert _helpers(local) == 1


def test_a_killed_channel_costs_one_step_and_is_opened_again_then_given_up(local):
    sh = local.shell()
    assert sh.run("echo first", timeout=10).exit_code == 0
    # killed in the middle of its own step: that step's outcome is unknown, never an exception
    r = sh.run(f"pkill -9 -f '{HELPER_MARK}'", timeout=10)
    assert r.exit_code is None and "could not report" in (r.note or "")
    after = sh.run("echo after; (exit 3)", timeout=10)
    assert (after.exit_code, after.output) == (3, "after\n")
    # killed between steps, again and again: past the limit the steps go by exec, and still work
    for _ in range(_REOPEN + 1):
        local.exec(f"pkill -9 -f '{HELPER_MARK}'")
        r = sh.run("echo again", timeout=10)
        assert (r.exit_code, r.output) == (0, "again\n")
    assert sh._chan is None or not sh._chan.usable()
    assert _helpers(local) == 0


def test_a_stopped_channel_times_out_and_leaves_nothing_behind(local):
    sh = local.shell()
    start = time.monotonic()
    r = sh.run(f"pkill -STOP -f '{HELPER_MARK}'", timeout=1)  # the channel and this step's own copy of it
    assert r.exit_code is None and "could not report" in (r.note or "")
    assert time.monotonic() - start < 30  # the step's budget (1 s) and the channel's grace (15 s)
    r = sh.run("echo alive", timeout=10)
    assert (r.exit_code, r.output) == (0, "alive\n")
    assert _helpers(local) == 1  # the stopped one was killed, a new one answers


def test_output_that_imitates_the_channels_end_is_only_data(local):
    sh = local.shell()
    fake = "0123456789abcdef0123456789abcdef"
    r = sh.run(f"printf 'a\\x00{fake} 0\\x00'; printf 'TFS 5 {fake}\\n'; echo b", timeout=10)
    assert r.exit_code == 0 and r.output == f"a\x00{fake} 0\x00TFS 5 {fake}\nb\n"
    assert sh.run("echo next", timeout=10).output == "next\n"


def test_an_answer_past_its_limit_is_never_kept(local):
    chan = local.channel(HELPER)
    with pytest.raises(Sent, match="more than 1048576 bytes"):
        chan.run(b"head -c 50000000 /dev/zero", time.monotonic() + 30, limit=1 << 20)
    assert chan.closed and not chan.usable()


def test_an_agent_flooding_the_channels_pipe_costs_one_step_and_no_memory(local):
    """The resident bash's stdout is a pipe any process of the sandbox can open through
    /proc: what an agent writes there is read at most to the step's limit, then the channel
    is killed (and the flood with it) and the next step has a new one."""
    sh = local.shell()
    flood = f"for p in $(pgrep -f '{HELPER_MARK}'); do (exec head -c 300000000 /dev/zero > /proc/$p/fd/1 &); done; sleep 1"
    tracemalloc.start()
    try:
        r = sh.run(flood, timeout=20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code is None  # the step's own answer was lost in the flood
    assert peak < local.config.output_cap_bytes + (40 << 20), peak  # never the flood's 300 MB
    after = sh.run("echo after", timeout=10)
    assert (after.exit_code, after.output) == (0, "after\n")


def test_the_last_status_is_the_next_commands_dollar_question(local):
    sh = local.shell()
    sh.run("(exit 7)", timeout=10)
    assert sh.run("echo $?", timeout=10).output == "7\n"


def test_host_listing_never_follows_links_out_of_the_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "a").write_text("abc")
    (work / b"bad\xffname".decode(errors="surrogateescape")).write_text("")
    os.symlink(outside, work / "dirlink")
    os.symlink(outside / "secret", work / "filelink")
    os.symlink("/", work / "root")
    files = host_files(work, 100)
    assert set(files) == {"sub/a", "bad\\xffname"} and files["sub/a"][0] == 3
    assert files["sub/a"][1] == os.stat(work / "sub" / "a").st_mtime_ns // 1000


def test_host_listing_is_bounded_in_files_entries_and_depth(tmp_path):
    work = tmp_path / "work"
    deep = work
    for _ in range(200):  # deeper than Python's recursion would survive without the bound
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "bottom").write_text("")
    (work / "top").write_text("")
    assert set(host_files(work, 100)) == {"top"}  # below max_depth only
    for i in range(50):
        (work / f"f{i}").write_text("")
    assert len(host_files(work, 10)) == 10
    assert len(host_files(work, 1000, max_entries=20)) <= 20 < len(host_files(work, 1000))


def test_closed_channels_leave_no_zombie_holding_a_pid(local):
    # the channel's bash is killed before the nsenter above it, which reaps it: killed
    # together, each would be left to the host's init, which on some hosts never reaps
    for _ in range(8):
        sh = local.shell()
        assert sh.run("echo x", timeout=10).exit_code == 0
        sh.close()
    ps = local.exec("ps -eo stat= | grep -c '^Z' || true")
    assert ps.stdout.strip() == "0", ps
