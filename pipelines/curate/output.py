"""What a curation writes, one piece of input at a time (in Beam workers), then put together.

A piece is an input shard or rows of one (``run.plan_pieces``). ``write_shard`` (run by
``beam.WriteShards``) takes one piece and its decisions and
writes, under ``<work>/out/NNNNNN/``: the scrubbed kept and rejected transitions (the
store's own writer, so shards, manifests and checksums are the collection format), their
attributes, the kept steps' and trajectories' index rows and the piece's counts. Every
file depends only on that piece and its decisions, so a retried bundle rewrites the same
bytes. ``finalise`` (the driver, after the last pass) gathers the shards of each tree and
domain in input order into one local folder with its manifest and publishes it
(``publish_tree``) as ``curated/<id>/<domain>/`` or ``rejected/<id>/<domain>/``, joins the
attributes into one ``attributes.parquet`` per tree and the index into
``curated/_index/<id>/``, and sums the counts; nothing holds more than one piece's rows
at a time.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.curate.config import CurationConfig
from pipelines.curate.records import Decision, TrajectorySummary
from pipelines.curate.scrub import scrub_transition, secret_rows
from pipelines.store import Store, StoreWriter, read_shard
from pipelines.store.fs import LOCAL
from pipelines.store.layout import part_name
from pipelines.store.manifest import RunManifest
from pipelines.store.publish import publish_tree
from pipelines.tally import Tally
from schemas.arrow import from_record_batch, to_record_batch
from schemas.errors import ShardError

ATTRIBUTES = pa.schema(
    [
        ("transition_id", pa.string()),
        ("trajectory_id", pa.string()),
        ("domain", pa.string()),
        ("status", pa.string()),
        ("stage", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("duplicate_of", pa.string()),
        ("similarity", pa.float64()),
        ("cluster", pa.string()),
        ("flags", pa.list_(pa.string())),
        ("exclude_as_target", pa.bool_()),
    ]
)
TRAJ_INDEX = pa.schema(
    [
        ("traj", pa.string()),
        ("domain", pa.string()),
        ("order", pa.string()),
        ("key", pa.string()),
        ("sig", pa.binary()),
        ("shingles", pa.binary()),  # sorted distinct uint32 (``neardup.shingle_set``): exact Jaccard later
        ("last_step", pa.int64()),
    ]
)
STEPS_INDEX = pa.schema(
    [("sa", pa.string()), ("tkey", pa.string()), ("order", pa.string()), ("tid", pa.string()), ("words", pa.binary())]
)
TREES = ("curated", "rejected")


def shard_dir(work: str, shard: int) -> Path:
    return Path(work) / "out" / f"{shard:06d}"


def write_shard(
    store: Store,
    path: str,
    shard: int,
    work: str,
    cid: str,
    cfg: CurationConfig,
    decisions: list[Decision],
    kept: list[TrajectorySummary],
    span=None,
) -> None:
    out = shard_dir(work, shard)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    by_tid, rows = {}, {"curated": [], "rejected": []}
    for d in sorted(decisions, key=lambda d: (d.transition_id or "", d.reason or "", d.detail or "")):
        if d.transition_id is None or d.stage == "validate":  # quarantined: in the attributes only
            rows["rejected"].append(attribute(d))
        else:
            by_tid[d.transition_id] = d
    tally = CurationTally()
    sfs = store.sfs
    kinds = cfg.scrub.kinds if cfg.scrub.enabled else []
    try:
        with StoreWriter(str(out), cid, kind="curated") as kept_w, StoreWriter(str(out), cid, kind="rejected") as rej_w:
            writers = {"curated": kept_w, "rejected": rej_w}
            for batch in read_shard(sfs, path, span=span):
                tally.transitions_in += batch.num_rows
                tids = batch.column("transition_id").to_pylist()
                decided = [by_tid.get(tid) for tid in tids]
                dirty = secret_rows(batch, kinds) if kinds else [False] * batch.num_rows
                for tree in TREES:
                    picked = [i for i, d in enumerate(decided) if d is not None and d.kept == (tree == "curated")]
                    if picked:
                        part = _scrubbed(batch, picked, [i for i in picked if dirty[i]], kinds, tally)
                        for domain in sorted(set(part.column("domain").to_pylist())):
                            rows_of = part.filter(pc.equal(part.column("domain"), domain))
                            writers[tree].writer(domain).write_batch(rows_of)
                        rows[tree].extend(attribute(decided[i]) for i in picked)
    except ShardError:
        pass  # unreadable: pass 1 quarantined the shard with the reason
    for tree, items in rows.items():
        tally.add(tree, items)
        pq.write_table(pa.Table.from_pylist(items, schema=ATTRIBUTES), out / f"attributes-{tree}.parquet", compression="zstd")
    steps = sorted((d for d in by_tid.values() if d.kept), key=lambda d: d.transition_id)
    pq.write_table(
        pa.Table.from_pylist([d.index_row() for d in steps], schema=STEPS_INDEX), out / "steps.parquet", compression="zstd"
    )
    kept = sorted(kept, key=lambda s: s.trajectory)
    pq.write_table(
        pa.Table.from_pylist([s.index_row() for s in kept], schema=TRAJ_INDEX), out / "traj.parquet", compression="zstd"
    )
    (out / "tally.json").write_text(json.dumps(tally.to_json(), sort_keys=True))


def _scrubbed(batch: pa.RecordBatch, rows: list[int], dirty: list[int], kinds, tally: CurationTally) -> pa.RecordBatch:
    """The rows of a batch, in order, with the ones that may hold secrets scrubbed (only
    those become ``Transition`` objects; the rest stay columnar)."""
    if not dirty:
        return batch.take(pa.array(rows, pa.int64()))
    scrubbed = []
    for t in from_record_batch(batch.take(dirty)):
        t, counts = scrub_transition(t, kinds)
        tally.scrubbed.update(counts)
        scrubbed.append(t)
    dirty_set = set(dirty)
    clean = [i for i in rows if i not in dirty_set]
    table = pa.concat_tables(
        [
            pa.Table.from_batches([batch.take(pa.array(clean, pa.int64()))]).append_column("_row", pa.array(clean, pa.int64())),
            pa.Table.from_batches([to_record_batch(scrubbed)]).append_column("_row", pa.array(dirty, pa.int64())),
        ]
    )
    table = table.sort_by("_row").drop_columns("_row").combine_chunks()
    return table.to_batches()[0].replace_schema_metadata(batch.schema.metadata)


def index_files(work: str, shards: list[int]) -> dict[str, list[str]]:
    """The index files this curation's earlier passes wrote (their kept trajectories and steps)."""
    return {kind: [str(shard_dir(work, i) / f"{kind}.parquet") for i in shards] for kind in ("traj", "steps")}


