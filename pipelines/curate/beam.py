"""The curation pipeline's Beam wiring: thin DoFns and composite transforms around
``pipelines.curate.logic``, ``records`` and ``output``.

One pass over a group of input shards, on any Beam runner:

1. ``ReadChunks``: each piece's record batches (a shard, or rows of one cut where no
   trajectory crosses; ``run.plan_pieces``) -> one chunk per trajectory (partial MinHash
   signature, small step tuples); bad records and shards go to ``quarantine``.
2. Trajectories: chunks grouped by trajectory -> a summary (exact key, signature,
   problem) and its steps. Texts never cross a shuffle.
3. Decisions per trajectory: problems (decontamination, quality), exact duplicates (one
   keeper per key), near duplicates (``NearDuplicates``: candidate edges
   per share of the LSH bands, groups in one worker, greedy exact assignment per group); earlier curations' and passes'
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

from pipelines.curate import decide as plain
from pipelines.curate import neardup
from pipelines.curate.config import CurationConfig, NearDedup
from pipelines.curate.records import THIS_CURATION, Decision

QUARANTINE = "quarantine"


class ReadChunks(beam.DoFn):
    """(piece index, path or (path, row span)) -> trajectory chunks; bad shards and
    records go to ``quarantine`` (``decide.read_piece``). With ``done_dir``, an empty file
    per piece read."""

    def __init__(self, store_uri: str, cfg: CurationConfig, done_dir: str | None = None) -> None:
        self.store_uri, self.cfg, self.done_dir = store_uri, cfg, done_dir

    def setup(self) -> None:
        from pipelines.store import Store

        self.sfs = Store.open(self.store_uri).sfs
        self.index = plain.eval_index(self.cfg)

    def process(self, item: tuple[int, Any]) -> Iterator[Any]:  # where: a path, or (path, row span or None)
        shard, where = item
        for out in plain.read_piece(self.sfs, shard, where, self.cfg, self.index):
            yield beam.pvalue.TaggedOutput(QUARANTINE, out) if isinstance(out, Decision) else out
        if self.done_dir:  # the driver counts these for its progress bar
            with contextlib.suppress(OSError):
                Path(self.done_dir, f"{shard:06d}").touch()


class ReadIndex(beam.DoFn):
    """Index files of earlier curations and passes -> their rows that can matter here
    (``decide.index_matches``). The keys of this pass come as a side input, so the index
    read stays proportional to what matches."""

    def __init__(self, kind: str, near: NearDedup) -> None:
        self.kind, self.near = kind, near
        self._keys: tuple[int, set] | None = None

    def process(self, path: str, keys: list[str]) -> Iterator[Any]:
        if self._keys is None or self._keys[0] != id(keys):
            self._keys = (id(keys), set(keys))
        n, found = plain.index_matches(path, self.kind, self._keys[1], self.near)
        beam.metrics.Metrics.counter("index", f"{self.kind}_read").inc(n)
        if found:
            beam.metrics.Metrics.counter("index", f"{self.kind}_matched").inc(len(found))
        yield from found


def _summarise(item, cfg: CurationConfig):
    summary, steps = plain.summarise(item[0], item[1], cfg)
    yield summary
    yield beam.pvalue.TaggedOutput("steps", (item[0], steps))


class ExactDuplicates(beam.PTransform):
    """(trajectory summaries) -> (kept summaries, rejections): one keeper per key, the earliest."""

    def expand(self, summaries):
        def pick(item):
            keeper, dropped = plain.pick_keeper(item[1])
            yield keeper
            for d in dropped:
                yield beam.pvalue.TaggedOutput("dropped", d)

        return (
            summaries
            | "KeyByContent" >> beam.Map(lambda s: (s.key, s))
            | "GroupByContent" >> beam.GroupByKey()
            | "PickKeeper" >> beam.FlatMap(pick).with_outputs("dropped", main="kept")
        )


# Nodes per batch, fixed: a batch's id is its least key, and the batch's two outputs (its
# signatures, its nodes) meet again by that id, so a bundle computed again (a lost worker's)
# must batch alike; BatchElements sizes batches by timings unless the bounds are equal.
NODE_BATCH = 2048


class NearDuplicates(beam.PTransform):
    """(key, ``neardup.Node``) -> a ``neardup.Verdict`` per dropped node, as
    ``neardup.near_duplicates`` decides in one process: the nodes in batches, then
    ``NearDuplicateBatches``."""

    def __init__(self, near: NearDedup) -> None:
        super().__init__()
        self.near = near

    def expand(self, nodes):
        return (
            nodes
            | "Batch" >> beam.BatchElements(min_batch_size=NODE_BATCH, max_batch_size=NODE_BATCH)
            | "Decide" >> NearDuplicateBatches(self.near)
        )


BAND_GROUPS = 2  # workers that find candidate edges, each for a share of the bands


class NearDuplicateBatches(beam.PTransform):
    """Batches (lists) of (key, ``neardup.Node``) -> a ``neardup.Verdict`` per dropped node.
    Each batch's signatures go, as one matrix, to ``BAND_GROUPS`` workers that find the
    candidate edges of their share of the bands (``neardup.candidate_edges``, vectorised
    over a whole band); the edges, as index arrays, meet in one worker that forms the
    groups (``neardup.groups``) and tells each batch its members' groups; each group's
    nodes (their shingle sets, signatures left behind) meet its edges in one worker for the
    greedy exact assignment. Elements are batches, shares and groups, never nodes or
    edges one by one, except a group's members on their way to it."""

    def __init__(self, near: NearDedup) -> None:
        super().__init__()
        self.near = near

    def expand(self, batches):
        nd = self.near
        shares = [list(range(nd.bands))[g::BAND_GROUPS] for g in range(min(BAND_GROUPS, nd.bands))]
        split = batches | "ToBandShares" >> beam.FlatMap(_to_shares, len(shares)).with_outputs("nodes", main="shares")
        groups = (
            split.shares
            | "GroupByShare" >> beam.GroupByKey()
            | "Candidates" >> beam.MapTuple(lambda g, pieces: _candidates(pieces, shares[g], nd))
            | "AllCandidates" >> beam.combiners.ToList()
            | "Groups" >> beam.FlatMap(_groups, nd.max_components_rounds).with_outputs("labels", main="groups")
        )
        members = (
            {"nodes": split.nodes, "labels": groups.labels}
            | "JoinLabels" >> beam.CoGroupByKey()
            | "GroupMembers" >> beam.FlatMap(_members)
        )
        return (
            {"members": members, "group": groups.groups}
            | "JoinGroups" >> beam.CoGroupByKey()
            | "Assign" >> beam.FlatMap(lambda item: neardup.assign(item[1]["group"][0], dict(item[1]["members"]), nd.threshold))
        )


