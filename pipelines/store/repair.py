"""Recover a run folder after its writer was killed, without touching finished shards.

Three things a kill can leave behind, each fixed here:
- ``part-N.arrow.partial`` (in the run folder, or for an object store staged in its local
  state folder): its complete record batches become ``part-N.arrow`` (written to a
  temporary name, fsynced, renamed; or uploaded as one object), then the partial is removed;
- ``part-N.arrow`` not yet in the manifest (killed between rename and manifest save, or
  the manifest was lost): it is verified (every batch decoded and fully validated, its
  schema version, rows, bytes, sha256 and collected_at range computed) and listed; a shard
  that fails is reported and left unlisted;
- stale temporary files of an interrupted manifest or repair write: removed.
A listed shard whose file is gone is reported, never silently dropped.

``trajforge shards repair`` also rebuilds a manifest that is refused (not JSON, the wrong
shape, a path leading outside the folder): the refused file is kept beside it as
``manifest.json.refused-<time>`` and a new manifest lists the folder's verified shards.
Nothing outside the run folder is read: a shard or partial that is a symbolic link leading
out, or not a regular file, is reported and left as is.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.ipc as ipc

from pipelines.store.fs import LOCAL, StoreFS
from pipelines.store.layout import MANIFEST, PARTIAL_SUFFIX, RUN_FIRST, TREES, Layout, is_part_name, run_dirs
from pipelines.store.manifest import RunManifest, ShardEntry
from pipelines.store.shards import collected_range, file_sha256, salvage_partial, verify_shard
from schemas.errors import ShardError, StoreError, one_line
from schemas.versions import version_of

_TMP = ".tmp-"
_REFUSED = ".refused-"


@dataclass
class RepairReport:
    run_dir: str
    recovered: list[tuple[str, int]] = field(default_factory=list)  # (shard, rows) rebuilt from partials
    listed: list[str] = field(default_factory=list)  # finished shards added to the manifest
    dropped: list[str] = field(default_factory=list)  # partials with no complete batch
    missing: list[str] = field(default_factory=list)  # listed shards whose file is gone
    broken: list[str] = field(default_factory=list)  # unlisted shard files that fail verification
    replaced: str | None = None  # "<kept-as name>: <why>" of a refused manifest rebuilt

    @property
    def changed(self) -> bool:
        return bool(self.recovered or self.listed or self.dropped or self.replaced)

    def lines(self) -> list[str]:
        out = [f"{self.run_dir}: refused {MANIFEST} kept as {self.replaced}; rebuilt"] if self.replaced else []
        out += [f"{self.run_dir}: recovered {rows} rows from {name}{PARTIAL_SUFFIX}" for name, rows in self.recovered]
        out += [f"{self.run_dir}: listed finished shard {name}" for name in self.listed]
        out += [f"{self.run_dir}: removed {name} (no complete record batch)" for name in self.dropped]
        out += [f"{self.run_dir}: listed shard {name} is missing" for name in self.missing]
        out += [f"{self.run_dir}: {problem}" for problem in self.broken]
        return [one_line(line) for line in out]  # file names may hold any character


def _entry(sfs: StoreFS, run_dir: str, name: str) -> ShardEntry:
    """The manifest entry of a shard found in the folder, once it is verified whole."""
    path = f"{run_dir}/{name}"
    ranges: list[str] = []
    rows, version = verify_shard(
        sfs, path, on_batch=lambda _first, _v, batch: ranges.extend(x for x in collected_range(batch) if x)
    )
    lo, hi = (min(ranges, key=datetime.fromisoformat), max(ranges, key=datetime.fromisoformat)) if ranges else (None, None)
    return ShardEntry(name, rows, sfs.info(path).size, file_sha256(sfs, path), version, lo, hi)


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


def _load_or_set_aside(sfs: StoreFS, run_dir: str, report: RepairReport) -> RunManifest | None:
    """The folder's manifest; a refused one is moved aside (kept, never read) and None."""
    try:
        return RunManifest.load(sfs, run_dir)
    except StoreError as exc:
        kept = f"{MANIFEST}{_REFUSED}{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}"
        sfs.move(f"{run_dir}/{MANIFEST}", f"{run_dir}/{kept}")  # a rename: a link is moved, not followed
        report.replaced = f"{kept} ({str(exc).removeprefix(f'{run_dir}/{MANIFEST}: ')})"
        return None


