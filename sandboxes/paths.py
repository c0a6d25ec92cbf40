"""Where sandboxes keep things on the host.

- cache (``TRAJFORGE_CACHE``, default ``~/.cache/trajforge``): built Debian roots, reused
  between runs on one machine and rebuilt when missing;
- state (``TRAJFORGE_STATE``, default ``/var/tmp/trajforge``, else under the cache): the
  work folders and snapshots of live local sandboxes, swept by ``trajforge sandboxes gc``;
- the Podman socket (``TRAJFORGE_PODMAN_SOCK``, default ``/run/trajforge/podman.sock``).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    base = os.environ.get("TRAJFORGE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trajforge"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def state_dir() -> Path:
    base = os.environ.get("TRAJFORGE_STATE")
    path = Path(base) if base else Path("/var/tmp/trajforge")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        path = cache_dir() / "state"
        path.mkdir(parents=True, exist_ok=True)
    return path


def sandboxes_state(backend: str) -> Path:
    """The host folder of one backend's live sandboxes (work disks, snapshots, owner.json),
    private to this user: snapshots are copies of agent-made files (set-id bits kept)."""
    d = state_dir() / backend
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    return d


def podman_socket() -> Path:
    return Path(os.environ.get("TRAJFORGE_PODMAN_SOCK", "/run/trajforge/podman.sock"))
