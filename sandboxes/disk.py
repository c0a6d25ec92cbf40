"""A sandbox's disk quota: a size-limited file system for everything the sandbox may write.

Each sandbox gets a sparse image file of ``disk_mb`` formatted as ext4 and loop-mounted on
the host; its ``work`` and ``tmp`` folders are what the sandbox sees as ``/work`` and
``/tmp`` (``/var/tmp`` too in containers). A sandbox that fills it gets ENOSPC ("No space
left on device") like on any full disk, and the host loses at most ``disk_mb`` of space.
The file system is its own device, so the sandbox's mount table names ``/dev/loopN``,
not a host folder. Needs root (``mount -o loop``); ``Disk.create`` says why when it cannot.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

OWNER = "owner.json"  # who made the sandbox: ``trajforge sandboxes gc`` frees it once that process is gone
IMAGE = "disk.img"
MOUNT = "disk"
#: Folders of the file system, and the modes the sandbox sees on them.
FOLDERS = {"work": 0o755, "tmp": 0o1777, "var-tmp": 0o1777}


def claim(directory: Path, run_id: str) -> None:
    """Make a sandbox's host folder, owned by this process."""
    directory.mkdir(parents=True)
    (directory / OWNER).write_text(json.dumps({"pid": os.getpid(), "run_id": run_id}))


class Disk:
    """One sandbox's file system: ``<dir>/disk.img`` mounted on ``<dir>/disk``."""

    def __init__(self, directory: Path, size_mb: int, extra: tuple[str, ...] = ()) -> None:
        self.image = directory / IMAGE
        self.mount = directory / MOUNT
        self.size_mb = size_mb
        self.mounted = False
        self.extra = extra  # more folders kept like ``work`` (a sandbox's other writable paths)

    def folder(self, name: str) -> Path:
        return self.mount / name

    def create(self) -> None:
        """Make, format and mount the image; OSError says what was refused."""
        if os.geteuid() != 0:
            raise PermissionError(1, "mounting a disk image needs root")
        for tool in ("mkfs.ext4", "mount", "umount"):
            if shutil.which(tool) is None:
                raise FileNotFoundError(2, f"{tool} is not installed")
        self.mount.mkdir(parents=True, exist_ok=True)
        make_ext4(self.image, self.size_mb)
        mount_image(self.image, self.mount)
        self.mounted = True
        for name, mode in {**FOLDERS, **dict.fromkeys(self.extra, 0o755)}.items():
            self.folder(name).mkdir()
            os.chmod(self.folder(name), mode)
        shutil.rmtree(self.mount / "lost+found", ignore_errors=True)

    def save(self, dest: Path) -> None:
        """Copy ``work`` (and the extra folders, beside it as ``<dest>.<name>``) to host
        folders (a snapshot; the sandbox must be stopped or idle)."""
        subprocess.run(["cp", "-a", "--reflink=auto", str(self.folder("work")), str(dest)], check=True)
        for name in self.extra:
            subprocess.run(["cp", "-a", "--reflink=auto", str(self.folder(name)), f"{dest}.{name}"], check=True)

    def load(self, source: Path) -> None:
        """Back to a saved ``work`` and extra folders, with every other folder empty, as on a fresh disk."""
        for name in (*FOLDERS, *self.extra):
            for child in self.folder(name).iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        subprocess.run(["cp", "-a", "--reflink=auto", f"{source}/.", str(self.folder("work"))], check=True)
        for name in self.extra:
            subprocess.run(["cp", "-a", "--reflink=auto", f"{source}.{name}/.", str(self.folder(name))], check=True)

    def destroy(self) -> None:
        """Unmount (lazily if something still holds it) and delete the image."""
        if self.mount.exists():
            unmount_all_under(self.mount.parent)
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()
        self.mounted = False


def make_ext4(image: Path, size_mb: int, *, content: Path | None = None) -> None:
    """A sparse image file holding an ext4 file system (the host spends only what is
    written), with no journal and no reserved blocks: a scratch disk, all of it usable."""
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    _run(
        ["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "nodiscard"]
        + (["-d", str(content)] if content else [])
        + [str(image)]
    )


def mount_image(image: Path, point: Path, *, read_only: bool = False) -> None:
    """Loop-mount an image (the loop device goes away with the mount)."""
    options = "loop,ro,nodev" if read_only else "loop,discard,nosuid,nodev"
    _run(["mount", "-o", options, str(image), str(point)])


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(proc.returncode, f"{argv[0]} failed: {(proc.stderr or proc.stdout).strip()[:200]}")


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory`` in this mount namespace, deepest first."""
    prefix = str(directory).rstrip("/") + "/"
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix) or point == prefix[:-1]:
                found.append(point)
    return sorted(set(found), key=len, reverse=True)


def unmount_all_under(directory: Path) -> None:
    """Detach every mount below a sandbox folder, so the folder can be removed safely
    (``rmtree`` over a live mount would only empty it). The loop device goes with it."""
    for point in mounts_under(directory):
        subprocess.run(["umount", "-l", point], capture_output=True)