def repair_run_locked(
    sfs: StoreFS,
    run_dir: str,
    *,
    domain: str,
    run_id: str,
    kind: str = "raw",
    report: RepairReport | None = None,
    rebuild_refused: bool = False,
) -> RunManifest:
    """Repair one run folder whose lock the caller holds; return its consistent manifest.
    A refused manifest is a StoreError, or with ``rebuild_refused`` set aside and rebuilt."""
    report = report if report is not None else RepairReport(run_dir)
    manifest = _load_or_set_aside(sfs, run_dir, report) if rebuild_refused else RunManifest.load(sfs, run_dir)
    manifest = manifest or RunManifest(domain=domain, run_id=run_id, kind=kind)
    names = {i.base_name: i.path for i in sfs.listdir(run_dir)}
    staged = _staged(sfs, run_dir)
    for name, path in staged.items():
        if _TMP in name:
            os.unlink(path)
    for name in names:
        if _TMP in name:
            sfs.delete(f"{run_dir}/{name}")
    finished = sorted(n for n in names if is_part_name(n))
    partials = sorted(n for n in {**names, **staged} if n.endswith(PARTIAL_SUFFIX) and is_part_name(n[: -len(PARTIAL_SUFFIX)]))

    for name in finished:
        if manifest.entry(name) is None and _plain_file_inside(sfs, run_dir, name, report):
            try:
                manifest.shards.append(_entry(sfs, run_dir, name))
                report.listed.append(name)
            except ShardError as exc:
                report.broken.append(f"unlisted shard left as is: {exc}")

    for name in partials:
        where, path = (LOCAL, staged[name]) if name in staged else (sfs, f"{run_dir}/{name}")
        final_name = name[: -len(PARTIAL_SUFFIX)]
        if where is sfs and not _plain_file_inside(sfs, run_dir, name, report):
            continue
        if manifest.entry(final_name) is None:
            schema, batches = salvage_partial(where, path)
            if batches and version_of(schema) is not None:
                _rebuild(sfs, schema, batches, f"{run_dir}/{final_name}")
                manifest.shards.append(_entry(sfs, run_dir, final_name))
                report.recovered.append((final_name, sum(b.num_rows for b in batches)))
                manifest.save(sfs, run_dir)  # listed before the partial goes: a kill here repeats nothing
            else:
                report.dropped.append(name)
        where.delete(path)

    report.missing.extend(s.path for s in manifest.shards if not sfs.exists(f"{run_dir}/{s.path}"))
    manifest.shards.sort(key=lambda s: s.path)
    if report.changed or not sfs.exists(f"{run_dir}/{MANIFEST}"):
        manifest.save(sfs, run_dir)
    return manifest


def _plain_file_inside(sfs: StoreFS, run_dir: str, name: str, report: RepairReport) -> bool:
    """Whether a file of the folder may be read: inside it and a regular file (else reported)."""
    try:
        sfs.confine(run_dir, name)
    except StoreError as exc:
        report.broken.append(f"left as is: {exc}")
        return False
    if sfs.info(f"{run_dir}/{name}").type.name != "File":
        report.broken.append(f"left as is: {run_dir}/{name}: not a regular file")
        return False
    return True


def repair(path: str | StoreFS, *, run_prefix: str | None = None) -> list[RepairReport]:
    """Repair every run folder under a store (those whose run id starts with ``run_prefix``),
    or one run folder; refuses runs in use. Refused manifests are rebuilt (see above)."""
    sfs = path if isinstance(path, StoreFS) else StoreFS.open(path)
    outside: list[str] = []  # run folders leading out of the store: reported, not repaired
    if sfs.is_dir(Layout(sfs.root).tree("raw")):
        targets = [(kind, d, r, p) for kind in TREES for d, r, p in run_dirs(sfs, kind, on_outside=outside.append)]
    elif sfs.is_dir(sfs.root) and any(i.base_name == MANIFEST or i.base_name.startswith("part-") for i in sfs.listdir(sfs.root)):
        parent = posixpath.dirname(sfs.root)
        kind = posixpath.basename(posixpath.dirname(parent))
        outer, inner = posixpath.basename(parent), posixpath.basename(sfs.root)
        domain, run_id = (inner, outer) if kind in RUN_FIRST else (outer, inner)
        targets = [(kind if kind in TREES else "raw", domain, run_id, sfs.root)]
    else:
        raise StoreError(f"{path}: not a store (no raw/ folder) nor a run folder (no manifest.json or part-* files)")
    reports = []
    for problem in outside:
        reports.append(RepairReport(sfs.root, broken=[problem]))
    for kind, domain, run_id, run_dir in targets:
        if run_prefix is not None and not run_id.startswith(run_prefix):
            continue
        report = RepairReport(run_dir)
        with sfs.lock(Layout.run_lock(run_dir)):
            repair_run_locked(sfs, run_dir, domain=domain, run_id=run_id, kind=kind, report=report, rebuild_refused=True)
        reports.append(report)
    return reports
