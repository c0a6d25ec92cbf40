"""How a local sandbox's commands join its cgroup: a shell prefix writes its pid into every
group of the sandbox and becomes the command, so the host spawns without ``preexec_fn`` (a
vfork, not a fork of the whole collector). The groups here are plain folders, so no root is
needed; the conformance suite checks the limits themselves on real groups."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandboxes.cgroups import Cgroup


def _group(dirs: list[Path]) -> Cgroup:
    c = Cgroup("t", memory_bytes=1 << 30, pids=64, cpus=1.0)
    c.dirs = dirs
    return c


def test_the_command_is_the_process_that_joined_every_group(tmp_path):
    dirs = [tmp_path / "memory", tmp_path / "pids", tmp_path / "cpu"]  # cgroups v1: one per controller
    for d in dirs:
        d.mkdir()
        (d / "cgroup.procs").write_text("")
    out = subprocess.run([*_group(dirs).join_argv(), "sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    pid = out.stdout.strip()
    assert pid.isdigit() and all((d / "cgroup.procs").read_text().strip() == pid for d in dirs)


def test_a_command_that_cannot_join_never_runs(tmp_path):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "cgroup.procs").write_text("")
    marker = tmp_path / "ran"
    argv = _group([tmp_path / "ok", tmp_path / "gone"]).join_argv()  # the second group was removed
    r = subprocess.run([*argv, "touch", str(marker)], capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (125, "trajforge: cannot join the sandbox's cgroup\n") and not marker.exists()


def test_no_group_no_prefix():
    assert _group([]).join_argv() == []