def finalise(store: Store | str, work: str, cid: str, shards: int) -> CurationTally:
    """Put the per-shard outputs together (see the module docstring); the summed counts.
    ``work`` is a local folder; each run folder is gathered in ``<work>/publish/`` and
    published whole, its manifest last (``publish_tree``: a rename on a local store, one
    object per file on an object store)."""
    store = Store.open(store)
    sfs, layout = store.sfs, store.layout
    total = CurationTally()
    for tree in TREES:
        gathered: dict[str, tuple[Path, RunManifest]] = {}
        for i in range(shards):
            src = shard_dir(work, i) / tree / cid
            for domain_dir in sorted(src.iterdir()) if src.is_dir() else ():
                m = RunManifest.load(LOCAL, str(domain_dir))
                domain = domain_dir.name
                folder, dest = gathered.setdefault(
                    domain, (Path(work) / "publish" / tree / domain, RunManifest(domain, cid, kind=tree, closed=True))
                )
                folder.mkdir(parents=True, exist_ok=True)
                for entry in m.shards if m else ():
                    name = part_name(len(dest.shards))
                    LOCAL.publish(str(domain_dir / entry.path), str(folder / name))
                    dest.shards.append(replace(entry, path=name))
        for domain, (folder, m) in gathered.items():
            m.save(LOCAL, str(folder))
            # curate() cleared this curation's folders first and is their only writer: an
            # earlier attempt's folder cannot be there, and clear drops a killed upload's objects
            publish_tree(sfs, folder, layout.run_dir(tree, domain, cid), clear=True)
        sfs.makedirs(layout.curation_dir(cid, tree))
        attributes = layout.curation_attributes(cid, tree)
        with pq.ParquetWriter(attributes, ATTRIBUTES, compression="zstd", filesystem=sfs.fs) as w:
            for i in range(shards):
                part = shard_dir(work, i) / f"attributes-{tree}.parquet"
                if part.exists():
                    table = pq.read_table(part)
                    if table.num_rows:
                        w.write_table(table)
    index = layout.index_dir(cid)
    sfs.makedirs(index)
    for i in range(shards):
        d = shard_dir(work, i)
        for kind in ("traj", "steps"):
            if (d / f"{kind}.parquet").exists():
                sfs.publish(str(d / f"{kind}.parquet"), f"{index}/{kind}-{i:06d}.parquet")
        if (d / "tally.json").exists():
            total.merge(json.loads((d / "tally.json").read_text()))
    return total


