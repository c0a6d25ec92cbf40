"""What pass 1 computes of a batch of transitions, as plain functions (no Beam here), and
the small typed records that cross Beam's shuffles.

A batch becomes one ``Chunk`` per trajectory it holds: the trajectory's partial MinHash
signature (over the union of its steps' shingles, so a trajectory that spans batches or
shards is the element-wise minimum of its chunks) and one small ``Step`` per transition:
ids, exact keys, a 128-byte word-set signature of the next state, quality flags and
contamination. Texts never leave this function; signatures of all the batch's
trajectories are computed in one vectorised call. The chunks of a trajectory become its
``TrajectorySummary``; every transition ends with one ``Decision``.

The index files of a curation (``output.TRAJ_INDEX``, ``output.STEPS_INDEX``) keep their
short column names (``traj``, ``sa``, ``tkey``, ``order`` as text); ``index_row`` and
``from_index_row`` translate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from pipelines.curate import logic, neardup
from pipelines.curate.config import CurationConfig
from schemas.transition import Observation, Transition, transition_id

THIS_CURATION, EARLIER = 1, 0


class Order(NamedTuple):
    """Which copy of a trajectory or step counts as the earliest (the one kept): an earlier
    curation's or pass's (rank 0) before this pass's (rank 1), then by collection time,
    then by trajectory id. Sorts as its text ``"rank|collected_at|trajectory"`` does (the
    form in the index files): collected_at is always ISO 8601 in UTC with its offset."""

    rank: int
    collected_at: str
    trajectory: str

    def text(self) -> str:
        return f"{self.rank}|{self.collected_at}|{self.trajectory}"

    @classmethod
    def parse(cls, text: str) -> Order:
        rank, collected_at, trajectory = text.split("|", 2)
        return cls(int(rank), collected_at, trajectory)


def order_of(t: Transition) -> Order:
    return Order(THIS_CURATION, t.provenance.collected_at.isoformat(), t.trajectory_id)


class Rejection(NamedTuple):
    """Why a trajectory or transition is dropped: the stage, a ``pipelines.curate.reasons``
    name, free text; a duplicate also names the kept trajectory it copies (``partner``),
    their similarity and the partner's last step (so each step names the partner's)."""

    stage: str
    reason: str
    detail: str
    partner: str | None = None
    similarity: float | None = None
    partner_last_step: int = 0

    def partner_step(self, step: int) -> str | None:
        """The partner's transition matching ``step`` (its last one for a longer copy)."""
        return None if self.partner is None else transition_id(self.partner, min(step, self.partner_last_step))


class Step(NamedTuple):
    """One transition as the rest of pass 1 sees it (crosses shuffles: small, plain)."""

    step: int
    transition_id: str
    order: Order
    transition_key: str  # ``logic.transition_key``: the same transition (exact repeats)
    state_action: str  # ``logic.state_action_key``: the same step in other runs
    words: bytes  # word-set MinHash of the masked next state (32 x uint32)
    flags: tuple[str, ...]
    contamination: tuple[str, str] | None  # (reason, detail)
    action: str  # digest of the canonical action
    next_hash: str  # digest of the masked next state
    truncated: bool
    failed: bool

    def summary(self) -> logic.StepSummary:
        return logic.StepSummary(self.action, self.next_hash, self.truncated, self.failed)


class Chunk(NamedTuple):
    """The steps of one trajectory found in one batch, with their partial MinHash signature."""

    trajectory: str
    domain: str
    shard: int  # the piece index
    order: Order  # the earliest of the steps'
    sig: bytes  # num_perm x uint64
    shingles: bytes  # the sorted distinct uint32 shingle set (``neardup.shingle_set``)
    steps: tuple[Step, ...]


class TrajectorySummary(NamedTuple):
    """What deduplication needs of a whole trajectory: its exact key, its signature, its
    earliest order and the problem to drop it for, if any. Earlier curations' kept
    trajectories come back from the index as summaries with rank 0 and ``shard`` -1."""

    trajectory: str
    domain: str
    order: Order
    shard: int
    key: str  # ``logic.trajectory_key`` of its steps' transition keys
    sig: bytes
    problem: Rejection | None
    shingles: bytes | None = None  # None: an index row written before shingle sets were kept
    last_step: int = 0

    def index_row(self) -> dict[str, Any]:
        return {
            "traj": self.trajectory,
            "domain": self.domain,
            "order": self.order.text(),
            "key": self.key,
            "sig": self.sig,
            "shingles": self.shingles,
            "last_step": self.last_step,
        }

    @classmethod
    def from_index_row(cls, row: dict[str, Any]) -> TrajectorySummary:
        order = Order.parse(row["order"])._replace(rank=EARLIER)
        shingles, last = row.get("shingles"), row.get("last_step")
        return cls(row["traj"], row["domain"], order, -1, row["key"], row["sig"], None, shingles, last or 0)

    def node(self) -> tuple[tuple, neardup.Node]:
        """The trajectory as a near-duplicate node: its order as a plain tuple, which Beam
        encodes deterministically as a key (a NamedTuple key falls back to pickling)."""
        return tuple(self.order), neardup.Node(self.sig, self.shingles, self.last_step)


