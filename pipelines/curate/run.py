"""``trajforge curate CONFIG.yaml --store STORE [beam options]``: the curation driver.

1. Inputs: the finished raw shards not covered by an earlier curation (filtered by
   domain). The curation id is a content hash of the config and those shards (paths and
   sha256), so rerunning a finished curation is a no-op.
2. The shards are cut into pieces no trajectory crosses (``plan_pieces``), and Beam
   passes over groups of at most ``max_transitions_per_pass`` of them, earliest first
   (``pipelines.curate.beam``): one decision per transition, then, still in Beam, each
   piece's scrubbed curated and rejected shards, attributes and index rows
   (``pipelines.curate.output``) under ``curated/<id>/_work/``. What a pass keeps is in
   the index the next pass reads. Memory follows the pass, not the store or shard size.
3. Here: the per-piece outputs become ``curated/<id>/<domain>/`` and
   ``rejected/<id>/<domain>/`` (the collection format, with manifests),
   ``attributes.parquet`` beside each tree (stage, reason from ``pipelines.curate.reasons``,
   detail, duplicate_of, cluster, flags),
   and ``curated/_index/<id>/`` (kept trajectories' keys and signatures, kept steps'
   keys), so a later curation of new runs dedupes against everything curated before.
   The same input and config give byte-identical output; ``report.json`` comes last.

Beam runs on this machine with its FnApiRunner in multi-process mode (``pipelines.beam_local``:
Beam's DirectRunner would first fetch a Prism binary at run time); ``--runner`` and any other
Beam options are passed through, so the same pipeline runs on Dataflow, Flink or Spark.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import posixpath
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import pyarrow.fs as pafs

from pipelines.curate import output
from pipelines.curate.config import CurationConfig
from pipelines.progress import watch
from pipelines.store import Store
from pipelines.store.fs import LOCAL

STAGES = ("validate", "decontaminate", "quality", "exact_dedup", "near_dedup")


@dataclass
class CurationReport:
    curation_id: str
    config: str
    inputs: int = 0
    transitions_in: int = 0
    kept: int = 0
    rejected: int = 0
    by_stage: dict[str, int] = field(default_factory=dict)
    by_reason: dict[str, int] = field(default_factory=dict)
    by_domain: dict[str, dict[str, int]] = field(default_factory=dict)
    marked_duplicate_steps: int = 0
    flags: dict[str, int] = field(default_factory=dict)
    scrubbed: dict[str, int] = field(default_factory=dict)
    cluster_sizes: dict[str, int] = field(default_factory=dict)  # size -> clusters
    index_rows: dict[str, dict[str, int]] = field(default_factory=dict)  # pass -> earlier index rows read, matched
    seconds: dict[str, float] = field(default_factory=dict)
    noop: bool = False

    def table(self) -> str:
        lines = [
            f"curation {self.curation_id}: {self.transitions_in} transitions in, {self.kept} kept, "
            f"{self.rejected} rejected{' (already done)' if self.noop else ''}"
        ]
        for stage in STAGES:
            if self.by_stage.get(stage):
                lines.append(f"  {stage:<14} dropped {self.by_stage[stage]}")
        for reason, n in sorted(self.by_reason.items(), key=lambda kv: -kv[1])[:10]:
            lines.append(f"    {n:>8}  {reason[:100]}")
        if self.marked_duplicate_steps:
            lines.append(f"  repeated steps marked (kept as history, not targets): {self.marked_duplicate_steps}")
        for what, counts in (("flags", self.flags), ("scrubbed", self.scrubbed)):
            if counts:
                lines.append(f"  {what}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if self.cluster_sizes:
            lines.append(
                "  near-duplicate clusters by size: "
                + ", ".join(f"{k}: {v}" for k, v in sorted(self.cluster_sizes.items(), key=lambda kv: int(kv[0])))
            )
        lines.append("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items()))
        return "\n".join(lines)


def _index_markers(store: Store) -> list[str]:
    """``curated/_index/<id>.json`` of every finished curation (written after its index files)."""
    found = store.sfs.listdir(store.layout.index_root())
    return [i.path for i in found if i.base_name.endswith(".json") and i.type.name == "File"]


def _curated_inputs(store: Store) -> set[str]:
    done: set[str] = set()
    for path in _index_markers(store):
        done.update(json.loads(store.sfs.read_bytes(path))["inputs"])
    return done


class Input(NamedTuple):
    """A raw shard a curation takes."""

    path: str  # relative to the store
    sha256: str
    rows: int
    first_collected_at: str  # "" when the manifest does not say


def plan_inputs(store: Store, cfg: CurationConfig) -> list[Input]:
    """The raw shards this curation takes, in path order."""
    done = _curated_inputs(store)
    picked = []
    for shard in store.readable_shards("raw"):
        if cfg.domains and shard.run.domain not in cfg.domains:
            continue
        rel = store.sfs.rel(shard.path)
        if rel not in done:
            picked.append(Input(rel, shard.entry.sha256, shard.entry.rows, shard.entry.min_collected_at or ""))
    return sorted(picked)


@dataclass(frozen=True)
class Piece:
    """The unit a Beam pass reads and writes: rows ``[start, stop)`` of input shard
    ``input``, cut at a point no trajectory crosses. ``joins`` is true when the piece
    continues a trajectory of the piece before it (a writer rolled its shard
    mid-episode): the two stay in one pass."""

    input: int
    start: int
    stop: int
    batch_rows: tuple[int, ...] | None  # rows per record batch (None: the whole shard, unread here)
    first_at: str
    joins: bool = False

    @property
    def rows(self) -> int:
        return self.stop - self.start

    def span(self):
        from pipelines.store.shards import RowSpan

        return None if self.batch_rows is None else RowSpan(self.start, self.stop, self.batch_rows)


def _cuts(trajs: list[str], target: int) -> list[int]:
    """Row indices where a shard with these trajectory ids (in row order) can be cut into
    pieces of about ``target`` rows: no trajectory has rows on both sides of a cut, even
    when episodes were interleaved."""
    last = {t: i for i, t in enumerate(trajs)}
    cuts, reach, begin = [], -1, 0
    for i, t in enumerate(trajs):
        if i > begin and reach < i and i - begin >= target:
            cuts.append(i)
            begin = i
        reach = max(reach, last[t])
    return cuts


def plan_pieces(store: Store, inputs: list[Input], limit: int) -> list[Piece]:
    """The input shards as pieces of at most about ``limit / 4`` transitions (a shard that
    fits is one piece), in input order. A pass then holds at most ``limit`` transitions
    whatever size the writer gave its shards, unless one trajectory is larger."""
    from pipelines.store.shards import open_shard, read_column

    target = max(limit // 4, 1)
    pieces: list[Piece] = []
    previous_last: tuple[str, str | None] = ("", None)  # (run dir, last trajectory of the shard before)
    for i, (rel, _sha, rows, first_at) in enumerate(inputs):
        path = store.sfs.join(rel)
        try:
            if rows > target:
                chunks = read_column(store.sfs, path, "trajectory_id").chunks
                trajs = [t for c in chunks for t in c.to_pylist()]
                batch_rows = tuple(len(c) for c in chunks)
            else:
                reader, _ = open_shard(store.sfs, path)
                n = reader.num_record_batches
                trajs = (
                    [
                        reader.get_batch(0).column("trajectory_id")[0].as_py(),
                        reader.get_batch(n - 1).column("trajectory_id")[-1].as_py(),
                    ]
                    if n
                    else []
                )
                batch_rows = None
        except Exception:  # an unreadable shard is one piece, quarantined by the pass that reads it
            trajs, batch_rows = [], None
        run = posixpath.dirname(rel)
        joins = bool(trajs) and previous_last == (run, trajs[0])
        previous_last = (run, trajs[-1] if trajs else None)
        bounds = [0, *(_cuts(trajs, target) if batch_rows else []), rows]
        for k, (a, b) in enumerate(itertools.pairwise(bounds)):
            pieces.append(Piece(i, a, b, batch_rows, first_at, joins and k == 0))
    return pieces


def pass_groups(pieces: list[Piece], limit: int) -> list[list[int]]:
    """Piece indices in groups of about ``limit`` transitions, each group one bounded Beam
    pass. A piece that continues the one before it (``joins``) stays in its pass, and
    passes go in the order of their first transition, so what a pass keeps wins against
    later passes as the earliest copy should."""
    units: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if piece.joins and units:
            units[-1].append(i)
        else:
            units.append([i])
    units.sort(key=lambda u: (min(pieces[i].first_at for i in u), u[0]))
    groups: list[list[int]] = []
    size = 0
    for unit in units:
        rows = sum(pieces[i].rows for i in unit)
        if not groups or size + rows > limit:
            groups.append([])
            size = 0
        groups[-1].extend(unit)
        size += rows
    return [sorted(g) for g in groups]


def curation_id(cfg: CurationConfig, inputs: list[Input]) -> str:
    body = json.dumps({"config": cfg.model_dump(mode="json"), "inputs": [[i.path, i.sha256] for i in inputs]}, sort_keys=True)
    return f"{cfg.name}-{hashlib.sha256(body.encode()).hexdigest()[:12]}"


def _previous_index(store: Store, work: str) -> dict[str, list[str]]:
    """Local paths of the index files of every finished earlier curation of this store (its
    ``<id>.json`` marker is written last: a killed curation's files are not read). An object
    store's index files are fetched into ``work`` first (small: ~1 KB a kept trajectory)."""
    sfs = store.sfs
    found: dict[str, list[str]] = {"traj": [], "steps": []}
    for marker in _index_markers(store):
        for path in sfs.files(marker[: -len(".json")]):
            kind = posixpath.basename(path).split("-", 1)[0]
            if kind in found and path.endswith(".parquet"):
                found[kind].append(path)
    if sfs.local:
        return {kind: sorted(paths) for kind, paths in found.items()}
    fetched: dict[str, list[str]] = {}
    for kind, paths in found.items():
        fetched[kind] = []
        for path in sorted(paths):
            local = os.path.join(work, "previous", sfs.rel(path))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            pafs.copy_files(path, local, source_filesystem=sfs.fs, destination_filesystem=LOCAL.fs)
            fetched[kind].append(local)
    return fetched


def run_pass(
    reads: dict[int, tuple],
    store_uri: str,
    cfg: CurationConfig,
    previous: dict[str, list[str]],
    every_read: dict[int, tuple],
    work: str,
    cid: str,
    beam_args: list[str] | None,
) -> dict[str, int]:
    """One Beam pass over some pieces; the counts of earlier index rows it read and matched.
    Each piece read leaves an empty file in ``<work>/read/`` (the driver's progress).
    The store goes by its URI: a pass may run in a process of its own, and Beam's workers
    open their own handle from it (``beam.ReadChunks.setup``)."""
    import apache_beam as beam

    from pipelines.beam_options import beam_options
    from pipelines.curate.beam import WriteShards, build

    p = beam.Pipeline(options=beam_options(beam_args))
    decisions, kept = build(p, reads, store_uri, cfg, previous, done_dir=os.path.join(work, "read"))
    _ = (decisions, kept) | "WriteShards" >> WriteShards(store_uri, every_read, work, cid, cfg)
    result = p.run()
    result.wait_until_finish()
    try:
        counters = result.metrics().query()["counters"]
    except NotImplementedError:  # a runner without metrics (Dask's): the counts are unknown, not zero
        return {}
    return {c.key.metric.name: c.committed for c in counters if c.key.metric.namespace == "index"}


def _pass_counters(work: Path, rows: dict[int, int]):
    """For a pass's progress: transitions of the pieces read so far (``<work>/read/``), and
    a text with the pieces whose outputs are written (``tally.json``, the last file)."""

    def done() -> int:
        names = set(os.listdir(work / "read"))
        return sum(n for k, n in rows.items() if f"{k:06d}" in names)

    def written(_n: int, _seconds: float) -> str:
        n = sum((output.shard_dir(str(work), k) / "tally.json").exists() for k in rows)
        return f"{n}/{len(rows)} pieces written"

    return done, written


def _in_own_process(fn, *args):
    """Run one pass in a fresh process: whatever a pass leaves behind in the process that
    drove it (Beam's runner state, the allocator's arenas) goes with it, so the memory of
    a curation follows its largest pass, not the number of passes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


ENGINES = ("auto", "local", "beam")


def local_engine(engine: str, transitions: int, beam_args: list[str] | None) -> bool:
    """Whether the passes run in this process (``decide.run_pass_local``) rather than on
    Beam: ``auto`` picks this process for ``neardup.LOCAL_MAX`` transitions or fewer when
    no Beam option was given (Beam's start-up alone costs seconds); the decisions are the same."""
    from pipelines.curate.neardup import LOCAL_MAX

    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return engine == "local" or (engine == "auto" and transitions <= LOCAL_MAX and not beam_args)


def curate(
    cfg: CurationConfig, store: Store | str, *, beam_args: list[str] | None = None, engine: str = "auto", log=print
) -> CurationReport:
    """Curate the store's raw shards not curated yet (see the module docstring); ``engine``
    as ``local_engine`` decides."""
    store = Store.open(store)
    sfs, layout = store.sfs, store.layout
    inputs = plan_inputs(store, cfg)
    cid = curation_id(cfg, inputs)
    out_dir = layout.curation_dir(cid)
    report_path = layout.curation_report(cid)
    if sfs.exists(report_path):
        report = CurationReport(**json.loads(sfs.read_bytes(report_path)))
        report.noop = True
        return report
    if not inputs:  # everything is curated already: a rerun is a no-op
        return CurationReport(cid, cfg.name, noop=True)
    report = CurationReport(cid, cfg.name, inputs=len(inputs))
    # Beam's per-piece outputs: in the store (local) or the store's local state folder (object stores)
    work = Path(sfs.local_path(f"{out_dir}/_work"))
    for leftover in (out_dir, layout.curation_dir(cid, "rejected"), layout.index_dir(cid)):
        sfs.rmtree(leftover)  # an unfinished earlier try of this curation starts over
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pieces = plan_pieces(store, inputs, cfg.max_transitions_per_pass)
    reads = {k: (sfs.join(inputs[p.input].path), p.span()) for k, p in enumerate(pieces)}

    t0 = time.monotonic()
    previous = _previous_index(store, str(work))
    groups = pass_groups(pieces, cfg.max_transitions_per_pass)
    (work / "read").mkdir()
    local = local_engine(engine, sum(p.rows for p in pieces), beam_args)
    for g, group in enumerate(groups):
        rows = sum(pieces[k].rows for k in group)
        how = "pass in this process" if local else "Beam pass"
        log(f"curation {cid}: {how} {g + 1}/{len(groups)} over {len(group)} pieces of shards ({rows} transitions)")
        args = ({k: reads[k] for k in group}, store.uri, cfg, previous, reads, str(work), cid)
        read_so_far, written = _pass_counters(work, {k: pieces[k].rows for k in group})
        with watch(f"curate pass {g + 1}/{len(groups)}", rows, read_so_far, unit="transitions", info=written):
            if local:
                from pipelines.curate.decide import run_pass_local

                counts = run_pass_local(*args)
            else:
                counts = run_pass(*args, beam_args) if len(groups) == 1 else _in_own_process(run_pass, *args, beam_args)
        report.index_rows[str(g + 1)] = counts
        done = output.index_files(str(work), group)  # what this pass kept wins against later passes
        previous = {kind: previous[kind] + done[kind] for kind in previous}
    report.seconds["passes"] = time.monotonic() - t0

    t1 = time.monotonic()
    log(f"curation {cid}: putting {len(inputs)} shards' outputs together")
    tally = output.finalise(store, str(work), cid, len(pieces))
    report.transitions_in, report.kept, report.rejected = tally.transitions_in, tally.kept, tally.rejected
    report.marked_duplicate_steps = tally.repeats
    report.by_stage, report.by_reason, report.by_domain = dict(tally.stage), dict(tally.reason), tally.domain
    report.flags, report.scrubbed, report.cluster_sizes = dict(tally.flags), dict(tally.scrubbed), tally.cluster_sizes()
    marker = json.dumps({"inputs": [item.path for item in inputs]}, indent=1).encode()
    sfs.write_bytes_atomic(layout.index_marker(cid), marker)
    shutil.rmtree(work)
    report.seconds["finalise"] = time.monotonic() - t1
    report.seconds["total"] = time.monotonic() - t0
    sfs.write_bytes_atomic(report_path, json.dumps(asdict(report), indent=1, sort_keys=True).encode())
    return report
