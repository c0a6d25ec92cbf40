"""What pass 1 computes of a batch of transitions, as plain functions (no Beam here).

A batch becomes one *chunk* per trajectory it holds: the trajectory's partial MinHash
signature (over the union of its steps' shingles, so a trajectory that spans batches or
shards is the element-wise minimum of its chunks) and one small *step* tuple per
transition: ids, exact keys, a 128-byte word-set signature of the next state, quality
flags and contamination. Texts never leave this function; signatures of all the batch's
trajectories are computed in one vectorised call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from pipelines.curate import logic, minhash
from pipelines.curate.config import CurationConfig
from schemas.transition import Observation, Transition


class Step(NamedTuple):
    """One transition as the rest of pass 1 sees it (crosses shuffles: small, plain)."""

    step: int
    tid: str
    order: str  # "1|collected_at|trajectory": earlier sorts first; "0|..." is an earlier curation's
    tkey: str  # digest of masked state, action, masked next_state: exact repeats
    sa: str  # digest of masked state and action: the same step in other runs
    words: bytes  # word-set MinHash of the masked next state (32 x uint32)
    flags: tuple[str, ...]
    contamination: tuple[str, str] | None  # (reason, detail)
    action: str  # digest of the canonical action
    next_hash: str  # digest of the masked next state
    truncated: bool
    failed: bool

    def summary(self) -> logic.StepSummary:
        return logic.StepSummary(self.action, self.next_hash, self.truncated, self.failed)


def order_of(t: Transition) -> str:
    return f"1|{t.provenance.collected_at.isoformat()}|{t.trajectory_id}"


class _Masks:
    """Masked texts of a batch: a state is usually the previous step's next_state, so each
    observation is masked and normalised once."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, tuple], str] = {}

    def __call__(self, obs: Observation) -> str:
        key = (obs.text, obs.volatile_spans)
        out = self._seen.get(key)
        if out is None:
            out = self._seen[key] = logic.masked(obs)
        return out


def batch_chunks(
    transitions: Sequence[Transition], cfg: CurationConfig, index: logic.EvalIndex | None = None, shard: int = 0
) -> list[dict[str, Any]]:
    """One chunk per trajectory in ``transitions``: ``{traj, domain, shard, order, sig, steps}``
    (steps as plain tuples of ``Step``'s fields)."""
    nd, q = cfg.near_dedup, cfg.quality
    by_traj: dict[str, list[Transition]] = {}
    for t in transitions:
        by_traj.setdefault(t.trajectory_id, []).append(t)
    mask = _Masks()
    chunks, docs, next_texts = [], [], []
    for traj, members in by_traj.items():
        members.sort(key=lambda t: t.step)
        words = members[0].domain in nd.word_domains
        n = nd.word_ngram if words else nd.char_ngram
        shingles, steps = [], []
        for t in members:
            ms, mn = mask(t.state), mask(t.next_state)
            canonical = t.action.canonical
            text = canonical + "\n" + mn
            shingles.append(minhash.shingles(ms + "\n" + text if t.step == 0 else text, words=words, n=n))
            next_texts.append(mn)
            contamination = None
            if index is not None:
                contamination = index.contamination([t]) if t.step == 0 else text_contamination(t, index)
            steps.append([
                t.step, t.transition_id, order_of(t), logic.digest(ms, canonical, mn), logic.digest(ms, canonical), b"",
                tuple(logic.transition_flags(t, q)) if q.enabled else (), contamination, logic.digest(canonical),
                logic.digest(mn), t.next_state.truncated, t.action_error is not None,
            ])  # fmt: skip
        docs.append(minhash.distinct(np.concatenate(shingles)))
        chunks.append({"traj": traj, "domain": members[0].domain, "shard": shard,
                       "order": min(s[2] for s in steps), "steps": steps})  # fmt: skip
    sigs = minhash.hasher(nd.num_perm).signatures(docs) if docs else np.empty((0, nd.num_perm), np.uint64)
    words_sigs = logic.word_signatures(next_texts) if next_texts else np.empty((0, logic.WORDS_PERM), np.uint32)
    k = 0
    for chunk, sig in zip(chunks, sigs, strict=True):
        chunk["sig"] = sig.tobytes()
        for s in chunk["steps"]:
            s[5] = words_sigs[k].tobytes()
            k += 1
        chunk["steps"] = [tuple(s) for s in chunk["steps"]]  # plain tuples cross Beam's shuffles cheaply
    return chunks


def text_contamination(t: Transition, index: logic.EvalIndex) -> tuple[str, str] | None:
    return index.text_overlap(t.next_state.text)


def trajectory_summary(traj: str, chunks: Sequence[dict[str, Any]], cfg: CurationConfig) -> dict[str, Any]:
    """The chunks of one trajectory -> its exact key, signature, earliest order and the
    problem to drop it for, if any, as (stage, reason, detail): decontamination first, then quality."""
    steps = sorted((Step(*s) for c in chunks for s in c["steps"]), key=lambda s: s.step)
    sig = np.frombuffer(chunks[0]["sig"], dtype=np.uint64)
    for c in chunks[1:]:
        sig = np.minimum(sig, np.frombuffer(c["sig"], dtype=np.uint64))
    problem = None
    if cfg.decontaminate.enabled:
        problem = next((("decontaminate", *s.contamination) for s in steps if s.contamination), None)
    if problem is None and cfg.quality.enabled:
        found = logic.trajectory_problem([s.summary() for s in steps], cfg.quality)
        problem = ("quality", *found) if found else None
    return {
        "traj": traj,
        "domain": chunks[0]["domain"],
        "order": min(c["order"] for c in chunks),
        "shard": min(c["shard"] for c in chunks),
        "key": logic.digest(*(s.tkey for s in steps)),
        "sig": sig.tobytes(),
        "problem": problem,
    }
