"""Publishing a finished folder into a store: its files first, then the manifest as the commit.

Run folders (a Beam unit's run, a curation's outputs) and releases are built whole in a
local folder and then put in place with ``publish_tree``. Readers see a folder only once
its manifest is there, so a kill at any moment leaves either no visible tree or all of it:

- on a local store the folder is renamed into place, one atomic step (refused when the
  place already holds another folder); if the local folder is on another device, the
  files are moved one by one and the manifest last, as on an object store;
- on an object store every file is uploaded as one object, the manifest last; the local
  folder stays until that commit, so a kill before it loses nothing.

    won = publish_tree(store.sfs, "/tmp/stage/raw/web/u0", store.layout.run_dir("raw", "web", "u0"))
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from pipelines.store.fs import StoreFS
from pipelines.store.layout import LOCK, MANIFEST


def publish_tree(
    sfs: StoreFS, local_dir: str | os.PathLike[str], dest: str, *, manifest: str = MANIFEST, clear: bool = False
) -> bool:
    """Make the finished local folder ``local_dir`` the store's folder ``dest``, its file
    ``manifest`` last (see the module docstring); the local folder is gone afterwards.

    Returns False, publishing nothing, when ``dest`` already holds a published tree (a
    folder with files on a local store, its manifest on an object store): an earlier
    attempt won. ``clear`` first removes what a publish killed before its commit left at
    ``dest`` on an object store (for a caller that is the only writer of ``dest``)."""
    local_dir = Path(local_dir)
    if not (local_dir / manifest).is_file():
        raise FileNotFoundError(f"{local_dir}: no {manifest} to commit the tree with")
    if sfs.local:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            os.rename(local_dir, dest)  # atomic; refused when an earlier attempt's folder is there
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            if exc.errno != errno.EXDEV:
                raise
        else:
            sfs.fsync_dir(os.path.dirname(dest))
            return True
    if sfs.exists(f"{dest}/{manifest}"):
        return False
    if clear and not sfs.local:
        sfs.rmtree(dest)
    files = sorted(p for p in local_dir.rglob("*") if p.is_file() and p.name != LOCK and p != local_dir / manifest)
    sfs.makedirs(dest)
    for path in [*files, local_dir / manifest]:  # the manifest last: it is what makes the tree visible
        target = f"{dest}/{path.relative_to(local_dir).as_posix()}"
        sfs.makedirs(os.path.dirname(target))
        sfs.publish(str(path), target)
    shutil.rmtree(local_dir, ignore_errors=True)
    return True


__all__ = ["publish_tree"]
