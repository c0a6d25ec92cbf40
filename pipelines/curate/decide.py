"""One curation pass as plain functions, and the pass run in this process (no Beam).

``pipelines.curate.beam`` wires these functions into Beam transforms; ``run_pass_local``
calls the same functions in one process, grouping with dicts where Beam shuffles, so a
small curation (``neardup.LOCAL_MAX`` transitions or fewer) does not pay Beam's start-up
and decides exactly as Beam would (a test compares the outputs byte for byte). Every
function here is deterministic and independent of the order its inputs arrive in.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.curate import logic, minhash, neardup
from pipelines.curate.config import CurationConfig, NearDedup
from pipelines.curate.reasons import validation_reason
from pipelines.curate.records import (
    THIS_CURATION,
    Chunk,
    Decision,
    KeptStep,
    Order,
    Rejection,
    TrajectorySummary,
    batch_chunks,
    trajectory_summary,
)

StepItem = tuple[int, str, Any]  # (piece index, domain, records.Step)


def quarantined(shard: int, reason: str, detail: str, tid=None, traj=None, domain=None) -> Decision:
    return Decision(tid, traj, domain, "rejected", shard, "validate", reason, detail)


def eval_index(cfg: CurationConfig) -> logic.EvalIndex | None:
    d = cfg.decontaminate
    return logic.EvalIndex.from_files(d.eval_sets, d.ngram) if d.enabled and d.eval_sets else None


def read_piece(sfs, shard: int, where, cfg: CurationConfig, index: logic.EvalIndex | None) -> Iterator[Chunk | Decision]:
    """A piece (a shard path, or (path, row span)) -> its trajectory chunks, and a
    quarantine ``Decision`` for each bad record, or one for an unreadable shard."""
    from pipelines.store.shards import read_shard
    from schemas.errors import ShardError
    from schemas.validate import checked_rows

    path, span = where if isinstance(where, tuple) else (where, None)
    try:
        for batch in read_shard(sfs, path, span=span):
            good = []
            ids, trajs, domains = (batch.column(c).to_pylist() for c in ("transition_id", "trajectory_id", "domain"))
            for row, t, problems in checked_rows(batch):
                if problems:
                    reason = "unreadable_record" if t is None else validation_reason(problems[0])
                    yield quarantined(shard, reason, problems[0], ids[row], trajs[row], domains[row])
                else:
                    good.append(t)
            yield from batch_chunks(good, cfg, index, shard)
    except ShardError as exc:
        yield quarantined(shard, "unreadable_shard", str(exc))


def summarise(traj: str, chunks: Iterable[Chunk], cfg: CurationConfig) -> tuple[TrajectorySummary, list[StepItem]]:
    """A trajectory's chunks -> its summary and its steps."""
    chunks = sorted(chunks, key=lambda c: (c.shard, c.steps[0].step if c.steps else 0))
    return trajectory_summary(traj, chunks, cfg), [(c.shard, c.domain, s) for c in chunks for s in c.steps]


# -- earlier curations' and passes' index ---------------------------------------------------------
def current_keys(s: TrajectorySummary, nd: NearDedup) -> list[str]:
    """The keys an earlier kept trajectory must share with ``s`` to matter: exact key, band keys."""
    return [s.key, *minhash.band_keys(np.frombuffer(s.sig, np.uint64), nd.bands, nd.rows)]


def index_matches(path: str, kind: str, wanted: set[str], nd: NearDedup) -> tuple[int, list[Any]]:
    """An index file's rows that can matter to this pass (``(rows read, matches)``): a kept
    trajectory sharing an exact or band key (as a ``TrajectorySummary``), or a kept step
    sharing a (state, action) key (as ``(key, ("prev", KeptStep))``). Shingle sets, the
    bulk of a trajectory row, are read for the matching rows only."""
    import pyarrow.parquet as pq

    if kind == "steps":
        rows = pq.read_table(path).to_pylist()
        return len(rows), [(r["sa"], ("prev", KeptStep.from_index_row(r))) for r in rows if r["sa"] in wanted]
    names = pq.read_schema(path).names
    table = pq.read_table(path, columns=[n for n in names if n != "shingles"])
    rows = table.to_pylist()
    hits = [
        i
        for i, r in enumerate(rows)
        if r["key"] in wanted
        or any(k in wanted for k in minhash.band_keys(np.frombuffer(r["sig"], np.uint64), nd.bands, nd.rows))
    ]
    if hits and "shingles" in names:
        shingles = pq.read_table(path, columns=["shingles"]).column(0).take(hits).to_pylist()
        for i, s in zip(hits, shingles, strict=True):
            rows[i]["shingles"] = s
    return len(rows), [TrajectorySummary.from_index_row(rows[i]) for i in hits]


