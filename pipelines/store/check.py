"""``trajforge shards validate``: check a store, a run folder or one shard file.

Checks each run manifest's shape, that every run folder and shard lies inside the store
and its run folder, each shard's magic, footer, schema and version, decodes every record
batch, and compares rows, size and sha256 with its manifest entry; ``deep`` also checks
every record (derived ids, hashes, JSON fields, spans). Shards that no manifest lists (a
lost or refused manifest) are problems too: readers leave their rows out. Each problem is
one line naming the file; one bad file never stops the others from being checked.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

import pyarrow as pa

from pipelines.store.fs import StoreFS
from pipelines.store.layout import MANIFEST, PARTIAL_SUFFIX, TREES, is_part_name, run_dirs
from pipelines.store.manifest import RunManifest, ShardEntry
from pipelines.store.shards import verify_shard
from schemas.arrow import from_shard
from schemas.errors import ShardError, StoreError, one_line
from schemas.validate import batch_problems
from schemas.versions import migrate, schema_for

__all__ = ["TREES", "CheckReport", "check_path", "check_run", "check_shard"]  # TREES: from layout, as before


@dataclass
class CheckReport:
    shards_ok: int = 0
    rows: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: str) -> None:
        """Record a problem as one line (file names in it may hold any character)."""
        self.problems.append(one_line(problem))


def check_shard(sfs: StoreFS, path: str, entry: ShardEntry | None, report: CheckReport, *, deep: bool = False) -> None:
    def records(first: int, version: int, batch: pa.RecordBatch) -> None:
        for row, problem in batch_problems(migrate(from_shard(batch, schema_for(version)), version)):
            report.add(f"{path}: row {first + row}: {problem}")

    try:
        if sfs.info(path).type.name != "File":
            raise ShardError(path, "not a regular file")
        rows, _ = verify_shard(sfs, path, entry, on_batch=records if deep else None)
    except ShardError as exc:
        report.add(str(exc))
        return
    report.shards_ok += 1
    report.rows += rows


def check_run(sfs: StoreFS, run_dir: str, report: CheckReport, *, deep: bool = False) -> None:
    try:
        manifest = RunManifest.load(sfs, run_dir)
    except StoreError as exc:
        report.add(str(exc))
        manifest = None
    listed = {s.path: s for s in manifest.shards} if manifest else {}
    present = {i.base_name for i in sfs.listdir(run_dir)}
    if manifest is None and MANIFEST not in present:
        shards = sum(is_part_name(n) for n in present)
        lost = f"; its {shards} finished shards are not read (run: trajforge shards repair)" if shards else ""
        report.add(f"{run_dir}: no {MANIFEST} (run never finished a shard, or it was lost){lost}")
    for name in sorted(present):
        path = f"{run_dir}/{name}"
        if name.endswith(PARTIAL_SUFFIX):
            report.add(f"{path}: unfinished shard left by a killed writer (run: trajforge shards repair)")
        elif is_part_name(name) and name not in listed:
            why = "not in the manifest" if manifest is not None else "listed by no readable manifest"
            report.add(f"{path}: finished shard {why} (run: trajforge shards repair)")
            _check_inside(sfs, run_dir, name, None, report, deep=deep)
    for name, entry in sorted(listed.items()):
        if name not in present:
            report.add(f"{run_dir}/{name}: listed in the manifest but missing")
        else:
            _check_inside(sfs, run_dir, name, entry, report, deep=deep)


def _check_inside(sfs: StoreFS, run_dir: str, name: str, entry: ShardEntry | None, report: CheckReport, *, deep: bool) -> None:
    """Check a shard of a run folder, if it lies inside the folder (else it is not read)."""
    try:
        path = sfs.confine(run_dir, name)
    except StoreError as exc:
        report.add(str(exc))
        return
    check_shard(sfs, path, entry, report, deep=deep)


def check_path(path: str, *, deep: bool = False) -> CheckReport:
    """Check a store, a run folder or a single shard file."""
    sfs = StoreFS.open(path)
    report = CheckReport()
    info = sfs.info(sfs.root)
    if info.type.name == "NotFound":
        raise StoreError(f"{path}: no such file or directory")
    if info.type.name == "File":
        run_dir = posixpath.dirname(sfs.root)
        try:
            manifest = RunManifest.load(sfs, run_dir)
        except StoreError as exc:
            report.add(str(exc))
            manifest = None
        entry = manifest.entry(posixpath.basename(sfs.root)) if manifest else None
        check_shard(sfs, sfs.root, entry, report, deep=deep)
    elif any(sfs.is_dir(sfs.join(tree)) for tree in TREES):
        for tree in TREES:
            for _, _, run_dir in run_dirs(sfs, tree, on_outside=report.add):
                check_run(sfs, run_dir, report, deep=deep)
    elif sfs.exists(sfs.join(MANIFEST)) or any(is_part_name(i.base_name) for i in sfs.listdir(sfs.root)):
        check_run(sfs, sfs.root, report, deep=deep)
    else:
        raise StoreError(f"{path}: not a store (no raw/), a run folder (no {MANIFEST}) or a shard file")
    return report
