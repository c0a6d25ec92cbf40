"""The curation pipeline's Beam wiring: thin DoFns and composite transforms around
``pipelines.curate.logic``.

Pass 1 (this module, on any Beam runner) turns every raw transition into a small record
(ids, keys, MinHash signatures, flags) and decides, per transition, ``kept`` or
``rejected`` with the stage and reason: validation, quality, decontamination, exact and
near-duplicate trajectories (band keys grouped in Beam, candidate pairs confirmed by
Jaccard, clusters by connected components computed in Beam), and the marks on kept
transitions (a repeated step, non-determinism). Texts never cross a shuffle: a
trajectory's signature is the element-wise minimum of its steps' signatures, which is the
MinHash of the union of their shingles.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np

from pipelines.curate import logic
from pipelines.curate.config import CurationConfig

QUARANTINE = "quarantine"


# -- per transition ---------------------------------------------------------------------------
def transition_record(t, cfg: CurationConfig, index: logic.EvalIndex | None, shard: int = 0) -> dict[str, Any]:
    """The small record of one transition that the rest of the pipeline works on."""
    nd = cfg.near_dedup
    words = t.domain in nd.word_domains
    n = nd.word_ngram if words else nd.char_ngram
    masked_state, masked_next = logic.masked(t.state), logic.masked(t.next_state)
    text = t.action.canonical + "\n" + masked_next
    if t.step == 0:
        text = masked_state + "\n" + text
    sig = logic.signature(logic.shingle_hashes(text, words=words, n=n), nd)
    quality = cfg.quality
    flags = logic.transition_flags(t, quality) if quality.enabled else []
    contamination = None
    if index is not None:
        contamination = index.contamination([t]) if t.step == 0 else _text_contamination(t, index)
    return {
        "tid": t.transition_id,
        "traj": t.trajectory_id,
        "step": t.step,
        "domain": t.domain,
        "order": f"1|{t.provenance.collected_at.isoformat()}|{t.trajectory_id}",
        "shard": shard,
        "tkey": logic.digest(masked_state, t.action.canonical, masked_next),  # = logic.transition_key(t)
        "sa": logic.digest(masked_state, t.action.canonical),
        "next_words": logic.word_signature(masked_next).tobytes(),
        "sig": sig.tobytes(),
        "summary": logic.StepSummary(
            t.action.canonical, logic.digest(masked_next), t.next_state.truncated, t.action_error is not None
        ),
        "flags": flags,
        "contamination": contamination,
    }


def _text_contamination(t, index: logic.EvalIndex) -> str | None:
    for g in logic.word_ngrams(t.next_state.text, index.n):
        if g in index.ngrams:
            return f"{index.n}-gram overlap with {index.ngrams[g]}"
    return None


class ReadTransitions(beam.DoFn):
    """Shard path -> transition records; bad shards and bad records go to ``quarantine``."""

    def __init__(self, store: str, config: dict[str, Any]) -> None:
        self.store, self.config = store, config

    def setup(self) -> None:
        from pipelines.store.fs import StoreFS

        self.cfg = CurationConfig.model_validate(self.config)
        self.sfs = StoreFS.open(self.store)
        d = self.cfg.decontaminate
        self.index = logic.EvalIndex.from_files(d.eval_sets, d.ngram) if d.enabled and d.eval_sets else None

    def process(self, item: tuple[int, str]) -> Iterator[Any]:
        shard, path = item
        from pipelines.store.shards import read_shard
        from schemas.arrow import from_record_batch
        from schemas.errors import ShardError
        from schemas.validate import batch_problems

        try:
            for batch in read_shard(self.sfs, path):
                bad: dict[int, str] = {}
                for row, problem in batch_problems(batch):
                    bad.setdefault(row, problem)
                ids = batch.column("transition_id").to_pylist()
                trajs = batch.column("trajectory_id").to_pylist()
                domains = batch.column("domain").to_pylist()
                for row, problem in sorted(bad.items()):
                    yield beam.pvalue.TaggedOutput(QUARANTINE, _decision(
                        ids[row], trajs[row], domains[row], "rejected", "validate", problem, shard=shard))  # fmt: skip
                good = [i for i in range(batch.num_rows) if i not in bad]
                if len(good) < batch.num_rows:
                    batch = batch.take(good)
                for t in from_record_batch(batch):
                    yield transition_record(t, self.cfg, self.index, shard)
        except ShardError as exc:
            yield beam.pvalue.TaggedOutput(QUARANTINE, _decision(None, None, None, "rejected", "validate", str(exc), shard=shard))


def _decision(tid, traj, domain, status, stage=None, reason=None, **extra) -> dict[str, Any]:
    return {"tid": tid, "traj": traj, "domain": domain, "status": status, "stage": stage, "reason": reason,
            "duplicate_of": None, "cluster": None, "flags": [], **extra}  # fmt: skip


# -- per trajectory ---------------------------------------------------------------------------
def summarise_trajectory(item: tuple[str, Iterable[dict]], cfg: dict[str, Any]) -> dict[str, Any]:
    """Steps of one trajectory -> its keys, signature, and the reason to drop it, if any."""
    traj, steps = item
    steps = sorted(steps, key=lambda r: r["step"])
    config = CurationConfig.model_validate(cfg)
    q = config.quality
    sig = np.frombuffer(steps[0]["sig"], dtype=np.uint64)
    for r in steps[1:]:
        sig = np.minimum(sig, np.frombuffer(r["sig"], dtype=np.uint64))
    problem = None
    if config.decontaminate.enabled:
        problem = next((("decontaminate", r["contamination"]) for r in steps if r["contamination"]), None)
    if problem is None and q.enabled:
        reason = logic.trajectory_problem([r["summary"] for r in steps], q)
        problem = ("quality", reason) if reason else None
    return {
        "traj": traj,
        "domain": steps[0]["domain"],
        "order": min(r["order"] for r in steps),
        "key": logic.digest(*(r["tkey"] for r in steps)),
        "sig": sig.tobytes(),
        "problem": problem,
    }


class ExactDuplicates(beam.PTransform):
    """(trajectory summaries) -> (kept summaries, rejections): one keeper per key, the earliest."""

    def expand(self, summaries):
        def pick(item):
            _, members = item
            members = sorted(members, key=lambda s: s["order"])
            keeper = members[0]
            yield keeper
            for m in members[1:]:
                yield beam.pvalue.TaggedOutput("dropped", (m["traj"], ("exact_dedup", f"exact duplicate of {keeper['traj']}")))

        return (
            summaries
            | "KeyByContent" >> beam.Map(lambda s: (s["key"], s))
            | "GroupByContent" >> beam.GroupByKey()
            | "PickKeeper" >> beam.FlatMap(pick).with_outputs("dropped", main="kept")
        )


class NearDuplicates(beam.PTransform):
    """(trajectory summaries) -> near-duplicate edges -> components -> rejections of all but
    the representative (the earliest) of each cluster."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg

    def expand(self, summaries):
        nd = CurationConfig.model_validate(self.cfg).near_dedup
        rounds = nd.max_components_rounds

        def bands(s):
            sig = np.frombuffer(s["sig"], dtype=np.uint64)
            for key in logic.band_keys(sig, nd):
                yield key, s["order"]

        def pairs(item):
            _, members = item
            members = sorted(set(members))
            for i in range(len(members)):
                for j in range(i + 1, len(members)):
                    yield members[i], members[j]

        def confirm(item):
            # the pair's two signatures meet here: (first, [(second, sig)...]) joined with first's sig
            node, grouped = item
            sigs = list(grouped["sig"])
            if not sigs:
                return
            mine = np.frombuffer(sigs[0], np.uint64)
            for other, other_sig in set(grouped["pairs"]):
                if logic.estimated_jaccard(mine, np.frombuffer(other_sig, np.uint64)) >= nd.threshold:
                    yield node, other

        sig_by_node = summaries | "SigByNode" >> beam.Map(lambda s: (s["order"], s["sig"]))
        candidates = (
            summaries
            | "BandKeys" >> beam.FlatMap(bands)
            | "GroupByBand" >> beam.GroupByKey()
            | "CandidatePairs" >> beam.FlatMap(pairs)
            | "UniquePairs" >> beam.Distinct()
        )
        # attach the second node's signature, then meet the first node's
        with_second = (
            {"pairs": candidates | "BySecond" >> beam.Map(lambda p: (p[1], p[0])), "sig": sig_by_node}
            | "JoinSecond" >> beam.CoGroupByKey()
            | "SecondSig"
            >> beam.FlatMap(
                lambda item: [(first, (item[0], sig)) for sig in list(item[1]["sig"])[:1] for first in item[1]["pairs"]]
            )
        )
        edges = (
            {"pairs": with_second, "sig": sig_by_node}
            | "JoinFirst" >> beam.CoGroupByKey()
            | "ConfirmByJaccard" >> beam.FlatMap(confirm)
        )
        return edges | "Components" >> ConnectedComponents(rounds)


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


