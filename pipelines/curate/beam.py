"""The curation pipeline's Beam wiring: thin DoFns and composite transforms around
``pipelines.curate.logic``, ``records`` and ``output``.

One pass over a group of input shards, on any Beam runner:

1. ``ReadChunks``: each piece's record batches (a shard, or rows of one cut where no
   trajectory crosses; ``run.plan_pieces``) -> one chunk per trajectory (partial MinHash
   signature, small step tuples); bad records and shards go to ``quarantine``.
2. Trajectories: chunks grouped by trajectory -> a summary (exact key, signature,
   problem) and its steps. Texts never cross a shuffle.
3. Decisions per trajectory: problems (decontamination, quality), exact duplicates (one
   keeper per key), near duplicates (band keys grouped, candidate pairs confirmed by
   Jaccard, clusters by connected components in Beam); earlier curations' and passes'
   kept trajectories take part with rank 0, so they always win.
4. Marks per step, grouped by (masked state, action): a kept step that repeats an
   earlier kept one (this pass, an earlier pass or curation) gets ``duplicate_of``; steps
   whose next states differ across runs get ``nondeterministic``.
5. ``WriteShards``: decisions grouped by piece -> that piece's curated and rejected
   shards, attributes, index rows and counts (``pipelines.curate.output``), in parallel.

Decisions carry the piece index as ``shard``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np

from pipelines.curate import logic, minhash
from pipelines.curate.config import CurationConfig, NearDedup
from pipelines.curate.reasons import validation_reason
from pipelines.curate.records import (
    THIS_CURATION,
    Decision,
    KeptStep,
    Order,
    Rejection,
    TrajectorySummary,
    batch_chunks,
    trajectory_summary,
)

QUARANTINE = "quarantine"


def _quarantined(shard: int, reason: str, detail: str, tid=None, traj=None, domain=None) -> Decision:
    return Decision(tid, traj, domain, "rejected", shard, "validate", reason, detail)


class ReadChunks(beam.DoFn):
    """(piece index, path or (path, row span)) -> trajectory chunks; bad shards and
    records go to ``quarantine``. With ``done_dir``, an empty file per piece read."""

    def __init__(self, store_uri: str, cfg: CurationConfig, done_dir: str | None = None) -> None:
        self.store_uri, self.cfg, self.done_dir = store_uri, cfg, done_dir

    def setup(self) -> None:
        from pipelines.store import Store

        self.sfs = Store.open(self.store_uri).sfs
        d = self.cfg.decontaminate
        self.index = logic.EvalIndex.from_files(d.eval_sets, d.ngram) if d.enabled and d.eval_sets else None

    def process(self, item: tuple[int, str]) -> Iterator[Any]:
        from pipelines.store.shards import read_shard
        from schemas.errors import ShardError
        from schemas.validate import checked_rows

        shard, where = item
        path, span = where if isinstance(where, tuple) else (where, None)
        try:
            for batch in read_shard(self.sfs, path, span=span):
                good = []
                ids, trajs, domains = (batch.column(c).to_pylist() for c in ("transition_id", "trajectory_id", "domain"))
                for row, t, problems in checked_rows(batch):
                    if problems:
                        reason = "unreadable_record" if t is None else validation_reason(problems[0])
                        yield beam.pvalue.TaggedOutput(
                            QUARANTINE, _quarantined(shard, reason, problems[0], ids[row], trajs[row], domains[row])
                        )
                    else:
                        good.append(t)
                yield from batch_chunks(good, self.cfg, self.index, shard)
        except ShardError as exc:
            yield beam.pvalue.TaggedOutput(QUARANTINE, _quarantined(shard, "unreadable_shard", str(exc)))
        if self.done_dir:  # the driver counts these for its progress bar
            with contextlib.suppress(OSError):
                Path(self.done_dir, f"{shard:06d}").touch()


class ReadIndex(beam.DoFn):
    """Index files of earlier curations and passes -> their rows that can matter here: a
    kept trajectory sharing an exact key or band key with this pass (``kind="traj"``), or
    a kept step sharing a (state, action) key (``kind="steps"``). The keys of this pass
    come as a side input, so the index read stays proportional to what matches."""

    def __init__(self, kind: str, near: NearDedup) -> None:
        self.kind, self.near = kind, near
        self._keys: tuple[int, set] | None = None

    def process(self, path: str, keys: list[str]) -> Iterator[Any]:
        import pyarrow.parquet as pq

        if self._keys is None or self._keys[0] != id(keys):
            self._keys = (id(keys), set(keys))
        wanted = self._keys[1]
        read = beam.metrics.Metrics.counter("index", f"{self.kind}_read")
        matched = beam.metrics.Metrics.counter("index", f"{self.kind}_matched")
        for r in pq.read_table(path).to_pylist():
            read.inc()
            if self.kind == "steps":
                if r["sa"] in wanted:
                    matched.inc()
                    yield r["sa"], ("prev", KeptStep.from_index_row(r))
            elif r["key"] in wanted or self._shares_band(r["sig"], wanted):
                matched.inc()
                yield TrajectorySummary.from_index_row(r)

    def _shares_band(self, sig: bytes, wanted: set[str]) -> bool:
        bands = minhash.band_keys(np.frombuffer(sig, np.uint64), self.near.bands, self.near.rows)
        return any(k in wanted for k in bands)


def _summarise(item, cfg: CurationConfig):
    traj, chunks = item
    chunks = list(chunks)
    yield trajectory_summary(traj, chunks, cfg)
    yield beam.pvalue.TaggedOutput("steps", (traj, [(c.shard, c.domain, s) for c in chunks for s in c.steps]))


class ExactDuplicates(beam.PTransform):
    """(trajectory summaries) -> (kept summaries, rejections): one keeper per key, the earliest."""

    def expand(self, summaries):
        def pick(item):
            _, members = item
            members = sorted(members, key=lambda s: s.order)
            keeper = members[0]
            yield keeper
            for m in members[1:]:
                rejection = Rejection("exact_dedup", "exact_duplicate", f"exact duplicate of {keeper.trajectory}")
                yield beam.pvalue.TaggedOutput("dropped", (m.trajectory, rejection))

        return (
            summaries
            | "KeyByContent" >> beam.Map(lambda s: (s.key, s))
            | "GroupByContent" >> beam.GroupByKey()
            | "PickKeeper" >> beam.FlatMap(pick).with_outputs("dropped", main="kept")
        )


class NearDuplicates(beam.PTransform):
    """(node, MinHash signature bytes) -> (node, cluster label) for every node with a
    confirmed near-duplicate edge; nodes sort by age (an ``Order`` as a plain tuple, so the
    label is the earliest member).

    Band buckets carry node names only; each bucket confirms its own candidate pairs by
    Jaccard (``minhash.similar_pairs``) against the pass's signatures, a side input of
    about 1 KB a trajectory. Only confirmed edges leave a bucket, so memory follows the
    pass's trajectories, not its candidate pairs (which grow with shared bands)."""

    def __init__(self, near: NearDedup) -> None:
        super().__init__()
        self.near = near

    def expand(self, signatures):
        nd = self.near

        def bands(item):
            node, sig = item
            for key in minhash.band_keys(np.frombuffer(sig, dtype=np.uint64), nd.bands, nd.rows):
                yield key, node

        sigs = beam.pvalue.AsDict(signatures)
        edges = (
            signatures
            | "BandKeys" >> beam.FlatMap(bands)
            | "GroupByBand" >> beam.GroupByKey()
            | "ConfirmInBucket" >> beam.FlatMap(_confirm_bucket, sigs, nd.threshold)
            | "UniqueEdges" >> beam.Distinct()
        )
        return edges | "Components" >> ConnectedComponents(nd.max_components_rounds)


