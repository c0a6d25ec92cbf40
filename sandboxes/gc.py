"""Remove what dead runs left behind: containers, snapshot images, work folders, cgroups.

A sandbox belongs to the process that made it (the ``trajforge.owner`` label of a
container, ``owner.json`` in the host folder of a sandbox's disk). Once that process is gone from this host,
its sandboxes are garbage. Sandboxes of live processes are never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class GcReport:
    containers: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)
    disks: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return (
            [f"removed container {c}" for c in self.containers]
            + [f"removed snapshot image {i}" for i in self.images]
            + [f"removed local sandbox {d}" for d in self.local]
            + [f"removed disk of container sandbox {d}" for d in self.disks]
            + [f"removed cgroup {g}" for g in self.cgroups]
            + self.skipped
        )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_gone(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid))


def sweep_dirs(base: Path, removed: list[str]) -> set[str]:
    """Remove the sandbox folders under ``base`` whose owner process is gone (their disk
    unmounted first: rmtree through a live mount would only empty it); returns the live ones."""
    from sandboxes.disk import OWNER, unmount_all_under

    alive = set()
    for d in sorted(base.iterdir()):
        try:
            pid = json.loads((d / OWNER).read_text())["pid"]
        except (OSError, ValueError, KeyError):
            pid = None
        if pid is not None and _pid_alive(pid):
            alive.add(d.name)
            continue
        unmount_all_under(d)
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d.name)
    return alive


def gc_local(report: GcReport) -> None:
    from sandboxes import cgroups
    from sandboxes.local import sandboxes_dir

    alive = sweep_dirs(sandboxes_dir(), report.local)
    try:
        report.cgroups.extend(cgroups.sweep(alive))
    except OSError as exc:
        report.skipped.append(f"cgroups not swept: {exc}")


def gc_docker(report: GcReport, host: str | None = None) -> None:
    from sandboxes.docker import LABEL_OWNER, LABEL_SANDBOX, SNAPSHOT_REPO, sandboxes_dir
    from sandboxes.engine import client, find_engine

    try:
        engine = client(find_engine(host))
    except Exception as exc:
        report.skipped.append(f"docker: skipped ({str(exc).splitlines()[0]})")
        return
    live_sandboxes = set()
    for c in engine.containers.list(all=True, filters={"label": LABEL_SANDBOX}):
        owner = c.labels.get(LABEL_OWNER, "")
        if _owner_gone(owner):
            c.remove(force=True)
            report.containers.append(c.name)
        else:
            live_sandboxes.add(c.labels.get(LABEL_SANDBOX))
    for image in engine.images.list(name=SNAPSHOT_REPO):
        if (image.labels or {}).get(LABEL_SANDBOX) not in live_sandboxes:
            engine.images.remove(image.id, force=True)
            report.images.append(image.short_id)
    sweep_dirs(sandboxes_dir(), report.disks)  # after their containers: a disk in use stays mounted


def gc(*, docker: bool = True, local: bool = True, host: str | None = None) -> GcReport:
    report = GcReport()
    if local:
        gc_local(report)
    if docker:
        gc_docker(report, host)
    return report