def _to_shares(batch, shares: int):
    """A batch -> (share, (batch id, keys, signatures)) for each share of the bands and,
    tagged ``nodes``, (batch id, the nodes without the signatures the shingle sets make
    needless), which wait for their groups."""
    if not batch:
        return
    keys = [k for k, _ in batch]
    bid, sigs = min(keys), neardup.signature_matrix(batch)
    for g in range(shares):
        yield g, (bid, keys, sigs)
    slim = [(k, n if n.shingles is None else n._replace(sig=b"")) for k, n in batch]
    yield beam.pvalue.TaggedOutput("nodes", (bid, slim))


def _candidates(pieces, bands: list[int], nd: NearDedup) -> tuple[list, list, np.ndarray]:
    """Batches' (batch id, keys, signatures) -> (the keys with an edge, sorted; their batch
    ids; the candidate edges of ``bands`` as index pairs into them)."""
    pieces = list(pieces)
    keys = [k for _, ks, _ in pieces for k in ks]
    bids = [b for b, ks, _ in pieces for _ in ks]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    sigs = np.concatenate([m for _, _, m in pieces])[order]
    edges = neardup.candidate_edges(sigs, bands, nd)
    ends, local = np.unique(edges, return_inverse=True)
    picked = [order[i] for i in ends.tolist()]
    return [keys[i] for i in picked], [bids[i] for i in picked], local.reshape(edges.shape)


def _groups(found, rounds: int):
    """Every share's candidates -> (label, ``neardup.Group``) and, tagged ``labels``,
    (batch id, [(key, label) ...]) for the batches with members: one worker (edges are few
    next to the nodes)."""
    batch_of = {k: b for ks, bs, _ in found for k, b in zip(ks, bs, strict=True)}
    keys = sorted(batch_of)
    index = {k: i for i, k in enumerate(keys)}
    edges = [np.array([index[k] for k in ks], np.int64)[local] for ks, _, local in found if len(local)]
    labels: dict = {}
    for group in neardup.groups(keys, np.concatenate(edges) if edges else np.empty((0, 2), np.int64), rounds):
        label = group.keys[0]
        yield label, group
        for key in group.keys:
            labels.setdefault(batch_of[key], []).append((key, label))
    for bid, pairs in labels.items():
        yield beam.pvalue.TaggedOutput("labels", (bid, pairs))


def _members(item):
    """(batch id, {nodes, labels}) -> (label, (key, node)) for each of the batch's members."""
    _, joined = item
    labels = {k: label for pairs in joined["labels"] for k, label in pairs}
    for nodes in joined["nodes"]:
        for key, node in nodes:
            if key in labels:
                yield labels[key], (key, node)


