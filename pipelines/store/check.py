"""``trajforge shards validate``: check a store, a run folder or one shard file.

Checks each shard's magic, footer, schema and version, decodes every record batch, and
compares rows, size and sha256 with its manifest entry; ``deep`` also checks every record
(derived ids, hashes, JSON fields, spans). Each problem is one line naming the file; one
bad shard never stops the others from being checked.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from pipelines.store.fs import StoreFS
from pipelines.store.layout import is_part_name, run_dirs
from pipelines.store.manifest import MANIFEST, RunManifest, ShardEntry
from pipelines.store.shards import PARTIAL_SUFFIX, file_sha256, stored_batches
from schemas.arrow import from_shard
from schemas.errors import ShardError, StoreError
from schemas.validate import batch_problems
from schemas.versions import migrate, schema_for

TREES = ("raw", "curated", "rejected")  # collection runs and curation outputs share one format


@dataclass
class CheckReport:
    shards_ok: int = 0
    rows: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_shard(sfs: StoreFS, path: str, entry: ShardEntry | None, report: CheckReport, *, deep: bool = False) -> None:
    try:
        rows, version = 0, None
        for version, batch in stored_batches(sfs, path, full_check=True):
            rows += batch.num_rows
            if deep:
                for row, problem in batch_problems(migrate(from_shard(batch, schema_for(version)), version)):
                    report.problems.append(f"{path}: row {rows - batch.num_rows + row}: {problem}")
        if entry is not None:
            if entry.rows != rows:
                raise ShardError(path, f"has {rows} rows, manifest says {entry.rows}")
            size = sfs.info(path).size
            if size != entry.bytes:
                raise ShardError(path, f"is {size} bytes, manifest says {entry.bytes}")
            if file_sha256(sfs, path) != entry.sha256:
                raise ShardError(path, "sha256 differs from the manifest (file changed after it was finished)")
            if version is not None and entry.schema_version != version:
                raise ShardError(path, f"is schema v{version}, manifest says v{entry.schema_version}")
    except ShardError as exc:
        report.problems.append(str(exc))
        return
    report.shards_ok += 1
    report.rows += rows


def check_run(sfs: StoreFS, run_dir: str, report: CheckReport, *, deep: bool = False) -> None:
    try:
        manifest = RunManifest.load(sfs, run_dir)
    except StoreError as exc:
        report.problems.append(str(exc))
        manifest = None
    listed = {s.path: s for s in manifest.shards} if manifest else {}
    present = {i.base_name for i in sfs.listdir(run_dir)}
    if manifest is None and f"{MANIFEST}" not in present:
        report.problems.append(f"{run_dir}: no {MANIFEST} (run never finished a shard, or it was lost)")
    for name in sorted(present):
        path = f"{run_dir}/{name}"
        if name.endswith(PARTIAL_SUFFIX):
            report.problems.append(f"{path}: unfinished shard left by a killed writer (run: trajforge shards repair)")
        elif is_part_name(name) and name not in listed and manifest is not None:
            report.problems.append(f"{path}: finished shard not in the manifest (run: trajforge shards repair)")
            check_shard(sfs, path, None, report, deep=deep)
        elif is_part_name(name) and manifest is None:
            check_shard(sfs, path, None, report, deep=deep)
    for name, entry in sorted(listed.items()):
        path = f"{run_dir}/{name}"
        if name not in present:
            report.problems.append(f"{path}: listed in the manifest but missing")
        else:
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
            report.problems.append(str(exc))
            manifest = None
        entry = manifest.entry(posixpath.basename(sfs.root)) if manifest else None
        check_shard(sfs, sfs.root, entry, report, deep=deep)
    elif any(sfs.is_dir(sfs.join(tree)) for tree in TREES):
        for tree in TREES:
            for _, _, run_dir in run_dirs(sfs, tree):
                check_run(sfs, run_dir, report, deep=deep)
    elif sfs.exists(sfs.join(MANIFEST)) or any(is_part_name(i.base_name) for i in sfs.listdir(sfs.root)):
        check_run(sfs, sfs.root, report, deep=deep)
    else:
        raise StoreError(f"{path}: not a store (no raw/), a run folder (no {MANIFEST}) or a shard file")
    return report