class KeptStep(NamedTuple):
    """A step an earlier curation or pass kept, as its steps index holds it."""

    state_action: str
    transition_key: str
    order: Order
    transition_id: str
    words: bytes

    @classmethod
    def from_index_row(cls, row: dict[str, Any]) -> KeptStep:
        return cls(row["sa"], row["tkey"], Order.parse(row["order"]), row["tid"], row["words"])


class Decision(NamedTuple):
    """One transition's verdict; a rejection's ``reason`` is from ``pipelines.curate.reasons``.
    Quarantined rows (stage ``validate``) may lack ids and have no keys; ``words`` is
    dropped once a rejected step's marks are settled (only kept steps go into the index)."""

    transition_id: str | None
    trajectory: str | None
    domain: str | None
    status: str  # "kept" or "rejected"
    shard: int
    stage: str | None = None
    reason: str | None = None
    detail: str | None = None
    duplicate_of: str | None = None
    similarity: float | None = None  # to ``duplicate_of``: exact Jaccard, 1.0 for an exact copy
    cluster: str | None = None
    flags: tuple[str, ...] = ()
    state_action: str | None = None
    transition_key: str | None = None
    order: Order | None = None
    words: bytes | None = None

    @property
    def kept(self) -> bool:
        return self.status == "kept"

    def index_row(self) -> dict[str, Any]:
        """The steps index row of a kept step."""
        order = self.order.text() if self.order else None
        return {
            "sa": self.state_action,
            "tkey": self.transition_key,
            "order": order,
            "tid": self.transition_id,
            "words": self.words,
        }


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
) -> list[Chunk]:
    """One chunk per trajectory in ``transitions``."""
    nd = cfg.near_dedup
    by_traj: dict[str, list[Transition]] = {}
    for t in transitions:
        by_traj.setdefault(t.trajectory_id, []).append(t)
    mask = _Masks()
    pending: list[tuple[str, str, list[Transition]]] = []
    sets, next_texts = [], []
    for traj, members in by_traj.items():
        members.sort(key=lambda t: t.step)
        texts = []
        for t in members:
            text = t.action.canonical + "\n" + mask(t.next_state)
            texts.append(mask(t.state) + "\n" + text if t.step == 0 else text)
            next_texts.append(mask(t.next_state))
        sets.append(neardup.shingle_set(texts, nd, members[0].domain))
        pending.append((traj, members[0].domain, members))
    sigs = neardup.signatures(sets, nd)
    words_sigs = logic.word_signatures(next_texts) if next_texts else np.empty((0, logic.WORDS_PERM), np.uint32)
    chunks, k = [], 0
    for (traj, domain, members), sig, shingles in zip(pending, sigs, sets, strict=True):
        steps = []
        for t in members:
            steps.append(_step(t, mask, words_sigs[k].tobytes(), cfg, index))
            k += 1
        order = min(s.order for s in steps)
        chunks.append(Chunk(traj, domain, shard, order, sig.tobytes(), shingles.tobytes(), tuple(steps)))
    return chunks


def _step(t: Transition, mask: _Masks, words: bytes, cfg: CurationConfig, index: logic.EvalIndex | None) -> Step:
    contamination = None
    if index is not None:
        contamination = index.contamination([t]) if t.step == 0 else text_contamination(t, index)
    return Step(
        step=t.step,
        transition_id=t.transition_id,
        order=order_of(t),
        transition_key=logic.transition_key(t, mask),
        state_action=logic.state_action_key(t, mask),
        words=words,
        flags=tuple(logic.transition_flags(t, cfg.quality)) if cfg.quality.enabled else (),
        contamination=contamination,
        action=logic.digest(t.action.canonical),
        next_hash=logic.digest(mask(t.next_state)),
        truncated=t.next_state.truncated,
        failed=t.action_error is not None,
    )


def text_contamination(t: Transition, index: logic.EvalIndex) -> tuple[str, str] | None:
    return index.text_overlap(t.next_state.text)


def trajectory_summary(traj: str, chunks: Sequence[Chunk], cfg: CurationConfig) -> TrajectorySummary:
    """The chunks of one trajectory -> its summary; the problem to drop it for is checked
    in order: decontamination first, then quality."""
    steps = sorted((s for c in chunks for s in c.steps), key=lambda s: s.step)
    sig = np.frombuffer(chunks[0].sig, dtype=np.uint64)
    shingles = chunks[0].shingles
    for c in chunks[1:]:  # a trajectory that spans batches: the signature of the union is the minimum
        sig = np.minimum(sig, np.frombuffer(c.sig, dtype=np.uint64))
        shingles = neardup.union(shingles, c.shingles)
    problem = None
    if cfg.decontaminate.enabled:
        problem = next((Rejection("decontaminate", *s.contamination) for s in steps if s.contamination), None)
    if problem is None and cfg.quality.enabled:
        found = logic.trajectory_problem([s.summary() for s in steps], cfg.quality)
        problem = Rejection("quality", *found) if found else None
    return TrajectorySummary(
        trajectory=traj,
        domain=chunks[0].domain,
        order=min(c.order for c in chunks),
        shard=min(c.shard for c in chunks),
        key=logic.trajectory_key(s.transition_key for s in steps),
        sig=sig.tobytes(),
        problem=problem,
        shingles=shingles,
        last_step=steps[-1].step,
    )