def decide(summaries, records, cfg: dict[str, Any]):
    """All decisions: one dict per transition (see ``_decision``)."""
    config = CurationConfig.model_validate(cfg)
    dropped = []
    clean = summaries | "SplitProblems" >> beam.FlatMap(
        lambda s: [beam.pvalue.TaggedOutput("dropped", (s["traj"], s["problem"]))] if s["problem"] else [s]
    ).with_outputs("dropped", main="ok")
    dropped.append(clean.dropped)
    kept = clean.ok
    if config.exact_dedup.enabled and config.exact_dedup.trajectories:
        exact = kept | "Exact" >> ExactDuplicates()
        dropped.append(exact.dropped)
        kept = exact.kept
    if config.near_dedup.enabled:
        labels = kept | "Near" >> NearDuplicates(cfg)
        node_traj = kept | "OrderToTraj" >> beam.Map(lambda s: (s["order"], s["traj"]))
        near = (
            {"label": labels, "traj": node_traj}
            | "JoinLabels" >> beam.CoGroupByKey()
            | "NearVerdicts" >> beam.FlatMap(_near_verdict)
        )
        dropped.append(near)
    rejected = dropped | "AllDropped" >> beam.Flatten()
    cluster_of = (labels | "LabelToTraj" >> beam.Map(lambda kv: (kv[0], kv[1]))) if config.near_dedup.enabled else None
    by_traj = records | "RecordsByTraj" >> beam.Map(lambda r: (r["traj"], r))
    joined = {"records": by_traj, "rejected": rejected}
    if cluster_of is not None:
        cluster_by_traj = (
            {"label": cluster_of, "traj": node_traj}
            | "ClusterJoin" >> beam.CoGroupByKey()
            | "ClusterByTraj"
            >> beam.FlatMap(
                lambda item: [(t, lbl.split("|", 2)[2]) for lbl in list(item[1]["label"])[:1] for t in item[1]["traj"]]
            )
        )
        joined["cluster"] = cluster_by_traj
    steps = joined | "JoinDecisions" >> beam.CoGroupByKey() | "StepDecisions" >> beam.FlatMap(_step_decisions)
    return steps | "MarkRepeats" >> MarkTransitions(cfg)


