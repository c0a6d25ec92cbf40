"""A collection job's ledger: one JSON line per episode attempted, the audit trail of runs.

On a local store the lines are appended to ``jobs/<job>/ledger.jsonl`` as they come. An
object store cannot append, so a run's lines are staged in the store's local state folder
(``jobs/<job>/ledger/<run>.jsonl`` there, locked while the run writes it) and uploaded as
one object when the run ends; a run killed before that leaves its staged file, which the
job's next run on this machine uploads (any file no live process holds)::

    with Ledger(sfs, store.layout.job_dir(job_id), run_id) as ledger:
        ledger.write({"episode": "t#0", "status": "done"})
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import IO, Any

from pipelines.store.fs import StoreFS
from pipelines.store.layout import LEDGER, LEDGERS

SUFFIX = ".jsonl"


def _upload_staged(sfs: StoreFS, job_dir: str, skip: str | None = None) -> None:
    """Upload the staged ledgers of ended runs (their lock is free), then remove them."""
    folder = sfs.local_path(f"{job_dir}/{LEDGERS}")
    if not os.path.isdir(folder):
        return
    for name in sorted(os.listdir(folder)):
        if not name.endswith(SUFFIX) or name == skip:
            continue
        path = os.path.join(folder, name)
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:  # gone: another run uploaded it
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live run is still writing it
            if os.path.exists(path):
                sfs.publish(path, f"{job_dir}/{LEDGERS}/{name}")
                os.unlink(path)


class Ledger:
    """Append-only JSON lines of one run of a job (see the module docstring)."""

    def __init__(self, sfs: StoreFS, job_dir: str, run_id: str) -> None:
        self.sfs, self.job_dir, self.run_id = sfs, job_dir, run_id
        if sfs.local:
            self.path = f"{job_dir}/{LEDGER}"
        else:
            _upload_staged(sfs, job_dir)
            self.path = sfs.local_path(f"{job_dir}/{LEDGERS}/{run_id}{SUFFIX}")
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._file: IO[str] | None = open(self.path, "a")  # noqa: SIM115 (closed in close)
        if not sfs.local:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)

    def write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close; on an object store upload this run's lines. Idempotent."""
        if self._file is None:
            return
        self._file.close()  # releases the lock
        self._file = None
        if not self.sfs.local:
            _upload_staged(self.sfs, self.job_dir)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
