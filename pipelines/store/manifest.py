"""The run manifest: the list of finished shards of one (domain, run) folder.

A shard exists for readers only once its manifest entry does. The manifest is rewritten
atomically after each shard is finalised, so it is always a consistent, complete list.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from pipelines.store.fs import StoreFS
from schemas.errors import StoreError

MANIFEST = "manifest.json"
LOCK = ".lock"
MANIFEST_FORMAT = "trajforge.run-manifest/1"


@dataclass(frozen=True)
class ShardEntry:
    path: str  # file name inside the run folder
    rows: int
    bytes: int
    sha256: str
    schema_version: int
    min_collected_at: str | None
    max_collected_at: str | None


@dataclass
class RunManifest:
    domain: str
    run_id: str
    kind: str = "raw"
    shards: list[ShardEntry] = field(default_factory=list)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    updated_at: str = ""
    closed: bool = False

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def entry(self, name: str) -> ShardEntry | None:
        return next((s for s in self.shards if s.path == name), None)

    def to_json(self) -> bytes:
        body = {"format": MANIFEST_FORMAT, **asdict(self), "rows": self.rows, "bytes": self.bytes}
        return (json.dumps(body, indent=1) + "\n").encode()

    def save(self, sfs: StoreFS, run_dir: str) -> None:
        if self.kind == "raw":
            self.updated_at = datetime.now(UTC).isoformat()
        else:  # curation outputs are byte-identical for the same input and config
            self.created_at = self.updated_at = ""
        sfs.write_bytes_atomic(f"{run_dir}/{MANIFEST}", self.to_json())

    @classmethod
    def load(cls, sfs: StoreFS, run_dir: str) -> RunManifest | None:
        """The manifest of a run folder, None if it has none; StoreError if unreadable."""
        path = f"{run_dir}/{MANIFEST}"
        if not sfs.exists(path):
            return None
        try:
            body = json.loads(sfs.read_bytes(path))
            if body.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format is {body.get('format')!r}, expected {MANIFEST_FORMAT!r}")
            shards = [ShardEntry(**s) for s in body["shards"]]
            return cls(
                domain=body["domain"],
                run_id=body["run_id"],
                kind=body.get("kind", "raw"),
                shards=shards,
                created_at=body["created_at"],
                updated_at=body.get("updated_at", ""),
                closed=bool(body.get("closed", False)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{path}: unreadable run manifest ({type(exc).__name__}: {exc})") from None