def attribute(d: Decision) -> dict[str, Any]:
    """A decision as its row of ``attributes.parquet`` (``ATTRIBUTES``)."""
    flags = sorted(d.flags)
    return {
        "transition_id": d.transition_id,
        "trajectory_id": d.trajectory,
        "domain": d.domain,
        "status": d.status,
        "stage": d.stage,
        "reason": d.reason,
        "detail": d.detail,
        "duplicate_of": d.duplicate_of,
        "similarity": d.similarity,
        "cluster": d.cluster,
        "flags": flags,
        "exclude_as_target": bool(d.duplicate_of) or any(f.startswith("exclude:") for f in flags),
    }


@dataclass
class CurationTally(Tally):
    """Report counters of one piece of input, or of them all (``merge``); its JSON is each
    piece's ``tally.json``."""

    transitions_in: int = 0
    kept: int = 0
    rejected: int = 0
    repeats: int = 0  # kept steps marked as repeating an earlier kept one
    # rejected rows by stage and by reason
    stage: Counter = field(default_factory=Counter)
    reason: Counter = field(default_factory=Counter)
    # every row's flags, without the "exclude:" prefix; secrets replaced, by kind
    flags: Counter = field(default_factory=Counter)
    scrubbed: Counter = field(default_factory=Counter)
    domain: dict[str, dict[str, int]] = field(default_factory=dict)  # domain -> {"kept": n, "rejected": n}
    # (cluster, trajectory) pairs: a trajectory's rows count once in its cluster's size
    cluster_trajs: set[tuple[str, str]] = field(default_factory=set)

    def add(self, tree: str, rows: list[dict]) -> None:
        """Count attribute rows (``attribute``) written to ``tree``."""
        for r in rows:
            d = self.domain.setdefault(r["domain"] or "?", {"kept": 0, "rejected": 0})
            if tree == "curated":
                self.kept += 1
                d["kept"] += 1
                self.repeats += bool(r["duplicate_of"])
            else:
                self.rejected += 1
                d["rejected"] += 1
                self.stage[r["stage"]] += 1
                self.reason[r["reason"] or "?"] += 1
            self.flags.update(f.split(":")[-1] for f in r["flags"])
            if r["cluster"]:
                self.cluster_trajs.add((r["cluster"], r["trajectory_id"]))

    def cluster_sizes(self) -> dict[str, int]:
        sizes = Counter(Counter(c for c, _ in self.cluster_trajs).values())
        return {str(k): v for k, v in sorted(sizes.items())}
