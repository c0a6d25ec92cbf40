"""Finding and killing what one ``exec`` left running, from the host.

Every exec carries a mark (``TRAJFORGE_EXEC=<id>``) in the environment it starts with; its
bash unsets it at once, so programs it runs never see it, but bash's own forks (subshells,
functions, a fork bomb's copies) keep it in ``/proc/<pid>/environ``. When an exec overruns
its deadline, every process of the sandbox in its session or bearing its mark is killed,
including those that left the exec's process group or outlived its leader, where
``timeout`` cannot reach. An exec that ends in time leaves its background programs (a
server) running, as between calls; so does a program that made its own session (a daemon).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable

EXEC_MARK = "TRAJFORGE_EXEC"


def pids_in_namespace_of(init_pid: int) -> list[int]:
    """Host pids of every process in the PID namespace of ``init_pid`` (a sandbox's init):
    read from its cgroup when the sandbox has one of its own, else by a scan of /proc."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return []
    members = _cgroup_members(init_pid)
    if members is not None:
        return [pid for pid in members if _in_namespace(pid, ns)]
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/pid") == ns:
                    found.append(int(entry.name))
    return found


def session_of(pid: int) -> int | None:
    """The session id of a process (in the host's numbering), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b") ", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _in_namespace(pid: int, ns: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == ns
    except OSError:
        return False


def _cgroup_members(pid: int) -> list[int] | None:
    """Pids in the same pids cgroup as ``pid`` (v1 or v2), None when that is not readable or
    is the host's own root group."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if path in ("", "/"):
            continue
        if "pids" in controllers.split(","):
            procs = f"/sys/fs/cgroup/pids{path}/cgroup.procs"
        elif controllers == "" and not any(":pids:" in x for x in lines):
            procs = f"/sys/fs/cgroup{path}/cgroup.procs"
        else:
            continue
        try:
            with open(procs) as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return None
    return None


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid`` (host pids); empty when it has none or is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def kill_entered(proc: subprocess.Popen, *, wait: float = 1.0) -> None:
    """SIGKILL a process started through ``nsenter`` (``proc``), child first: nsenter then
    reaps it and exits, and its group goes last. Killed together, the child can outlive
    its parent as a zombie that only the host's init may reap; where init does not (some
    VMs' agents), each one holds a pid of the sandbox's cgroup for good."""
    children = children_of(proc.pid)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=wait if children else 0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _session_and_mark(pid: int, token: bytes) -> tuple[int | None, bool]:
    sid = session_of(pid)
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return sid, token in f.read().split(b"\0")
    except OSError:
        return sid, False


def kill_exec(list_pids: Callable[[], Iterable[int]], mark: str, sessions: Iterable[int] = (), *, rounds: int = 100) -> int:
    """SIGKILL every listed process that bears ``mark`` or belongs to one of ``sessions``,
    or to the session of a marked one; again until none is left (copies forked between
    two passes are caught by the next). Returns how many were killed."""
    token = f"{EXEC_MARK}={mark}".encode()
    sessions = set(sessions)
    killed = 0
    for _ in range(rounds):
        found = {pid: _session_and_mark(pid, token) for pid in list_pids()}
        sessions |= {sid for sid, marked in found.values() if marked and sid}
        hits = [pid for pid, (sid, marked) in found.items() if marked or sid in sessions]
        if not hits:
            break
        for pid in hits:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.01)
    return killed


def holding_output(list_pids: Callable[[], Iterable[int]], mark: str) -> list[int]:
    """Processes bearing ``mark`` whose stdout or stderr is a pipe: copies that may still
    write to the exec's output, which an engine stops reading when the exec's leader ends."""
    token = f"{EXEC_MARK}={mark}".encode()
    found = []
    for pid in list_pids():
        if _session_and_mark(pid, token)[1]:
            with contextlib.suppress(OSError):
                if any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:") for fd in (1, 2)):
                    found.append(pid)
    return found


#: The same sweep run inside a sandbox whose processes the host cannot see (a remote engine).
KILL_EXEC_SCRIPT = (
    "for i in 1 2 3 4 5 6 7 8 9 10; do n=0; for e in /proc/[0-9]*/environ; do p=${e#/proc/}; p=${p%/environ}; "
    'if tr "\\0" "\\n" < "$e" 2>/dev/null | grep -qx "$1"; then s=$(cut -d" " -f6 "/proc/$p/stat" 2>/dev/null); '
    'kill -9 "$p" 2>/dev/null && n=$((n+1)); [ -n "$s" ] && pkill -9 -s "$s"; fi; done; [ $n = 0 ] && break; done'
)