# -- decisions ------------------------------------------------------------------------------------
def pick_keeper(members: Iterable[TrajectorySummary]) -> tuple[TrajectorySummary, list[tuple[str, Rejection]]]:
    """One exact key's trajectories -> the keeper (the earliest) and the others' rejections."""
    members = sorted(members, key=lambda s: s.order)
    keeper = members[0]
    detail = f"exact duplicate of {keeper.trajectory}"
    rejection = Rejection("exact_dedup", "exact_duplicate", detail, keeper.trajectory, 1.0, keeper.last_step)
    return keeper, [(m.trajectory, rejection) for m in members[1:]]


def near_rejection(v: neardup.Verdict) -> tuple[str, Rejection]:
    partner = Order(*v.partner).trajectory
    detail = f"near duplicate of {partner} (Jaccard {v.similarity:.3f})"
    return Order(*v.key).trajectory, Rejection("near_dedup", "near_duplicate", detail, partner, v.similarity, v.partner_last_step)


def settle_exact(copies: Iterable[tuple[str, Rejection]], keeper_near: Iterable[Rejection]) -> list[tuple[str, Rejection]]:
    """Exact copies of one keeper: when the keeper itself is dropped as a near duplicate of
    R, its copies name R (at the keeper's similarity to R: their shingles are the keeper's)."""
    near = next(iter(keeper_near), None)
    if near is None:
        return list(copies)
    out = []
    for traj, r in copies:
        detail = f"{r.detail}, itself a near duplicate of {near.partner} (Jaccard {near.similarity:.3f})"
        settled = r._replace(
            detail=detail, partner=near.partner, similarity=near.similarity, partner_last_step=near.partner_last_step
        )
        out.append((traj, settled))
    return out


def cluster_labels(rejection: tuple[str, Rejection]) -> list[tuple[str, str]]:
    """A duplicate and its partner, each labelled by the partner (the kept trajectory)."""
    traj, r = rejection
    return [(traj, r.partner), (r.partner, r.partner)] if r.partner else []


def step_decisions(
    traj: str,
    rejections: Iterable[Rejection],
    clusters: Iterable[str],
    steps: Iterable[Sequence[StepItem]],
    summaries: Iterable[TrajectorySummary],
) -> tuple[list[tuple[str, tuple[str, Decision]]], list[TrajectorySummary]]:
    """A trajectory's steps with its verdict -> ((state-action key, ("cur", decision)) per
    step, its summary if kept)."""
    verdicts = sorted(rejections, key=lambda r: (r.stage, r.reason, r.detail))
    cluster = min(clusters, default=None)
    out = []
    for items in steps:
        for shard, domain, s in items:
            if verdicts:
                r = verdicts[0]
                d = Decision(s.transition_id, traj, domain, "rejected", shard, r.stage, r.reason, r.detail)
                d = d._replace(duplicate_of=r.partner_step(s.step), similarity=r.similarity, cluster=cluster)
            else:
                d = Decision(s.transition_id, traj, domain, "kept", shard, cluster=cluster, flags=s.flags)
            d = d._replace(state_action=s.state_action, transition_key=s.transition_key, order=s.order, words=s.words)
            out.append((s.state_action, ("cur", d)))
    return out, ([] if verdicts else list(summaries))


def mark_steps(item, mark_repeats: bool, threshold: float) -> Iterator[Decision]:
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
                d = d._replace(duplicate_of=keeper, similarity=1.0)
            if len(prev) + i in flagged:
                d = d._replace(flags=(*d.flags, "nondeterministic"))
        else:
            d = d._replace(words=None)  # only kept steps go into the index
        yield d


