"""Near-duplicate removal without chaining, as plain functions (no Beam here).

A document (a trajectory's masked step texts, or any text) becomes a **shingle set**: the
hashes of its word or character n-grams after every run of whitespace, line breaks
included, collapses to one space (so re-wrapped or re-indented copies shingle alike),
kept as sorted distinct 32-bit values (4 bytes a shingle; two distinct shingles collide
with probability 2^-32), and a MinHash **signature** of that set (``minhash``).

Deciding, the same way on every runner (``beam.NearDuplicates`` runs these functions in
workers; ``near_duplicates`` runs them in one process for small curations):

1. **Candidates**: documents whose signatures are equal in some band (LSH); of each
   pair, only the first band the two agree in counts (so a pair comes out once), and it
   becomes a candidate edge if its estimated Jaccard is at least ``threshold -
   ESTIMATE_SLACK`` (the slack is 4.5 standard deviations of a 128-permutation estimate,
   so a pair at the threshold is almost never lost here; the exact check decides).
   ``candidate_edges`` does a whole band at a time, vectorised, on a matrix of
   signatures in key order (on Beam, a worker for each share of the bands).
2. **Groups**: the candidate edges' components, labelled by ``rounds`` of min-label
   propagation (``min_labels``, ``groups``; candidate edges are few, so on Beam too one
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

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

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


def candidate_edges(sigs: np.ndarray, bands: Iterable[int], nd: NearDedup) -> np.ndarray:
    """Signatures (row ``i`` the ``i``-th document in key order) -> ``(m, 2)`` candidate
    edges ``(i, j)``, ``i < j``, found in ``bands``: pairs equal in one of them, first equal
    there (so over all bands an edge comes out once), whose estimate passes."""
    bands = sorted(bands)
    if not bands or len(sigs) < 2:
        return np.empty((0, 2), np.int64)
    ids = minhash.bucket_ids(sigs, bands[-1] + 1, nd.rows)
    floor = max(0.0, nd.threshold - ESTIMATE_SLACK)
    return np.concatenate([minhash.similar_band_pairs(sigs, ids, b, floor) for b in bands])


def min_labels(edges: np.ndarray, n: int, rounds: int) -> np.ndarray:
    """Nodes ``0..n-1`` joined by ``edges`` -> each node's label: the smallest node it
    reaches within ``rounds + 1`` hops (hash-to-min, one hop a round: a long chain of pairs
    stays in bounded groups); a node without edges is its own label."""
    labels = np.arange(n)
    if not len(edges):
        return labels
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
    heads = src[starts]
    for _ in range(rounds + 1):
        labels[heads] = np.minimum(labels[heads], np.minimum.reduceat(labels[dst], starts))
    return labels


class Group(NamedTuple):
    """A group of documents a decision may depend on: their keys (sorted) and the
    candidate edges between them as ``(i, j)`` index pairs, ``i < j``."""

    keys: list
    edges: np.ndarray


def groups(keys: Sequence[tuple], edges: np.ndarray, rounds: int) -> list[Group]:
    """Sorted keys and candidate edges between them (indices) -> the groups (``rounds`` of
    ``min_labels``) with an edge inside; an edge whose ends fall in two groups (a chain
    longer than the rounds reach) is dropped, so neither end is judged against the other."""
    labels = min_labels(edges, len(keys), rounds)
    edges = edges[labels[edges[:, 0]] == labels[edges[:, 1]]]  # a chain past the rounds: cut between groups
    if not len(edges):
        return []
    nodes = np.unique(edges)
    node_order = np.argsort(labels[nodes], kind="stable")
    node_cuts = np.flatnonzero(np.diff(labels[nodes][node_order])) + 1
    edge_labels = labels[edges[:, 0]]
    edge_order = np.argsort(edge_labels, kind="stable")
    edge_cuts = np.flatnonzero(np.diff(edge_labels[edge_order])) + 1
    out = []
    for members, group_edges in zip(np.split(nodes[node_order], node_cuts), np.split(edges[edge_order], edge_cuts), strict=True):
        out.append(Group([keys[i] for i in members], np.searchsorted(members, group_edges)))
    return out


def assign(group: Group, nodes: Mapping[tuple, Node], threshold: float) -> list[Verdict]:
    """One group's verdicts by greedy assignment (see the module docstring). Members with
    rank 0 (an earlier curation's or pass's) are kept whatever they match."""
    n = len(group.keys)
    edges = group.edges[np.lexsort((group.edges[:, 0], group.edges[:, 1]))]  # by later end, then earlier
    bounds = np.searchsorted(edges[:, 1], np.arange(n + 1))
    kept = np.zeros(n, bool)
    verdicts = []
    for j, key in enumerate(group.keys):
        if key[0] == 0:
            kept[j] = True
            continue
        earlier = edges[bounds[j] : bounds[j + 1], 0]
        best: tuple[int, float] | None = None
        for i in earlier[kept[earlier]].tolist():
            s = similarity(nodes[key], nodes[group.keys[i]])
            if s >= threshold and (best is None or s > best[1]):
                best = (i, s)
        if best is None:
            kept[j] = True
        else:
            partner = group.keys[best[0]]
            verdicts.append(Verdict(key, partner, best[1], nodes[partner].last_step))
    return verdicts


def signature_matrix(nodes: Sequence[tuple[tuple, Node]]) -> np.ndarray:
    return np.stack([np.frombuffer(n.sig, np.uint64) for _, n in nodes])


def near_duplicates(nodes: Sequence[tuple[tuple, Node]], nd: NearDedup) -> list[Verdict]:
    """Every verdict of a set of documents, in this process (``beam.NearDuplicates`` gives the same)."""
    if not nodes:
        return []
    nodes = sorted(nodes, key=lambda kv: kv[0])
    keys = [k for k, _ in nodes]
    edges = candidate_edges(signature_matrix(nodes), range(nd.bands), nd)
    by_key = dict(nodes)
    return sorted(v for g in groups(keys, edges, nd.max_components_rounds) for v in assign(g, by_key, nd.threshold))


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
