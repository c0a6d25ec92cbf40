"""Recover a run folder after its writer was killed, without touching finished shards.

Three things a kill can leave behind, each fixed here:
- ``part-N.arrow.partial`` (in the run folder, or for an object store staged in its local
  state folder): its complete record batches become ``part-N.arrow`` (written to a
  temporary name, fsynced, renamed; or uploaded as one object), then the partial is removed;
- ``part-N.arrow`` not yet in the manifest (killed between rename and manifest save): it
  is verified and listed;
- stale temporary files of an interrupted manifest or repair write: removed.
A listed shard whose file is gone is reported, never silently dropped.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.ipc as ipc

from pipelines.store.fs import LOCAL, StoreFS
from pipelines.store.manifest import LOCK, RunManifest, ShardEntry
from pipelines.store.shards import (
    PARTIAL_SUFFIX,
    SHARD_SUFFIX,
    collected_range,
    file_sha256,
    open_shard,
    salvage_partial,
)
from schemas.errors import ShardError, StoreError
from schemas.versions import version_of

_TMP = ".tmp-"


@dataclass
class RepairReport:
    run_dir: str
    recovered: list[tuple[str, int]] = field(default_factory=list)  # (shard, rows) rebuilt from partials
    listed: list[str] = field(default_factory=list)  # finished shards added to the manifest
    dropped: list[str] = field(default_factory=list)  # partials with no complete batch
    missing: list[str] = field(default_factory=list)  # listed shards whose file is gone
    broken: list[str] = field(default_factory=list)  # unlisted shard files that do not open

    @property
    def changed(self) -> bool:
        return bool(self.recovered or self.listed or self.dropped)

    def lines(self) -> list[str]:
        out = [f"{self.run_dir}: recovered {rows} rows from {name}{PARTIAL_SUFFIX}" for name, rows in self.recovered]
        out += [f"{self.run_dir}: listed finished shard {name}" for name in self.listed]
        out += [f"{self.run_dir}: removed {name} (no complete record batch)" for name in self.dropped]
        out += [f"{self.run_dir}: listed shard {name} is missing" for name in self.missing]
        out += [f"{self.run_dir}: {problem}" for problem in self.broken]
        return out


def _entry(sfs: StoreFS, path: str, name: str) -> ShardEntry:
    reader, version = open_shard(sfs, path)
    table = reader.read_all()
    lo, hi = collected_range(table)
    return ShardEntry(name, table.num_rows, sfs.info(path).size, file_sha256(sfs, path), version, lo, hi)


def _rebuild(sfs: StoreFS, schema: pa.Schema, batches: list[pa.RecordBatch], final: str) -> None:
    tmp = sfs.local_path(f"{final}{_TMP}repair")
    os.makedirs(os.path.dirname(tmp), exist_ok=True)
    options = ipc.IpcWriteOptions(compression="zstd")
    with LOCAL.fs.open_output_stream(tmp) as sink, ipc.new_file(sink, schema, options=options) as w:
        for b in batches:
            w.write_batch(b)
    sfs.publish(tmp, final)
    if os.path.exists(tmp):
        os.unlink(tmp)


def _staged(sfs: StoreFS, run_dir: str) -> dict[str, str]:
    """name -> local path of the files an object store's writer staged for this run folder."""
    if sfs.local:
        return {}
    folder = sfs.local_path(run_dir)
    return {n: os.path.join(folder, n) for n in (sorted(os.listdir(folder)) if os.path.isdir(folder) else [])}


def repair_run_locked(sfs: StoreFS, run_dir: str, *, domain: str, run_id: str, report: RepairReport | None = None) -> RunManifest:
    """Repair one run folder whose lock the caller holds; return its consistent manifest."""
    report = report if report is not None else RepairReport(run_dir)
    manifest = RunManifest.load(sfs, run_dir) or RunManifest(domain=domain, run_id=run_id)
    names = {i.base_name: i.path for i in sfs.listdir(run_dir)}
    staged = _staged(sfs, run_dir)
    for name, path in staged.items():
        if _TMP in name:
            os.unlink(path)
    for name in names:
        if _TMP in name:
            sfs.delete(f"{run_dir}/{name}")
    finished = sorted(n for n in names if n.endswith(SHARD_SUFFIX) and _TMP not in n)
    partials = sorted(n for n in {**names, **staged} if n.endswith(PARTIAL_SUFFIX) and _TMP not in n)

    for name in finished:
        if manifest.entry(name) is None:
            try:
                manifest.shards.append(_entry(sfs, f"{run_dir}/{name}", name))
                report.listed.append(name)
            except ShardError as exc:
                report.broken.append(f"unlisted shard left as is: {exc}")

    for name in partials:
        where, path = (LOCAL, staged[name]) if name in staged else (sfs, f"{run_dir}/{name}")
        final_name = name[: -len(PARTIAL_SUFFIX)]
        if manifest.entry(final_name) is None:
            schema, batches = salvage_partial(where, path)
            if batches and version_of(schema) is not None:
                _rebuild(sfs, schema, batches, f"{run_dir}/{final_name}")
                manifest.shards.append(_entry(sfs, f"{run_dir}/{final_name}", final_name))
                report.recovered.append((final_name, sum(b.num_rows for b in batches)))
                manifest.save(sfs, run_dir)  # listed before the partial goes: a kill here repeats nothing
            else:
                report.dropped.append(name)
        where.delete(path)

    report.missing.extend(s.path for s in manifest.shards if not sfs.exists(f"{run_dir}/{s.path}"))
    manifest.shards.sort(key=lambda s: s.path)
    if report.changed or not sfs.exists(f"{run_dir}/manifest.json"):
        manifest.save(sfs, run_dir)
    return manifest


def repair(path: str, *, run_prefix: str | None = None) -> list[RepairReport]:
    """Repair every run folder under a store (those whose run id starts with ``run_prefix``),
    or one run folder; refuses runs in use."""
    from pipelines.store.layout import run_dirs

    sfs = StoreFS.open(path)
    if sfs.is_dir(sfs.join("raw")):
        targets = [(d, r, p) for kind in ("raw",) for d, r, p in run_dirs(sfs, kind)]
    elif sfs.is_dir(sfs.root) and any(
        i.base_name == "manifest.json" or i.base_name.startswith("part-") for i in sfs.listdir(sfs.root)
    ):
        targets = [(posixpath.basename(posixpath.dirname(sfs.root)), posixpath.basename(sfs.root), sfs.root)]
    else:
        raise StoreError(f"{path}: not a store (no raw/ folder) nor a run folder (no manifest.json or part-* files)")
    reports = []
    for domain, run_id, run_dir in targets:
        if run_prefix is not None and not run_id.startswith(run_prefix):
            continue
        report = RepairReport(run_dir)
        with sfs.lock(f"{run_dir}/{LOCK}"):
            repair_run_locked(sfs, run_dir, domain=domain, run_id=run_id, report=report)
        reports.append(report)
    return reports