def decide(
    summaries: Sequence[TrajectorySummary], steps: dict[str, list[StepItem]], cfg: CurationConfig
) -> tuple[list[tuple[str, tuple[str, Decision]]], list[TrajectorySummary]]:
    """``beam.decide`` in this process: summaries (this pass's and earlier kept ones) and
    this pass's steps by trajectory -> (state-action key, ("cur", decision)) per step, and
    the kept summaries of this pass."""
    rejected: dict[str, list[Rejection]] = defaultdict(list)
    kept = []
    for s in summaries:
        if s.problem:
            rejected[s.trajectory].append(s.problem)
        else:
            kept.append(s)
    exact: list[tuple[str, Rejection]] = []
    if cfg.exact_dedup.enabled and cfg.exact_dedup.trajectories:
        by_key: dict[str, list[TrajectorySummary]] = defaultdict(list)
        for s in kept:
            by_key[s.key].append(s)
        kept = []
        for members in by_key.values():
            keeper, dropped = pick_keeper(members)
            kept.append(keeper)
            exact.extend(dropped)
    near: list[tuple[str, Rejection]] = []
    if cfg.near_dedup.enabled:
        near = [near_rejection(v) for v in neardup.near_duplicates([s.node() for s in kept], cfg.near_dedup)]
    near_of = dict(near)
    copies: dict[str, list[tuple[str, Rejection]]] = defaultdict(list)
    for traj, r in exact:
        copies[r.partner].append((traj, r))
    final = near + [x for keeper, cs in copies.items() for x in settle_exact(cs, [near_of[keeper]] if keeper in near_of else [])]
    clusters: dict[str, set[str]] = defaultdict(set)
    for traj, r in final:
        rejected[traj].append(r)
    for pair in final:
        for traj, label in cluster_labels(pair):
            clusters[traj].add(label)
    current = {s.trajectory: s for s in summaries if s.order.rank == THIS_CURATION}
    decisions, kept_summaries = [], []
    for traj in sorted(steps):
        summary = [current[traj]] if traj in current else []
        ds, k = step_decisions(traj, rejected.get(traj, ()), clusters.get(traj, ()), [steps[traj]], summary)
        decisions.extend(ds)
        kept_summaries.extend(k)
    return decisions, kept_summaries


def run_pass_local(
    reads: dict[int, tuple],
    store_uri: str,
    cfg: CurationConfig,
    previous: dict[str, list[str]],
    every_read: dict[int, tuple],
    work: str,
    cid: str,
) -> dict[str, int]:
    """``run.run_pass`` in this process: the same reads, decisions and per-piece outputs."""
    from pipelines.curate.output import write_shard
    from pipelines.store import Store

    store = Store.open(store_uri)
    index = eval_index(cfg)
    chunks: dict[str, list[Chunk]] = defaultdict(list)
    quarantine: list[Decision] = []
    for shard, where in sorted(reads.items()):
        for item in read_piece(store.sfs, shard, where, cfg, index):
            if isinstance(item, Decision):
                quarantine.append(item)
            else:
                chunks[item.trajectory].append(item)
        with contextlib.suppress(OSError):  # the driver counts these for its progress bar
            Path(work, "read", f"{shard:06d}").touch()
    summaries, steps = [], {}
    for traj, cs in chunks.items():
        summary, steps[traj] = summarise(traj, cs, cfg)
        summaries.append(summary)
    counts = {"traj_read": 0, "traj_matched": 0, "steps_read": 0, "steps_matched": 0}
    nd = cfg.near_dedup
    if previous.get("traj"):
        wanted = {k for s in summaries for k in current_keys(s, nd)}
        for path in previous["traj"]:
            n, found = index_matches(path, "traj", wanted, nd)
            counts["traj_read"] += n
            counts["traj_matched"] += len(found)
            summaries.extend(found)
    decided, kept = decide(summaries, steps, cfg)
    groups: dict[str, list] = defaultdict(list)
    for key, value in decided:
        groups[key].append(value)
    if previous.get("steps"):
        for path in previous["steps"]:
            n, found = index_matches(path, "steps", set(groups), nd)
            counts["steps_read"] += n
            counts["steps_matched"] += len(found)
            for key, value in found:
                groups[key].append(value)
    mark_repeats = cfg.exact_dedup.enabled and cfg.exact_dedup.transitions
    by_shard: dict[int, list[Decision]] = defaultdict(list)
    for d in quarantine:
        by_shard[d.shard].append(d)
    for key in sorted(groups):
        for d in mark_steps((key, groups[key]), mark_repeats, cfg.quality.nondeterminism_jaccard):
            by_shard[d.shard].append(d)
    kept_by_shard: dict[int, list[TrajectorySummary]] = defaultdict(list)
    for s in kept:
        kept_by_shard[s.shard].append(s)
    for shard in sorted(set(by_shard) | set(kept_by_shard)):
        path, span = every_read[shard]
        write_shard(store, path, shard, work, cid, cfg, by_shard[shard], kept_by_shard[shard], span)
    return {k: v for k, v in counts.items() if v}  # as Beam's counters: only the ones counted
