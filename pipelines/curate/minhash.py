"""Shingles and MinHash signatures, vectorised with numpy (no loop per shingle in Python).

Shingles are 64-bit hashes of byte n-grams (terminal output, code) or word n-grams
(prose). Both come from one polynomial hash over the UTF-8 bytes, read off prefix sums:
with ``G[i] = sum_{j<i} b_j * P^-j`` (P odd, so invertible mod 2^64), the hash of the
segment ``[s, e)`` is ``(G[e] - G[s]) * P^(e-1)``, one multiply per segment whatever its
length. Signatures use datasketch's 64-bit affine scheme (``MinHash(scheme="affine64")``:
its seeded permutations and MurmurHash3 pre-mix) and give the same values as
``MinHash.update_batch`` (tested), but many documents go through one block of
``permutations x shingles`` at a time, so the per-document overhead disappears::

    hasher = MinHasher(128)
    sigs = hasher.signatures([shingle_hashes("ls -la", words=False, n=5), ...])  # (docs, 128) uint64
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator

import numpy as np

_P = 1099511628211  # the 64-bit FNV prime (odd)
_P_INV = pow(_P, -1, 1 << 64)
_LENGTH_SALT = np.uint64(0x9E3779B97F4A7C15)
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True
BLOCK = 8192  # shingles per block: permutations x BLOCK uint64 stay in the cache


@functools.cache
def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """P^k and P^-k mod 2^64 for k < n (n a power of two, so few sizes are cached)."""
    pos = np.concatenate([np.ones(1, np.uint64), np.cumprod(np.full(n - 1, _P, dtype=np.uint64), dtype=np.uint64)])
    neg = np.concatenate([np.ones(1, np.uint64), np.cumprod(np.full(n - 1, _P_INV, dtype=np.uint64), dtype=np.uint64)])
    return pos, neg


def _table(n: int) -> tuple[np.ndarray, np.ndarray]:
    return _powers(1 << max(10, int(n - 1).bit_length()))


def mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised: spreads polynomial hashes over all 64 bits."""
    z = h + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _segments(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Polynomial hashes of ``data[s:e]`` for every (s, e), from one prefix sum."""
    pos, neg = _table(len(data) + 1)
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum(data.astype(np.uint64) * neg[: len(data)], dtype=np.uint64, out=prefix[1:])
    return (prefix[ends] - prefix[starts]) * pos[ends - 1]


def word_units(data: np.ndarray) -> np.ndarray:
    """One 64-bit hash per word (a run of bytes between ASCII whitespace)."""
    space = _WHITESPACE[data]
    word = ~space
    starts = np.flatnonzero(word & np.concatenate(([True], space[:-1])))
    ends = np.flatnonzero(word & np.concatenate((space[1:], [True]))) + 1
    if not len(starts):
        return np.zeros(1, dtype=np.uint64)
    lengths = (ends - starts).astype(np.uint64)
    return mix64(_segments(data, starts, ends) + lengths * _LENGTH_SALT)


def shingles(text: str, *, words: bool, n: int) -> np.ndarray:
    """64-bit hashes of every shingle (with repeats): byte n-grams of the UTF-8 text or
    word n-grams. A text shorter than one shingle is padded with zeros."""
    data = np.frombuffer(text.encode("utf-8", "surrogatepass") or b"\0", dtype=np.uint8)
    if words:
        units = word_units(data)
        if len(units) < n:
            units = np.concatenate([units, np.zeros(n - len(units), dtype=np.uint64)])
        windows = np.lib.stride_tricks.sliding_window_view(units, n)
        pos, _ = _table(n)
        h = (windows * pos[:n][::-1]).sum(axis=1, dtype=np.uint64)
    else:
        if len(data) < n:
            data = np.concatenate([data, np.zeros(n - len(data), dtype=np.uint8)])
        starts = np.arange(len(data) - n + 1)
        h = _segments(data, starts, starts + n)
    return mix64(h)


def distinct(hashes: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort and a mask: quicker than ``np.unique`` here)."""
    out = np.sort(hashes)
    return out[np.concatenate(([True], out[1:] != out[:-1]))] if len(out) else out


def shingle_hashes(text: str, *, words: bool, n: int) -> np.ndarray:
    """The distinct shingle hashes of a text (see ``shingles``)."""
    return distinct(shingles(text, words=words, n=n))


class MinHasher:
    """datasketch's affine64 MinHash for many documents at once."""

    def __init__(self, num_perm: int, seed: int = 1) -> None:
        from datasketch import MinHash
        from datasketch.minhash import _fmix

        m = MinHash(num_perm=num_perm, seed=seed, scheme="affine64", hashfunc=_identity)
        a, b = m.permutations
        self.num_perm = num_perm
        self._a = np.ascontiguousarray(a, dtype=np.uint64)[:, None]
        self._b = np.ascontiguousarray(b, dtype=np.uint64)[:, None]
        self._fmix = _fmix
        self._buf = np.empty((num_perm, BLOCK), dtype=np.uint64)

    def _block(self, hv: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        t = self._buf[:, : len(hv)]
        np.multiply(self._a, self._fmix(hv, 64)[None, :], out=t)
        t += self._b
        return np.minimum.reduceat(t, offsets, axis=1).T

    def signatures(self, docs: list[np.ndarray]) -> np.ndarray:
        """``(len(docs), num_perm)`` uint64 signatures; each document a non-empty array of
        64-bit shingle hashes (repeats allowed)."""
        out = np.empty((len(docs), self.num_perm), dtype=np.uint64)
        i = 0
        while i < len(docs):
            if len(docs[i]) == 0:
                raise ValueError("a document without shingles has no MinHash")
            if len(docs[i]) >= BLOCK:  # a long document alone, block by block
                sig = np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
                for s in range(0, len(docs[i]), BLOCK):
                    np.minimum(sig, self._block(docs[i][s : s + BLOCK], np.zeros(1, np.intp))[0], out=sig)
                out[i] = sig
                i += 1
                continue
            j, size = i, 0
            while j < len(docs) and 0 < len(docs[j]) < BLOCK and size + len(docs[j]) <= BLOCK:
                size += len(docs[j])
                j += 1
            lengths = [len(d) for d in docs[i:j]]
            offsets = np.concatenate([[0], np.cumsum(lengths[:-1])]).astype(np.intp)
            out[i:j] = self._block(np.concatenate(docs[i:j]), offsets)
            i = j
        return out


def _identity(x):
    return x


@functools.cache
def hasher(num_perm: int) -> MinHasher:
    return MinHasher(num_perm)


def signature(hashes: np.ndarray, num_perm: int) -> np.ndarray:
    """The MinHash signature of one document."""
    return hasher(num_perm).signatures([hashes])[0]


def band_keys(sig: np.ndarray, bands: int, rows: int) -> list[str]:
    """One key per band: documents sharing any band key are candidate pairs."""
    return [f"{b}:{hashlib.blake2b(sig[b * rows : (b + 1) * rows].tobytes(), digest_size=12).hexdigest()}" for b in range(bands)]


PAIR_CHUNK = 1 << 18  # candidate pairs compared at a time (each a pair of signature rows)


def bucket_ids(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(len(sigs), bands)`` int64: per band, an id that two signatures share exactly when
    that band of theirs is equal (one sort of the band's rows; exact equality, no hashing)."""
    ids = np.empty((len(sigs), bands), np.int64)
    for b in range(bands):
        band = np.ascontiguousarray(sigs[:, b * rows : (b + 1) * rows])
        ids[:, b] = np.unique(band.view(np.dtype((np.void, band.dtype.itemsize * rows))).ravel(), return_inverse=True)[1].ravel()
    return ids


def bucket_pairs(ids: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every pair ``(i, j)``, ``i < j``, of rows with the same id (one band's buckets), as
    index arrays in chunks of about ``PAIR_CHUNK`` pairs (a bucket of k rows gives
    k(k-1)/2 pairs: never all at once)."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    sizes = np.diff(np.r_[starts, len(ids)])
    rank = np.arange(len(ids)) - np.repeat(starts, sizes)  # each row's place in its bucket
    later = np.repeat(sizes, sizes) - 1 - rank  # the members after it: its pairs
    rows = np.flatnonzero(later)
    if not rows.size:
        return
    ends = np.cumsum(later[rows])
    cuts = np.searchsorted(ends, np.arange(PAIR_CHUNK, ends[-1], PAIR_CHUNK), side="right")
    for block in np.split(rows, cuts):
        if not block.size:
            continue
        counts = later[block]
        first = np.repeat(block, counts)
        step = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        yield order[first], order[first + 1 + step]


def similar_band_pairs(sigs: np.ndarray, ids: np.ndarray, band: int, threshold: float) -> np.ndarray:
    """``(m, 2)`` row pairs ``(i, j)``, ``i < j``, that share ``band`` (``ids`` from
    ``bucket_ids``), share no band before it (so over all bands a pair comes out once) and
    whose estimated Jaccard (``estimated_jaccard`` of their signatures) is at least
    ``threshold``. Vectorised over the whole band, a chunk of pairs at a time."""
    num_perm = sigs.shape[1]
    found = [np.empty((0, 2), np.int64)]
    for i, j in bucket_pairs(ids[:, band]):
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        if band:
            first = ~(ids[lo, :band] == ids[hi, :band]).any(axis=1)
            lo, hi = lo[first], hi[first]
        keep = np.count_nonzero(sigs[lo] == sigs[hi], axis=1) / num_perm >= threshold
        found.append(np.stack([lo[keep], hi[keep]], axis=1))
    return np.concatenate(found)


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / len(a)
