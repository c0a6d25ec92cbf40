"""The store handle, ``Store``: a store opened once, at the edge, and passed down.

A ``Store`` owns its file system (``store.sfs``, a ``StoreFS``), its layout (``store.layout``:
every path of every tree, see ``pipelines.store.layout``) and its locks (``store.lock``);
code below the command line takes the handle, not a path string::

    store = Store.open("s3://bucket/store")      # Store.open(store) returns the same handle
    store.trajectory_ids(job_id="nightly")       # what a job already collected
    with store.lock(store.layout.job_lock("nightly")):
        ...

Reading a store: the verified shards its manifests list, lifted to the current schema.

Readers see only shards listed in a run manifest, so a writer's ``.partial`` file or a
half-written run is never read. ``Store.dataset`` gives a lazy pyarrow dataset (for
DuckDB, with projection and filter pushdown); shards of older schema versions come as a
migrating batch stream beside it.

A store is input that may be damaged or hostile, and one bad file never stops the rest:
a run whose folder or manifest is refused (a path leading outside its folder, not JSON,
the wrong shape), and a shard that is missing, not a regular file, leads outside its run
folder or fails verification (see ``pipelines.store.verified``), is left out with one
warning line naming it. Shards that no manifest lists are reported the same way.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from pipelines.store.fs import StoreFS
from pipelines.store.layout import ATTRIBUTES, Layout, is_part_name, run_dirs
from pipelines.store.manifest import RunManifest, ShardEntry
from pipelines.store.shards import read_columns, read_shard, verify_shard
from pipelines.store.verified import Stamp, VerifiedCache
from schemas.arrow import from_record_batch, from_shard
from schemas.errors import ShardError, StoreError, one_line
from schemas.transition import Transition
from schemas.versions import current_version, migrate, schema_for, shard_schema_for

if TYPE_CHECKING:
    import pyarrow.dataset as pads


@dataclass(frozen=True)
class Run:
    """One run folder of a store with its manifest."""

    kind: str
    domain: str
    run_id: str
    dir: str
    manifest: RunManifest

    def shard_paths(self) -> list[str]:
        return [f"{self.dir}/{s.path}" for s in self.manifest.shards]


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


@dataclass
class Scan:
    """One tree of a store as listed: its runs, and the finished shards no manifest lists."""

    runs: list[Run] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    listings: dict[str, dict[str, object]] = field(default_factory=dict)  # run folder -> name -> FileInfo


def store_fs(store: Store | StoreFS | str | os.PathLike[str]) -> StoreFS:
    """The file system of a store given as a handle, a ``StoreFS`` or a path (for the
    writers and tools that also take a bare folder, e.g. a local staging folder)."""
    if isinstance(store, Store):
        return store.sfs
    return store if isinstance(store, StoreFS) else StoreFS.open(store)


def _stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class Store:
    """A trajforge store at a local path or URI: its file system, layout and locks.

    ``warnings`` collects every problem met while reading, each once and one line;
    ``on_warning`` (default: print to stderr) sees each as it is found."""

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        must_exist: bool = True,
        on_warning: Callable[[str], None] = _stderr,
        verified: VerifiedCache | None = None,
    ) -> None:
        self.uri = os.fspath(uri)
        self.sfs = StoreFS.open(self.uri)
        self.layout = Layout(self.sfs.root)
        if must_exist and not self.exists():
            raise StoreError(f"{self.uri}: no such store")
        self.warnings: list[str] = []
        self.on_warning = on_warning
        self.verified = verified or VerifiedCache()

    @classmethod
    def open(
        cls, store: Store | str | os.PathLike[str], *, must_exist: bool = True, on_warning: Callable[[str], None] = _stderr
    ) -> Store:
        """The handle of ``store``: ``store`` itself when it is one already, else the store
        at that path or URI (StoreError if it must exist and does not)."""
        if isinstance(store, Store):
            if must_exist and not store.exists():
                raise StoreError(f"{store.uri}: no such store")
            return store
        return cls(store, must_exist=must_exist, on_warning=on_warning)

    def exists(self) -> bool:
        """Whether the store's root folder is there (a new store is made by its first write)."""
        return self.sfs.is_dir(self.sfs.root)

    def lock(self, path: str) -> AbstractContextManager[None]:
        """Hold the exclusive lock ``path`` of this store (a ``layout`` path), or refuse at once."""
        return self.sfs.lock(path)

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    def warn(self, message: str) -> None:
        message = one_line(message)
        if message not in self.warnings:
            self.warnings.append(message)
            self.on_warning(message)

    # -- listing -------------------------------------------------------------------------------
    def scan(self, kind: str = "raw") -> Scan:
        """Every run folder of a tree: runs whose manifest is sound, and unlisted shards."""
        scan = Scan()
        sfs = self.sfs
        for domain, run_id, path in run_dirs(sfs, kind, on_outside=self.warn):
            try:
                manifest = RunManifest.load(sfs, path)
            except StoreError as exc:
                self.warn(f"skipped {exc}; its run is not read")
                manifest = None
            listing = {i.base_name: i for i in sfs.listdir(path)}
            listed = {e.path for e in manifest.shards} if manifest else set()
            for name in sorted(n for n in listing if is_part_name(n) and n not in listed):
                scan.unlisted.append(f"{path}/{name}")
                why = "not in its run's manifest" if manifest else "in a run folder with no readable manifest"
                self.warn(f"{path}/{name}: finished shard {why}, not read (run: trajforge shards repair)")
            if manifest is not None:
                scan.runs.append(Run(kind, domain, run_id, path, manifest))
                scan.listings[path] = listing
        return scan

    def runs(self, kind: str = "raw") -> list[Run]:
        return self.scan(kind).runs

    def unlisted(self, kind: str = "raw") -> list[str]:
        """Finished shard files that no manifest lists (their rows are not read)."""
        return self.scan(kind).unlisted

    def shards(self, kind: str = "raw") -> list[Shard]:
        return [Shard(run, entry) for run in self.runs(kind) for entry in run.manifest.shards]

    # -- verified reading ----------------------------------------------------------------------
    def readable_shards(
        self, kind: str = "raw", on_skip: Callable[[str], None] | None = None, *, run_id: str | None = None
    ) -> list[Shard]:
        """Listed shards (of run ``run_id`` if given) that lie inside their run folder, are
        regular files of the listed size and are verified; others are reported and skipped."""
        skip = on_skip or self.warn
        scan = self.scan(kind)
        candidates: list[tuple[Shard, Stamp | None]] = []
        for run in scan.runs:
            if run_id is not None and run.run_id != run_id:
                continue
            listing = scan.listings[run.dir]
            for entry in run.manifest.shards:
                shard = Shard(run, entry)
                try:
                    self._check_listed(shard, listing.get(entry.path))
                except (ShardError, StoreError) as exc:
                    skip(f"skipped {exc}")
                    continue
                candidates.append((shard, VerifiedCache.stamp(self.sfs, shard.path, entry.sha256)))
        todo = [(shard, stamp) for shard, stamp in candidates if stamp is None or not self.verified.known(stamp)]
        bad = self._verify(todo, skip)
        return [shard for shard, _ in candidates if shard.path not in bad]

    def _check_listed(self, shard: Shard, info) -> None:
        """The cheap checks: inside the run folder, a regular file, the listed size."""
        self.sfs.confine(shard.run.dir, shard.entry.path)
        if info is None or info.type.name == "NotFound":
            raise ShardError(shard.path, "listed in the manifest but missing")
        if info.type.name != "File":
            raise ShardError(shard.path, "not a regular file")
        if info.size != shard.entry.bytes:
            raise ShardError(shard.path, f"size {info.size} differs from the manifest's {shard.entry.bytes}")

    def _verify(self, todo: list[tuple[Shard, Stamp | None]], skip: Callable[[str], None]) -> set[str]:
        """Verify shards not known good (a few at a time: hashing and zstd release the GIL);
        remember the good ones; the paths of the bad ones."""

        def one(item: tuple[Shard, Stamp | None]) -> tuple[int, str | None]:
            shard, _ = item
            started = time.time_ns()
            try:
                verify_shard(self.sfs, shard.path, shard.entry)
            except ShardError as exc:
                return started, str(exc)
            return started, None

        bad: set[str] = set()
        good: list[tuple[Stamp, int]] = []
        if not todo:
            return bad
        with ThreadPoolExecutor(min(4, os.cpu_count() or 1, len(todo))) as pool:
            for (shard, stamp), (started, problem) in zip(todo, pool.map(one, todo), strict=True):
                if problem is not None:
                    bad.add(shard.path)
                    skip(f"skipped {problem}")
                elif stamp is not None and VerifiedCache.stamp(self.sfs, shard.path, shard.entry.sha256) == stamp:
                    good.append((stamp, started))  # unchanged while it was read
        self.verified.remember(good)
        return bad

    def curation_attributes(self, tree: str) -> list[tuple[str, str]]:
        """(curation id, path) of each ``<tree>/<curation_id>/attributes.parquet`` that lies
        inside its folder, is a regular file and opens as Parquet; others are warned about
        and left out (for the ``curated`` and ``rejected`` views)."""
        import pyarrow.parquet as pq

        found = []
        for folder in self.sfs.listdir(self.layout.tree(tree)):
            if folder.type.name != "Directory" or folder.base_name.startswith(("_", ".")):
                continue
            try:
                path = self.sfs.confine(folder.path, ATTRIBUTES)
                info = self.sfs.info(path)
                if info.type.name == "NotFound":
                    continue
                if info.type.name != "File":
                    raise StoreError(f"{path}: not a regular file")
                with self.sfs.fs.open_input_file(path) as f:
                    pq.read_schema(f)
            except StoreError as exc:
                self.warn(f"skipped {exc}")
                continue
            except (OSError, pa.ArrowException) as exc:
                self.warn(f"skipped {path}: not a readable Parquet file ({str(exc).splitlines()[0][:160]})")
                continue
            found.append((folder.base_name, path))
        return found

    def trajectory_ids(
        self, *, job_id: str | None = None, domain: str | None = None, kind: str = "raw", run_id: str | None = None
    ) -> set[str]:
        """The distinct trajectory ids in the readable shards of a tree (of one domain, one
        run, or one collection job: its provenance's ``job_id``). Reads only those columns of
        each shard, without building the query views."""
        import pyarrow.compute as pc

        ids: set[str] = set()
        columns = ["trajectory_id", "provenance"] if job_id is not None else ["trajectory_id"]
        for shard in self.readable_shards(kind, run_id=run_id):
            if domain is not None and shard.run.domain != domain:
                continue
            if shard.entry.schema_version == current_version():
                parts: Iterable[pa.Table | pa.RecordBatch] = [read_columns(self.sfs, shard.path, columns)]
            else:  # older shards: their batches lifted to the current schema
                parts = read_shard(self.sfs, shard.path)
            for part in parts:
                tids = part.column("trajectory_id")
                if job_id is not None:
                    tids = pc.filter(tids, pc.equal(pc.struct_field(part.column("provenance"), "job_id"), job_id))
                ids.update(pc.unique(tids).to_pylist())
        ids.discard(None)
        return ids

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
        import pyarrow.dataset as pads  # here, not at the top: it imports pandas (~0.5 s), which listing needs not

        by_version: dict[int, list[str]] = {}
        for shard in self.readable_shards(kind, run_id=run_id):
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