def _confirm_bucket(item, sigs: dict[tuple, bytes], threshold: float):
    """One band bucket -> its confirmed near-duplicate edges (most buckets hold one node)."""
    members = sorted(set(item[1]))
    if len(members) > 1:
        matrix = np.stack([np.frombuffer(sigs[m], np.uint64) for m in members])
        yield from minhash.similar_pairs(members, matrix, threshold)


class ConnectedComponents(beam.PTransform):
    """Undirected edges -> (node, smallest node of its component), by ``rounds`` of
    min-label propagation (hash-to-min); enough for the short chains near-duplicates form."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds

    def expand(self, edges):
        both = edges | "BothWays" >> beam.FlatMap(lambda e: [e, (e[1], e[0])])
        labels = both | "StartLabels" >> beam.Map(lambda e: (e[0], min(e)))
        labels = labels | "StartMin" >> beam.CombinePerKey(min)
        for i in range(self.rounds):
            spread = {"edges": both, "label": labels} | f"Join{i}" >> beam.CoGroupByKey() | f"Spread{i}" >> beam.FlatMap(_spread)
            labels = spread | f"Min{i}" >> beam.CombinePerKey(min)
        return labels


def _spread(item):
    node, grouped = item
    labels = list(grouped["label"])
    label = min(labels) if labels else node
    yield node, label
    for neighbour in grouped["edges"]:
        yield neighbour, label


def _node(s: TrajectorySummary) -> tuple[tuple, bytes]:
    """A summary as a near-duplicate node: its order as a plain tuple, which Beam encodes
    deterministically as a key (a NamedTuple key falls back to pickling, with a warning)."""
    return tuple(s.order), s.sig


def _traj_of(node: tuple) -> str:
    return Order(*node).trajectory


def _near_verdict(item):
    node, label = item
    if label != node:
        yield _traj_of(node), Rejection("near_dedup", "near_duplicate", f"near duplicate of {_traj_of(label)}")


def _step_decisions(item):
    """A trajectory's steps with its verdict -> (state-action key, decision) per step, and
    its summary (tagged ``kept``) if the trajectory is kept."""
    traj, grouped = item
    verdicts = sorted(grouped["rejected"])
    clusters = list(grouped["cluster"])
    cluster = clusters[0] if clusters else None
    for steps in grouped["steps"]:
        for shard, domain, s in steps:
            if verdicts:
                stage, reason, detail = verdicts[0]
                d = Decision(s.transition_id, traj, domain, "rejected", shard, stage, reason, detail, cluster=cluster)
            else:
                d = Decision(s.transition_id, traj, domain, "kept", shard, cluster=cluster, flags=s.flags)
            d = d._replace(state_action=s.state_action, transition_key=s.transition_key, order=s.order, words=s.words)
            yield s.state_action, ("cur", d)
    if not verdicts:
        for summary in grouped["summary"]:
            yield beam.pvalue.TaggedOutput("kept", summary)


def decide(summaries, steps, cfg: CurationConfig):
    """Trajectory summaries (this pass's and earlier kept ones) and this pass's steps ->
    ((state-action key, ("cur", decision)) per step, kept summaries of this pass)."""
    split = summaries | "SplitProblems" >> beam.FlatMap(
        lambda s: [beam.pvalue.TaggedOutput("dropped", (s.trajectory, s.problem))] if s.problem else [s]
    ).with_outputs("dropped", main="ok")
    dropped, kept = [split.dropped], split.ok
    if cfg.exact_dedup.enabled and cfg.exact_dedup.trajectories:
        exact = kept | "Exact" >> ExactDuplicates()
        dropped.append(exact.dropped)
        kept = exact.kept
    joined = {
        "steps": steps,
        "summary": summaries
        | "CurrentByTraj" >> beam.FlatMap(lambda s: [(s.trajectory, s)] if s.order.rank == THIS_CURATION else []),
    }
    if cfg.near_dedup.enabled:
        labels = kept | "Nodes" >> beam.Map(_node) | "Near" >> NearDuplicates(cfg.near_dedup)
        dropped.append(labels | "NearVerdicts" >> beam.FlatMap(_near_verdict))
        joined["cluster"] = labels | "ClusterByTraj" >> beam.Map(lambda kv: (_traj_of(kv[0]), _traj_of(kv[1])))
    else:
        joined["cluster"] = steps | "NoClusters" >> beam.FlatMap(lambda _: [])
    joined["rejected"] = dropped | "AllDropped" >> beam.Flatten()
    return (
        joined
        | "JoinDecisions" >> beam.CoGroupByKey()
        | "StepDecisions" >> beam.FlatMap(_step_decisions).with_output_types(Any).with_outputs("kept", main="decisions")
    )


def mark_steps(item, mark_repeats: bool, threshold: float):
    """One (state, action) group: earlier curations' kept steps (``prev``) and this pass's
    decisions (``cur``) -> this pass's decisions with repeat and non-determinism marks."""
    _, members = item
    prev: list[KeptStep] = [r for tag, r in members if tag == "prev"]
    cur: list[Decision] = sorted((d for tag, d in members if tag == "cur"), key=lambda d: (d.order, d.transition_id))
    first: dict[str, str] = {}
    for r in sorted(prev, key=lambda r: (r.order, r.transition_id)):
        first.setdefault(r.transition_key, r.transition_id)
    everyone = [np.frombuffer(r.words, np.uint32) for r in prev] + [np.frombuffer(d.words, np.uint32) for d in cur]
    flagged = logic.nondeterministic(everyone, threshold) if len(everyone) > 1 else set()
    for i, d in enumerate(cur):
        if d.kept:
            keeper = first.setdefault(d.transition_key, d.transition_id)
            if mark_repeats and keeper != d.transition_id:
                d = d._replace(duplicate_of=keeper)
            if len(prev) + i in flagged:
                d = d._replace(flags=(*d.flags, "nondeterministic"))
        else:
            d = d._replace(words=None)  # only kept steps go into the index
        yield d


def build(
    pipeline,
    shard_paths: list[str] | dict[int, str],
    store_uri: str,
    cfg: CurationConfig,
    previous: dict[str, list[str]] | None = None,
    done_dir: str | None = None,
):
    """The pass-1 graph: shard paths -> (one ``Decision`` per transition, quarantine
    included; ``TrajectorySummary`` of the trajectories this pass keeps). ``previous`` names
    the index files of earlier curations and passes (``{"traj": [...], "steps": [...]}``);
    ``done_dir`` gets a file per piece read (the driver's progress)."""
    items = sorted(shard_paths.items() if isinstance(shard_paths, dict) else enumerate(shard_paths))
    read = (
        pipeline
        | "ShardPaths" >> beam.Create(items)
        | "Reshuffle" >> beam.Reshuffle()
        | "Read" >> beam.ParDo(ReadChunks(store_uri, cfg, done_dir)).with_outputs(QUARANTINE, main="chunks")
    )
    trajectories = (
        read.chunks
        | "ByTrajectory" >> beam.Map(lambda c: (c.trajectory, c))
        | "GroupTrajectory" >> beam.GroupByKey()
        | "Summarise" >> beam.FlatMap(_summarise, cfg).with_output_types(Any).with_outputs("steps", main="summaries")
    )
    summaries = trajectories.summaries
    previous = previous or {}
    if previous.get("traj"):
        nd = cfg.near_dedup
        keys = summaries | "CurrentKeys" >> beam.FlatMap(
            lambda s: [s.key, *minhash.band_keys(np.frombuffer(s.sig, np.uint64), nd.bands, nd.rows)]
        )
        earlier = (
            pipeline
            | "PreviousTraj" >> beam.Create(previous["traj"])
            | "ReadPreviousTraj" >> beam.ParDo(ReadIndex("traj", nd), beam.pvalue.AsList(keys))
        )
        summaries = (summaries, earlier) | "WithPrevious" >> beam.Flatten()
    decided = decide(summaries, trajectories.steps, cfg)
    groups = [decided.decisions]
    if previous.get("steps"):
        sa_keys = decided.decisions | "CurrentSA" >> beam.Map(lambda kv: kv[0])
        groups.append(
            pipeline
            | "PreviousSteps" >> beam.Create(previous["steps"])
            | "ReadPreviousSteps" >> beam.ParDo(ReadIndex("steps", cfg.near_dedup), beam.pvalue.AsList(sa_keys))
        )
    mark_repeats = cfg.exact_dedup.enabled and cfg.exact_dedup.transitions
    marked = (
        groups
        | "WithPreviousSteps" >> beam.Flatten()
        | "GroupStateAction" >> beam.GroupByKey()
        | "MarkSteps" >> beam.FlatMap(mark_steps, mark_repeats, cfg.quality.nondeterminism_jaccard)
    )
    return (marked, read[QUARANTINE]) | "WithQuarantine" >> beam.Flatten(), decided.kept


class WriteShard(beam.DoFn):
    """(piece index, its decisions and kept summaries) -> that piece's outputs
    (``pipelines.curate.output.write_shard``); yields the piece index when done."""

    def __init__(self, store_uri: str, paths: dict[int, tuple[str, Any]], work: str, cid: str, cfg: CurationConfig) -> None:
        self.store_uri, self.paths, self.work, self.cid, self.cfg = store_uri, paths, work, cid, cfg

    def setup(self) -> None:
        from pipelines.store import Store

        self.store = Store.open(self.store_uri)

    def process(self, item: tuple[int, dict[str, Any]]) -> Iterator[int]:
        from pipelines.curate.output import write_shard

        shard, grouped = item
        path, span = self.paths[shard]
        decisions, kept = list(grouped["decisions"]), list(grouped["kept"])
        write_shard(self.store, path, shard, self.work, self.cid, self.cfg, decisions, kept, span)
        yield shard


class WriteShards(beam.PTransform):
    """Decisions and kept summaries grouped by piece -> that piece's outputs (``WriteShard``)."""

    def __init__(self, store_uri: str, paths: dict[int, tuple[str, Any]], work: str, cid: str, cfg: CurationConfig) -> None:
        super().__init__()
        self.write = WriteShard(store_uri, paths, work, cid, cfg)

    def expand(self, pcolls):
        decisions, kept = pcolls
        return (
            {
                "decisions": decisions | "DecisionsByShard" >> beam.Map(lambda d: (d.shard, d)),
                "kept": kept | "KeptByShard" >> beam.Map(lambda s: (s.shard, s)),
            }
            | "GroupByShard" >> beam.CoGroupByKey()
            | "WriteShard" >> beam.ParDo(self.write)
        )