def _near_verdict(item):
    node, grouped = item
    labels, trajs = list(grouped["label"]), list(grouped["traj"])
    if labels and trajs and labels[0] != node:
        rep = labels[0].split("|", 2)[2]
        yield trajs[0], ("near_dedup", f"near duplicate of {rep}")


def _step_decisions(item):
    traj, grouped = item
    verdicts = sorted(grouped["rejected"])
    clusters = list(grouped.get("cluster") or [])
    cluster = clusters[0] if clusters else None
    for r in grouped["records"]:
        if verdicts:
            stage, reason = verdicts[0]
            d = _decision(r["tid"], traj, r["domain"], "rejected", stage, reason, cluster=cluster)
        else:
            d = _decision(r["tid"], traj, r["domain"], "kept", cluster=cluster, flags=list(r["flags"]))
        d["_tkey"], d["_sa"], d["_order"], d["_words"] = r["tkey"], r["sa"], r["order"], r["next_words"]
        d["shard"] = r["shard"]
        yield d


class MarkTransitions(beam.PTransform):
    """Kept steps that repeat an earlier kept step get ``duplicate_of``; steps whose
    (state, action) led to very different next states across runs get ``nondeterministic``."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg

    def expand(self, decisions):
        config = CurationConfig.model_validate(self.cfg)
        mark_repeats = config.exact_dedup.enabled and config.exact_dedup.transitions
        threshold = config.quality.nondeterminism_jaccard

        def repeats(item):
            _, members = item
            members = sorted(members, key=lambda d: (d["_order"], d["tid"]))
            kept = [d for d in members if d["status"] == "kept"]
            first = kept[0]["tid"] if kept and mark_repeats else None
            for d in members:
                if first and d["status"] == "kept" and d["tid"] != first:
                    d = {**d, "duplicate_of": first}
                yield d

        def nondeterminism(item):
            _, members = item
            members = list(members)
            flagged = logic.nondeterministic([np.frombuffer(d["_words"], dtype=np.uint64) for d in members], threshold)
            for i, d in enumerate(members):
                out = {k: v for k, v in d.items() if not k.startswith("_")}
                if i in flagged and d["status"] == "kept":
                    out["flags"] = [*out["flags"], "nondeterministic"]
                yield out

        return (
            decisions
            | "ByStepKey" >> beam.Map(lambda d: (d["_tkey"], d))
            | "GroupSteps" >> beam.GroupByKey()
            | "Repeats" >> beam.FlatMap(repeats)
            | "ByStateAction" >> beam.Map(lambda d: (d["_sa"], d))
            | "GroupStateAction" >> beam.GroupByKey()
            | "Nondeterminism" >> beam.FlatMap(nondeterminism)
        )


def build(pipeline, shard_paths: list[str] | dict[int, str], store: str, cfg: dict[str, Any],
          previous: list[dict] | None = None):  # fmt: skip
    """The whole pass-1 graph: shard paths -> (one decision per transition and quarantine,
    summaries of the trajectories kept). ``previous`` are kept trajectories of earlier
    curations (rank 0: they always win, and are never output again)."""
    read = (
        pipeline
        | "ShardPaths" >> beam.Create(sorted(shard_paths.items() if isinstance(shard_paths, dict) else enumerate(shard_paths)))
        | "Reshuffle" >> beam.Reshuffle()
        | "Read" >> beam.ParDo(ReadTransitions(store, cfg)).with_outputs(QUARANTINE, main="records")
    )
    summaries = (
        read.records
        | "ByTrajectory" >> beam.Map(lambda r: (r["traj"], r))
        | "GroupTrajectory" >> beam.GroupByKey()
        | "Summarise" >> beam.Map(summarise_trajectory, cfg)
    )
    if previous:
        earlier = pipeline | "Previous" >> beam.Create(previous)
        summaries = (summaries, earlier) | "WithPrevious" >> beam.Flatten()
    decisions = decide(summaries, read.records, cfg)
    kept_ids = decisions | "KeptTraj" >> beam.FlatMap(lambda d: [(d["traj"], None)] if d["status"] == "kept" else [])
    kept_summaries = (
        {
            "kept": kept_ids | "OnePerTraj" >> beam.Distinct(),
            "summary": summaries | "SumByTraj" >> beam.Map(lambda s: (s["traj"], s)),
        }
        | "JoinKept" >> beam.CoGroupByKey()
        | "KeptSummaries" >> beam.FlatMap(lambda item: list(item[1]["summary"])[:1] if list(item[1]["kept"]) else [])
    )
    return (decisions, read[QUARANTINE]) | "WithQuarantine" >> beam.Flatten(), kept_summaries


def to_json(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True)


class WriteDecisionFiles(beam.PTransform):
    """One JSON-lines file of decisions per input shard (``NNNNNN.jsonl``, sorted), so the
    write pass holds one shard's decisions at a time."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def expand(self, decisions):
        folder = self.folder

        def write(item):
            from pipelines.store.fs import StoreFS

            shard, members = item
            lines = sorted(to_json(d) for d in members)
            sfs = StoreFS.open(folder)
            sfs.write_bytes_atomic(sfs.join(f"{shard:06d}.jsonl"), ("\n".join(lines) + "\n").encode())
            yield shard

        return (
            decisions
            | "ByShard" >> beam.Map(lambda d: (d["shard"], d))
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShardDecisions" >> beam.FlatMap(write)
        )
