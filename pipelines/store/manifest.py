"""The run manifest: the list of finished shards of one (domain, run) folder.

A shard exists for readers only once its manifest entry does. The manifest is rewritten
atomically after each shard is finalised, so it is always a consistent, complete list.

A manifest is input like any other file: it is read only from inside its run folder, and
its shape is checked completely before anything it lists is used. An entry names a shard
by its plain file name (``part-NNNNN.arrow``), so no entry can point outside the folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipelines.store.fs import StoreFS
from pipelines.store.layout import LOCK, MANIFEST, Layout, is_part_name
from schemas.config import validation_message
from schemas.errors import StoreError

MANIFEST_FORMAT = "trajforge.run-manifest/1"
MAX_MANIFEST_BYTES = 64 << 20  # ~200,000 shard entries; a bigger file is not one we wrote
_COUNT = Field(ge=0, le=2**63 - 1)

__all__ = ["LOCK", "MANIFEST", "MANIFEST_FORMAT", "MAX_MANIFEST_BYTES", "RunManifest", "ShardEntry"]


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
        sfs.write_bytes_atomic(Layout.manifest(run_dir), self.to_json())

    @classmethod
    def load(cls, sfs: StoreFS, run_dir: str) -> RunManifest | None:
        """The manifest of a run folder, None if it has none; StoreError naming it if it
        lies outside the folder, is not a regular file, is not JSON or has the wrong shape."""
        path = sfs.confine(run_dir, MANIFEST)
        info = sfs.info(path)
        if info.type.name == "NotFound":
            return None
        if info.type.name != "File":
            raise StoreError(f"{sfs.uri(path)}: refused run manifest (not a regular file)")
        if info.size > MAX_MANIFEST_BYTES:
            raise StoreError(f"{sfs.uri(path)}: refused run manifest ({info.size} bytes, over {MAX_MANIFEST_BYTES})")
        try:
            body = _ManifestBody.model_validate_json(sfs.read_bytes(path))
        except OSError as exc:
            raise StoreError(f"{sfs.uri(path)}: unreadable run manifest ({exc})") from None
        except ValidationError as exc:
            what = "unreadable" if exc.errors()[0]["type"] == "json_invalid" else "refused"
            raise StoreError(f"{sfs.uri(path)}: {what} run manifest ({validation_message(exc)})") from None
        shards = [ShardEntry(**e.model_dump()) for e in body.shards]
        fields = body.model_dump(exclude={"format", "shards", "rows", "bytes"})
        return cls(**fields, shards=shards)


class _EntryBody(BaseModel):
    """One shard entry as stored: every field present, of its type, nothing else."""

    model_config = ConfigDict(extra="forbid", strict=True)
    path: str
    rows: int = _COUNT
    bytes: int = _COUNT
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    schema_version: int = Field(ge=1, le=1_000_000)
    min_collected_at: str | None
    max_collected_at: str | None

    @field_validator("path")
    @classmethod
    def _plain_shard_name(cls, path: str) -> str:
        if not is_part_name(path):
            raise ValueError(f"{path[:200]!r} is not a shard file name (part-NNNNN.arrow inside the run folder)")
        return path


class _ManifestBody(BaseModel):
    """A run manifest as stored (see ``RunManifest.to_json``), checked whole before use."""

    model_config = ConfigDict(extra="forbid", strict=True)
    format: Literal["trajforge.run-manifest/1"]
    domain: str
    run_id: str
    kind: Literal["raw", "curated", "rejected"] = "raw"
    shards: list[_EntryBody]
    created_at: str
    updated_at: str = ""
    closed: bool = False
    rows: int | None = Field(None, ge=0)  # totals (written for readers' convenience): must add up
    bytes: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> _ManifestBody:
        names = [e.path for e in self.shards]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"shard {dup} is listed twice")
        for total in ("rows", "bytes"):
            value, listed = getattr(self, total), sum(getattr(e, total) for e in self.shards)
            if value is not None and value != listed:
                raise ValueError(f"{total} is {value}, its shards add up to {listed}")
        return self
