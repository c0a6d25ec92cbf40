"""What this machine has already verified of a store's shards, so repeat reads pay a stat.

Readers use a shard only once it is verified: its size, rows, schema version and sha256
match its manifest entry, and every record batch decodes and passes Arrow's full
validation. A query then never meets a corrupt compressed buffer or an offset out of
bounds, whether the file rotted or was made to look consistent with a forged manifest.

That reads the whole file, so the result is remembered in an SQLite file under the local
state folder (``$TRAJFORGE_STATE_DIR``), never inside the store (which may be read-only,
shared or hostile), keyed by the file's identity, stamp (see ``StoreFS.stamp``) and the
sha256 its manifest gives. As in git's index, an entry counts only for a file last changed
well before it was verified (a change within the same clock tick keeps the stamp), and
entries older than ``MAX_AGE_S`` are verified again, which catches rot that no stamp shows.
Without a writable state folder every read verifies.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass

from pipelines.store.fs import StoreFS, state_root

MAX_AGE_S = 30 * 86400
RACY_NS = 2_000_000_000  # a file changed this close to its verification is verified again


@dataclass(frozen=True)
class Stamp:
    """A file as seen before it was read, and the sha256 its manifest gives."""

    identity: str
    stamp: str
    changed_ns: int
    sha256: str


class VerifiedCache:
    """The verified-shard record of this machine; every failure just means "not known"."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.path.join(state_root(), "verified.sqlite3")
        self._con: sqlite3.Connection | None = None
        self._broken = False

    def _db(self) -> sqlite3.Connection | None:
        if self._con is None and not self._broken:
            try:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                con = sqlite3.connect(self.path, timeout=1, check_same_thread=False)
                con.execute("PRAGMA journal_mode=WAL")  # readers never wait for a writer (Beam workers, parallel runs)
                con.execute("CREATE TABLE IF NOT EXISTS verified (identity TEXT PRIMARY KEY, stamp TEXT, sha256 TEXT, at_ns INT)")
                self._con = con
            except (OSError, sqlite3.Error):
                self._broken = True
        return self._con

    @staticmethod
    def stamp(sfs: StoreFS, path: str, sha256: str) -> Stamp | None:
        seen = sfs.stamp(path)
        return Stamp(*seen, sha256) if seen else None

    def known(self, s: Stamp) -> bool:
        """Whether this exact file was verified against this sha256, long enough after its
        last change and recently enough."""
        con = self._db()
        if con is None:
            return False
        try:
            row = con.execute("SELECT stamp, sha256, at_ns FROM verified WHERE identity = ?", (s.identity,)).fetchone()
        except sqlite3.Error:
            return False
        if row is None or (row[0], row[1]) != (s.stamp, s.sha256):
            return False
        at_ns = row[2]
        return s.changed_ns < at_ns - RACY_NS and time.time_ns() - at_ns < MAX_AGE_S * 1_000_000_000

    def remember(self, verified: list[tuple[Stamp, int]]) -> None:
        """Record (stamp taken before reading, time the read began) of files that passed."""
        con = self._db()
        if con is None or not verified:
            return
        with contextlib.suppress(sqlite3.Error):
            with con:
                con.executemany(
                    "INSERT OR REPLACE INTO verified VALUES (?, ?, ?, ?)",
                    [(s.identity, s.stamp, s.sha256, at_ns) for s, at_ns in verified],
                )
                cutoff = time.time_ns() - MAX_AGE_S * 1_000_000_000
                con.execute("DELETE FROM verified WHERE at_ns < ?", (cutoff,))

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
