"""Memory, CPU and process-count limits for a local sandbox through a cgroup.

Supports cgroups v2 (one unified tree, most clusters and desktops) and v1 (separate
``memory``, ``pids`` and ``cpu`` hierarchies, as on this project's machines). Needs root
or a delegated subtree; ``Cgroup.create`` says why when it cannot.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "trajforge"
CPU_PERIOD_US = 100_000


def is_v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


class Cgroup:
    """One sandbox's cgroup (or one per v1 controller)."""

    def __init__(self, name: str, *, memory_bytes: int, pids: int, cpus: float) -> None:
        self.name = name
        self.limits = {"memory": memory_bytes, "pids": pids, "cpu": cpus}
        self.v2 = is_v2()
        self.dirs: list[Path] = []

    def create(self) -> None:
        """Make the group and set its limits; OSError says what was refused."""
        if self.v2:
            parent = ROOT / PARENT
            parent.mkdir(exist_ok=True)
            for level in (ROOT, parent):  # delegate the controllers down to our groups
                (level / "cgroup.subtree_control").write_text("+memory +pids +cpu")
            d = parent / self.name
            d.mkdir(exist_ok=True)
            self.dirs = [d]
            (d / "memory.max").write_text(str(self.limits["memory"]))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(self.limits["pids"]))
            (d / "cpu.max").write_text(f"{int(self.limits['cpu'] * CPU_PERIOD_US)} {CPU_PERIOD_US}")
            return
        mem, pids, cpu = (ROOT / c / PARENT / self.name for c in ("memory", "pids", "cpu"))
        for d in (mem, pids, cpu):
            d.mkdir(parents=True, exist_ok=True)
            self.dirs.append(d)
        (mem / "memory.limit_in_bytes").write_text(str(self.limits["memory"]))
        if (mem / "memory.memsw.limit_in_bytes").exists():
            (mem / "memory.memsw.limit_in_bytes").write_text(str(self.limits["memory"]))
        (pids / "pids.max").write_text(str(self.limits["pids"]))
        (cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
        (cpu / "cpu.cfs_quota_us").write_text(str(int(self.limits["cpu"] * CPU_PERIOD_US)))

    def join_argv(self) -> list[str]:
        """A prefix for a command's argv that moves it into this group before it runs: a
        shell writes its own pid into the group, then becomes the command (``exec``), so
        whatever the command starts is inside too, and a command that cannot join (the
        group's process limit reached, the group gone) never runs: exit 125, one line on
        stderr. With it the parent spawns without ``preexec_fn``, which makes CPython fork
        the whole parent (its page tables: about 30 ms of CPU an exec for a 500 MB
        collector) instead of a vfork."""
        joins = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs)
        fail = '{ echo "trajforge: cannot join the sandbox\'s cgroup" >&2; exit 125; }'
        return ["/bin/sh", "-c", f'{{ {joins}; }} 2>/dev/null || {fail}; exec "$@"', "sh"] if self.dirs else []

    def pids(self) -> list[int]:
        if not self.dirs:
            return []
        try:
            return [int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_killed(self) -> int:
        """How many processes the memory limit killed so far."""
        for d in self.dirs:
            events = d / "memory.events"
            if events.exists():
                for line in events.read_text().splitlines():
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
            oom = d / "memory.oom_control"
            if oom.exists():
                for line in oom.read_text().splitlines():
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        return 0

    def destroy(self) -> None:
        """Kill whatever still runs in the group and remove it. New forks are refused first
        (``pids.max`` 0), so a fork bomb cannot outrun the kill loop."""
        for d in self.dirs:
            with contextlib.suppress(OSError):
                (d / "pids.max").write_text("0")
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        self.dirs = []


def sweep(names_alive: set[str]) -> list[str]:
    """Remove trajforge cgroups whose sandbox is gone; returns the names removed."""
    removed = []
    bases = [ROOT / PARENT] if is_v2() else [ROOT / c / PARENT for c in ("memory", "pids", "cpu")]
    seen: set[str] = set()
    for base in bases:
        if base.is_dir():
            seen.update(p.name for p in base.iterdir() if p.is_dir())
    for name in sorted(seen - names_alive):
        cg = Cgroup(name, memory_bytes=0, pids=0, cpus=1)
        cg.dirs = [b / name for b in bases if (b / name).is_dir()]
        cg.destroy()
        removed.append(name)
    return removed