def _step_decisions(item):
    traj, g = item
    decisions, kept = plain.step_decisions(traj, g["rejected"], g["cluster"], g["steps"], g["summary"])
    yield from decisions
    for summary in kept:
        yield beam.pvalue.TaggedOutput("kept", summary)


def decide(summaries, steps, cfg: CurationConfig):
    """Trajectory summaries (this pass's and earlier kept ones) and this pass's steps ->
    ((state-action key, ("cur", decision)) per step, kept summaries of this pass); the
    same as ``decide.decide`` in one process."""
    split = summaries | "SplitProblems" >> beam.FlatMap(
        lambda s: [beam.pvalue.TaggedOutput("dropped", (s.trajectory, s.problem))] if s.problem else [s]
    ).with_outputs("dropped", main="ok")
    kept, final = split.ok, []
    copies = None
    if cfg.exact_dedup.enabled and cfg.exact_dedup.trajectories:
        exact = kept | "Exact" >> ExactDuplicates()
        kept, copies = exact.kept, exact.dropped
    if cfg.near_dedup.enabled:
        near = (
            kept
            | "Nodes" >> beam.Map(lambda s: s.node())
            | "Near" >> NearDuplicates(cfg.near_dedup)
            | "NearRejections" >> beam.Map(plain.near_rejection)
        )
        final.append(near)
        if copies is not None:  # an exact copy of a keeper dropped as a near duplicate names the keeper's partner
            copies = (
                {"copies": copies | "CopiesByKeeper" >> beam.Map(lambda c: (c[1].partner, c)), "near": near}
                | "KeeperVerdicts" >> beam.CoGroupByKey()
                | "SettleExact" >> beam.FlatMap(lambda item: plain.settle_exact(item[1]["copies"], item[1]["near"]))
            )
    if copies is not None:
        final.append(copies)
    duplicates = final | "AllDuplicates" >> beam.Flatten()
    joined = {
        "steps": steps,
        "summary": summaries
        | "CurrentByTraj" >> beam.FlatMap(lambda s: [(s.trajectory, s)] if s.order.rank == THIS_CURATION else []),
        "cluster": duplicates | "ClusterLabels" >> beam.FlatMap(plain.cluster_labels) | "UniqueLabels" >> beam.Distinct(),
        "rejected": (split.dropped, duplicates) | "AllDropped" >> beam.Flatten(),
    }
    return (
        joined
        | "JoinDecisions" >> beam.CoGroupByKey()
        | "StepDecisions" >> beam.FlatMap(_step_decisions).with_output_types(Any).with_outputs("kept", main="decisions")
    )


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
        keys = summaries | "CurrentKeys" >> beam.FlatMap(plain.current_keys, nd)
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
        | "MarkSteps" >> beam.FlatMap(plain.mark_steps, mark_repeats, cfg.quality.nondeterminism_jaccard)
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


def near_duplicates_on_beam(
    docs: list[tuple[str, str]], nd: NearDedup, domain: str, beam_args: list[str] | None = None
) -> list[neardup.Verdict]:
    """``documents.dedup_documents`` on Beam: the documents go to workers as JSONL files of
    about 2,000 each (texts never enter the pipeline graph), each file's documents become
    a batch of nodes there (``neardup.document_nodes``), and ``NearDuplicateBatches`` decides."""
    import json
    import tempfile

    from pipelines.beam_options import beam_options

    per_file = 2000
    with tempfile.TemporaryDirectory(prefix="trajforge-neardup-") as tmp:
        files = []
        for start in range(0, len(docs), per_file):
            path = Path(tmp, f"docs-{start:012d}.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                for doc_id, text in docs[start : start + per_file]:
                    f.write(json.dumps([doc_id, text]) + "\n")
            files.append((start, str(path)))

        def nodes(item):
            start, path = item
            with open(path, encoding="utf-8") as f:
                batch = [tuple(json.loads(line)) for line in f]
            return neardup.document_nodes(batch, nd, start, domain)

        out = Path(tmp, "verdicts")
        with beam.Pipeline(options=beam_options(beam_args)) as p:
            _ = (
                p
                | "Files" >> beam.Create(files)
                | "Reshuffle" >> beam.Reshuffle()
                | "DocumentNodes" >> beam.Map(nodes)
                | "Near" >> NearDuplicateBatches(nd)
                | "AsJson" >> beam.Map(lambda v: json.dumps([list(v.key), list(v.partner), v.similarity, v.partner_last_step]))
                | "Write" >> beam.io.WriteToText(str(out))
            )
        verdicts = []
        for part in sorted(Path(tmp).glob("verdicts*")):
            for line in part.read_text().splitlines():
                key, partner, similarity, last = json.loads(line)
                verdicts.append(neardup.Verdict(tuple(key), tuple(partner), similarity, last))
    return sorted(verdicts)
