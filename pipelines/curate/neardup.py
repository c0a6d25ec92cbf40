"""Near-duplicate removal without chaining, as plain functions (no Beam here).

A document (a trajectory's masked step texts, or any text) becomes a **shingle set**: the
hashes of its word or character n-grams after every run of whitespace, line breaks
included, collapses to one space (so re-wrapped or re-indented copies shingle alike),
kept as sorted distinct 32-bit values (4 bytes a shingle; two distinct shingles collide
with probability 2^-32), and a MinHash **signature** of that set (``minhash``).

Deciding, the same way on every runner (``beam.NearDuplicates`` runs these functions in
workers; ``near_duplicates`` runs them in one process for small curations):

1. **Candidates**: documents whose signatures are equal in some band (LSH); a bucket's
   pairs whose estimated Jaccard is at least ``threshold - ESTIMATE_SLACK`` become
   candidate edges (the slack is 4.5 standard deviations of a 128-permutation estimate,
   so a pair at the threshold is almost never lost here; the exact check decides).
2. **Groups**: connected components of the candidate edges, labelled by ``rounds`` of
   min-label propagation (``min_labels``; candidate edges are few, so on Beam too one
   worker labels them all), so a group holds every document a decision may depend on.
3. **Greedy assignment** inside a group (``assign``), in the deterministic order of the
   documents' keys (earliest first): a document is dropped only as a near-duplicate of an
   earlier document that is *kept* and that it matches, by **exact** Jaccard of the two
   shingle sets, at or above ``threshold``; the partner is the most similar such one (the
   earliest on a tie). A document nothing kept matches is kept and may absorb later ones.
   So A~B and B~C with A not ~ C keeps C (B is gone): nothing is dropped by chaining.

Keys are tuples that sort in keep-priority order: the curation's ``Order`` (an earlier
curation's kept trajectories first, rank 0, and never dropped), or ``(1, position, id)``
for ``documents.dedup_documents``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from pipelines.curate import minhash
from pipelines.curate.config import NearDedup

ESTIMATE_SLACK = 0.2  # candidates: estimated Jaccard >= threshold - this (then checked exactly)
LOCAL_MAX = 10_000  # documents or transitions: up to this many, no Beam (its start-up costs seconds)


def layout_blind(text: str) -> str:
    """Every run of whitespace (spaces, tabs, line breaks, Unicode blanks) as one space."""
    return " ".join(text.split())


def uses_words(nd: NearDedup, domain: str) -> bool:
    return domain in nd.word_domains


def shingle_set(parts: Iterable[str], nd: NearDedup, domain: str) -> np.ndarray:
    """The sorted distinct 32-bit shingle hashes of some texts (shingles do not cross from
    one text to the next: a trajectory's steps are shingled one by one)."""
    words = uses_words(nd, domain)
    n = nd.word_ngram if words else nd.char_ngram
    hashes = [minhash.shingles(layout_blind(p), words=words, n=n) for p in parts]
    return minhash.distinct(np.concatenate(hashes).astype(np.uint32)) if hashes else np.zeros(1, np.uint32)


def signatures(sets: Sequence[np.ndarray], nd: NearDedup) -> np.ndarray:
    """``(len(sets), num_perm)`` uint64 MinHash signatures of shingle sets."""
    if not sets:
        return np.empty((0, nd.num_perm), np.uint64)
    return minhash.hasher(nd.num_perm).signatures([s.astype(np.uint64) for s in sets])


def union(a: bytes, b: bytes) -> bytes:
    """Two shingle sets (as bytes) as one: a trajectory found in two batches."""
    return np.union1d(np.frombuffer(a, np.uint32), np.frombuffer(b, np.uint32)).astype(np.uint32).tobytes()


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted distinct arrays."""
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter) if a.size + b.size else 1.0


class Node(NamedTuple):
    """What deciding needs of one document: its signature, its shingle set (None for an
    earlier curation's trajectory indexed before shingle sets were kept: such a pair is
    judged by the signatures' estimate) and its last step (to name the partner's step)."""

    sig: bytes
    shingles: bytes | None
    last_step: int = 0


class Verdict(NamedTuple):
    """A dropped document, the kept one it duplicates and their exact Jaccard."""

    key: tuple
    partner: tuple
    similarity: float
    partner_last_step: int


def similarity(a: Node, b: Node) -> float:
    if a.shingles is None or b.shingles is None:
        return minhash.estimated_jaccard(np.frombuffer(a.sig, np.uint64), np.frombuffer(b.sig, np.uint64))
    return jaccard(np.frombuffer(a.shingles, np.uint32), np.frombuffer(b.shingles, np.uint32))


def band_slices(nodes: Sequence[tuple[tuple, Node]], nd: NearDedup) -> Iterable[tuple[int, tuple[list, np.ndarray]]]:
    """Some documents -> per band, ``(band, (their keys, their rows of that band))``: a
    batch's share of the band buckets, vectorised (one Beam element per band and batch)."""
    keys = [k for k, _ in nodes]
    if not keys:
        return ()
    matrix = np.stack([np.frombuffer(n.sig, np.uint64) for _, n in nodes])
    return [(b, (keys, matrix[:, b * nd.rows : (b + 1) * nd.rows].copy())) for b in range(nd.bands)]


def band_buckets(band: int, parts: Iterable[tuple[list, np.ndarray]]) -> Iterable[tuple[int, list]]:
    """One band's slices (``band_slices``) -> ``(band, members)`` per bucket of two or more."""
    parts = list(parts)
    keys = [k for ks, _ in parts for k in ks]
    return ((band, m) for m in minhash.band_buckets(keys, np.concatenate([rows for _, rows in parts]))) if parts else ()


def bucket_edges(bucket: tuple[int, Sequence[tuple]], sigs: dict[tuple, bytes], nd: NearDedup) -> Iterable[tuple[tuple, tuple]]:
    """One band bucket's candidate edges ``(a, b)``, ``a < b``: the pairs whose estimate
    passes and for which this band is the first their signatures agree in (so over all
    bands a pair comes out once)."""
    band, members = bucket
    members = sorted(set(members))
    if len(members) < 2:
        return ()
    matrix = np.stack([np.frombuffer(sigs[m], np.uint64) for m in members])
    return minhash.similar_pairs(members, matrix, max(0.0, nd.threshold - ESTIMATE_SLACK), (band, nd.rows))


def min_labels(edges: Iterable[tuple[Any, Any]], rounds: int) -> dict[Any, Any]:
    """Each node of the edges -> the smallest node it reaches within ``rounds + 1`` hops
    (hash-to-min, one hop a round: a long chain of pairs stays in bounded groups)."""
    edges = list(edges)
    if not edges:
        return {}
    names = sorted({x for e in edges for x in e})
    index = {x: i for i, x in enumerate(names)}
    ends = np.array([(index[a], index[b]) for a, b in edges], np.int64)
    src = np.concatenate([ends[:, 0], ends[:, 1]])
    dst = np.concatenate([ends[:, 1], ends[:, 0]])
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])  # every node has a neighbour
    labels = np.arange(len(names))
    for _ in range(rounds + 1):
        labels = np.minimum(labels, np.minimum.reduceat(labels[dst], starts))
    return {x: names[label] for x, label in zip(names, labels.tolist(), strict=True)}


