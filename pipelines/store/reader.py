"""Reading a store: the finished shards its manifests list, lifted to the current schema.

Readers see only shards listed in a run manifest, so a writer's ``.partial`` file or a
half-written run is never read. ``Store.dataset`` gives a lazy pyarrow dataset (for
DuckDB, with projection and filter pushdown); shards of older schema versions come as a
migrating batch stream beside it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as pads

from pipelines.store.fs import StoreFS
from pipelines.store.layout import Run, list_runs
from pipelines.store.manifest import ShardEntry
from pipelines.store.shards import open_shard, read_shard
from schemas.arrow import from_record_batch, from_shard
from schemas.errors import ShardError, StoreError
from schemas.transition import Transition
from schemas.versions import current_version, migrate, schema_for, shard_schema_for


@dataclass(frozen=True)
class Shard:
    run: Run
    entry: ShardEntry

    @property
    def path(self) -> str:
        return f"{self.run.dir}/{self.entry.path}"


@dataclass(frozen=True)
class Relation:
    """A lazy source for DuckDB; ``on_disk_layout`` sources need ``shard_view_sql`` on top."""

    source: pads.Dataset | pa.RecordBatchReader
    on_disk_layout: bool


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class Store:
    """A trajforge store at a local path or URI."""

    def __init__(self, uri: str | os.PathLike[str], *, must_exist: bool = True) -> None:
        self.uri = os.fspath(uri)
        self.sfs = StoreFS.open(self.uri)
        if must_exist and not self.sfs.is_dir(self.sfs.root):
            raise StoreError(f"{self.uri}: no such store")

    def runs(self, kind: str = "raw") -> list[Run]:
        return list_runs(self.sfs, kind)

    def shards(self, kind: str = "raw") -> list[Shard]:
        return [Shard(run, entry) for run in self.runs(kind) for entry in run.manifest.shards]

    def readable_shards(self, kind: str = "raw", on_skip: Callable[[str], None] = _warn) -> list[Shard]:
        """Listed shards whose file opens and has its listed size; others are reported and skipped."""
        good = []
        for shard in self.shards(kind):
            try:
                info = self.sfs.info(shard.path)
                if info.type.name == "NotFound":
                    raise ShardError(shard.path, "listed in the manifest but missing")
                if info.size != shard.entry.bytes:
                    raise ShardError(shard.path, f"size {info.size} differs from the manifest's {shard.entry.bytes}")
                open_shard(self.sfs, shard.path)
            except ShardError as exc:
                on_skip(f"skipped {exc}")
                continue
            good.append(shard)
        return good

    def iter_batches(self, kind: str = "raw") -> Iterator[pa.RecordBatch]:
        for shard in self.readable_shards(kind):
            yield from read_shard(self.sfs, shard.path)

    def iter_transitions(self, kind: str = "raw") -> Iterator[Transition]:
        for batch in self.iter_batches(kind):
            yield from from_record_batch(batch)

    def relations(self, kind: str = "raw", *, run_id: str | None = None) -> list[Relation]:
        """Lazy sources covering every readable shard, one per schema version.

        Current-version shards form a pyarrow dataset in the on-disk layout (DuckDB
        pushes projections and filters into it, under a view giving the logical layout);
        each older version is a stream of batches lifted to the current logical schema.
        """
        by_version: dict[int, list[str]] = {}
        for shard in self.readable_shards(kind):
            if run_id is not None and shard.run.run_id != run_id:
                continue
            by_version.setdefault(shard.entry.schema_version, []).append(shard.path)
        cur = current_version()
        sources: list[Relation] = []
        for version, paths in sorted(by_version.items(), reverse=True):
            ds = pads.dataset(paths, schema=shard_schema_for(version), format="ipc", filesystem=self.sfs.fs)
            if version == cur:
                sources.append(Relation(ds, on_disk_layout=True))
            else:
                logical = schema_for(version)
                batches = (migrate(from_shard(b, logical), version) for b in ds.to_batches())
                sources.append(Relation(pa.RecordBatchReader.from_batches(schema_for(cur), batches), False))
        return sources
