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
from collections.abc import Iterator, Sequence

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


def band_buckets(keys: Sequence, band: np.ndarray) -> Iterator[list]:
    """One band's buckets of two or more members: the ``keys`` whose rows of the band
    (``band``: ``(len(keys), rows)``, row for row) are equal, by one sort of the rows
    (exact equality, no hashing)."""
    if len(keys) < 2:
        return
    band = np.ascontiguousarray(band)
    rows = band.view(np.dtype((np.void, band.dtype.itemsize * band.shape[1]))).ravel()
    _, inverse, counts = np.unique(rows, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    shared = np.flatnonzero(counts[inverse] > 1)
    if not shared.size:
        return
    shared = shared[np.argsort(inverse[shared], kind="stable")]
    cuts = np.flatnonzero(np.diff(inverse[shared])) + 1
    for bucket in np.split(shared, cuts):
        yield [keys[i] for i in bucket]


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / len(a)


def similar_pairs(
    nodes: Sequence[str], sigs: np.ndarray, threshold: float, first_band: tuple[int, int] | None = None
) -> Iterator[tuple[str, str]]:
    """The pairs ``(a, b)``, ``a < b``, of one LSH band bucket whose estimated Jaccard
    (``estimated_jaccard`` of their signatures) is at least ``threshold``. With
    ``first_band`` ``(band, rows)`` (the bucket's band), only the pairs for which it is the
    first band their signatures agree in: over all bands, each pair comes out once.

    ``nodes`` are the bucket's distinct members and ``sigs`` their ``(len(nodes),
    num_perm)`` signatures, row for row. Each row is compared with the rows after it in
    one vectorised step, so a bucket needs memory for its own signatures only and no
    candidate pair is ever materialised: only confirmed pairs come out."""
    order = sorted(range(len(nodes)), key=nodes.__getitem__)
    names = [nodes[i] for i in order]
    sigs = np.asarray(sigs)[order]
    num_perm = sigs.shape[1] if sigs.ndim == 2 else 0
    for i in range(len(names) - 1):
        equal = sigs[i + 1 :] == sigs[i]
        keep = np.count_nonzero(equal, axis=1) / num_perm >= threshold
        if first_band is not None:
            band, rows = first_band
            whole = equal[:, : (band + 1) * rows].reshape(len(equal), band + 1, rows).all(axis=2)
            keep &= whole.argmax(axis=1) == band
        for j in np.flatnonzero(keep):
            yield names[i], names[i + 1 + j]