def assign(members: Iterable[tuple[tuple, Node]], edges: Iterable[tuple[tuple, tuple]], threshold: float) -> list[Verdict]:
    """One group's verdicts by greedy assignment (see the module docstring). Members with
    rank 0 (an earlier curation's or pass's) are kept whatever they match."""
    nodes = dict(members)
    earlier: dict[tuple, list[tuple]] = defaultdict(list)
    for a, b in edges:
        if a in nodes and b in nodes:
            lo, hi = sorted((a, b))
            earlier[hi].append(lo)
    kept: set[tuple] = set()
    verdicts = []
    for key in sorted(nodes):
        if key[0] == 0:
            kept.add(key)
            continue
        best: tuple[tuple, float] | None = None
        for other in sorted(set(earlier[key])):
            if other in kept:
                s = similarity(nodes[key], nodes[other])
                if s >= threshold and (best is None or s > best[1]):
                    best = (other, s)
        if best is None:
            kept.add(key)
        else:
            verdicts.append(Verdict(key, best[0], best[1], nodes[best[0]].last_step))
    return verdicts


def near_duplicates(nodes: Sequence[tuple[tuple, Node]], nd: NearDedup) -> list[Verdict]:
    """Every verdict of a set of documents, in this process (``beam.NearDuplicates`` gives the same)."""
    sigs = {k: n.sig for k, n in nodes}
    edges = sorted(
        {
            e
            for band, part in band_slices(nodes, nd)
            for bucket in band_buckets(band, [part])
            for e in bucket_edges(bucket, sigs, nd)
        }
    )
    labels = min_labels(edges, nd.max_components_rounds)
    groups: dict[tuple, list] = defaultdict(list)
    group_edges: dict[tuple, list] = defaultdict(list)
    for key, node in nodes:
        if key in labels:
            groups[labels[key]].append((key, node))
    for a, b in edges:
        group_edges[labels[a]].append((a, b))
    verdicts = [v for label in sorted(groups) for v in assign(groups[label], group_edges[label], nd.threshold)]
    return sorted(verdicts)


def document_nodes(docs: Sequence[tuple[str, str]], nd: NearDedup, start: int = 0, domain: str = "web") -> list:
    """(id, text) documents -> (key, Node) with keys ``(1, position, id)``; volatile spans
    (timestamps, PIDs, temp paths ...) masked as collectors record them."""
    from schemas.transition import mask_volatile
    from schemas.volatile import detect_spans

    sets = [shingle_set([mask_volatile(text, detect_spans(text))], nd, domain) for _, text in docs]
    sigs = signatures(sets, nd)
    return [
        ((1, f"{start + i:012d}", doc_id), Node(sig.tobytes(), s.tobytes()))
        for i, ((doc_id, _), s, sig) in enumerate(zip(docs, sets, sigs, strict=True))
    ]
