"""Curation logic as plain functions over transitions and trajectories (no Beam here).

Every function is deterministic and small enough to test on hand-made cases; the Beam
pipeline only wires them. A trajectory is the list of its transitions ordered by step.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from pipelines.curate.config import NearDedup, Quality
from schemas.transition import Action, Observation, Transition, content_hash, mask_volatile

# -- normalise ----------------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BLANKS = re.compile(r"[ \t]+")
_EDGES = re.compile(r"^ | $", re.MULTILINE)
_GARBAGE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")


def normalise(text: str) -> str:
    """For hashing and comparison only: no ANSI or control codes, LF, single blanks, no trailing blanks."""
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    return _EDGES.sub("", _BLANKS.sub(" ", text)).strip()


def masked(obs: Observation) -> str:
    """The observation with its volatile spans masked, normalised."""
    return normalise(mask_volatile(obs.text, obs.volatile_spans))


def digest(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def transition_key(t: Transition) -> str:
    """Exact-duplicate key of a step: masked state, canonical action, masked next_state."""
    return digest(masked(t.state), t.action.canonical, masked(t.next_state))


def trajectory_key(trajectory: Sequence[Transition]) -> str:
    return digest(*(transition_key(t) for t in trajectory))


# -- near duplicates ----------------------------------------------------------------------------
_FNV = np.uint64(1099511628211)


def _mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised: spreads polynomial hashes over all 64 bits."""
    with np.errstate(over="ignore"):
        z = h + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def shingle_hashes(text: str, *, words: bool, n: int) -> np.ndarray:
    """64-bit hashes of the distinct shingles: byte n-grams of the UTF-8 text (terminal
    output, code) or word n-grams (prose). Computed with numpy, not per shingle in Python."""
    if words:
        tokens = text.split() or [""]
        units = np.array(
            [int.from_bytes(hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big") for t in tokens],
            dtype=np.uint64,
        )
    else:
        units = np.frombuffer(text.encode("utf-8", "surrogatepass") or b"\0", dtype=np.uint8).astype(np.uint64)
    if len(units) < n:
        units = np.concatenate([units, np.zeros(n - len(units), dtype=np.uint64)])
    windows = np.lib.stride_tricks.sliding_window_view(units, n)
    with np.errstate(over="ignore"):
        powers = _FNV ** np.arange(n - 1, -1, -1, dtype=np.uint64)
        h = (windows * powers).sum(axis=1, dtype=np.uint64)
    return np.unique(_mix64(h))


def _identity(x):
    return x


def signature(hashes: np.ndarray, cfg: NearDedup) -> np.ndarray:
    """A 64-bit MinHash signature: datasketch's vectorised affine64 permutations (fixed
    seed) over precomputed 64-bit shingle hashes."""
    from datasketch import MinHash

    m = MinHash(num_perm=cfg.num_perm, seed=1, hashfunc=_identity, scheme="affine64")
    m.update_batch(hashes)
    return m.hashvalues.astype(np.uint64)


def band_keys(sig: np.ndarray, cfg: NearDedup) -> list[str]:
    """One key per band: documents sharing any band key are candidate pairs."""
    return [
        f"{b}:{hashlib.blake2b(sig[b * cfg.rows : (b + 1) * cfg.rows].tobytes(), digest_size=12).hexdigest()}"
        for b in range(cfg.bands)
    ]


WORDS_PERM = 32


def word_signature(text: str) -> np.ndarray:
    """A small MinHash of a text's word set: how different two next states are, in 256 bytes."""
    from pipelines.curate.config import NearDedup

    return signature(shingle_hashes(text, words=True, n=1), NearDedup(num_perm=WORDS_PERM, bands=WORDS_PERM, rows=1))


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / len(a)


def components(edges: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Connected components; each node maps to the smallest id in its component."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            lo, hi = sorted((ra, rb))
            parent[hi] = lo
    return {x: find(x) for x in parent}


# -- quality ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepSummary:
    """What trajectory-level quality needs of a step (small enough to cross a shuffle)."""

    action: str  # canonical
    next_hash: str  # digest of the masked next state
    truncated: bool
    failed: bool


def step_summary(t: Transition) -> StepSummary:
    return StepSummary(t.action.canonical, digest(masked(t.next_state)), t.next_state.truncated, t.action_error is not None)


def trajectory_problem(steps: Sequence[StepSummary], cfg: Quality) -> str | None:
    """Why a whole trajectory (its steps in order) is dropped, or None."""
    if not steps:
        return "empty trajectory"
    truncated = sum(s.truncated for s in steps) / len(steps)
    if truncated > cfg.max_truncated_ratio:
        return f"truncated observations: {truncated:.0%} of steps > {cfg.max_truncated_ratio:.0%}"
    run, longest = 1, 1
    for prev, cur in itertools.pairwise(steps):
        run = run + 1 if cur.action == prev.action else 1
        longest = max(longest, run)
    if longest >= cfg.max_repeated_action:
        return f"degenerate: the same action {longest} times in a row"
    _state, n = Counter(s.next_hash for s in steps).most_common(1)[0]
    if n >= cfg.max_state_loop:
        return f"degenerate: a loop through the same state {n} times"
    if all(s.failed for s in steps):
        return "every action failed"
    return None


def transition_flags(t: Transition, cfg: Quality) -> list[str]:
    """Per-step quality flags; flags starting with ``exclude:`` keep the step out of targets."""
    flags = []
    text = t.next_state.text
    if not text.strip():
        flags.append("exclude:empty_next_state")
    elif t.action_error and normalise(text) == normalise(t.state.text):
        flags.append("exclude:error_only")
    if len(text) < cfg.min_chars or len(text) > cfg.max_chars:
        flags.append(f"exclude:length_{len(text)}")
    if text:
        garbage = len(_GARBAGE.findall(text)) / len(text)
        if garbage > cfg.max_garbage_ratio:
            flags.append("exclude:non_text")
    if t.next_state.truncated:
        flags.append("truncated")
    return flags


def nondeterministic(word_signatures: Sequence[np.ndarray], threshold: float) -> set[int]:
    """Of the steps that share a masked (state, action), the indices whose next states differ
    from another's by word-set Jaccard below ``threshold``: kept, but flagged."""
    flagged = set()
    for i in range(len(word_signatures)):
        for j in range(i + 1, len(word_signatures)):
            if estimated_jaccard(word_signatures[i], word_signatures[j]) < threshold:
                flagged.update((i, j))
    return flagged


# -- scrub --------------------------------------------------------------------------------------
# Patterns after detect-secrets' plugins and common token formats. Each match is replaced by a
# placeholder of the same length, so volatile spans and the text's shape stay valid.
SECRET_PATTERNS: dict[str, re.Pattern[str]] = {
    "private_key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    "aws_key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "github_token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b"),
    "openai_key": re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}\b"),
    "slack_token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"),
    "url_credentials": re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),
    "password_arg": re.compile(r"(?i)(?<=--password[= ])\S+|(?<=password=)[^\s&'\"]+|(?<=passwd=)[^\s&'\"]+"),
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
}


def placeholder(kind: str, length: int) -> str:
    tag = f"<{kind}>"
    return tag[:length] if length <= len(tag) else tag + "*" * (length - len(tag))


def scrub_text(text: str, kinds: Sequence[str]) -> tuple[str, Counter]:
    counts: Counter = Counter()
    for kind in kinds:
        pattern = SECRET_PATTERNS[kind]

        def repl(m: re.Match[str], kind: str = kind) -> str:
            counts[kind] += 1
            return placeholder(kind, len(m.group(0)))

        text = pattern.sub(repl, text)
    return text, counts


def scrub_transition(t: Transition, kinds: Sequence[str]) -> tuple[Transition, Counter]:
    """Scrub texts, the action and the instruction; ids stay, the content hash follows."""
    counts: Counter = Counter()

    def s(text: str | None) -> str | None:
        if text is None:
            return None
        out, c = scrub_text(text, kinds)
        counts.update(c)
        return out

    state = replace(t.state, text=s(t.state.text))
    next_state = replace(t.next_state, text=s(t.next_state.text))
    raw = scrub_text(t.action.raw, kinds)[0]  # raw usually repeats canonical: counted once
    action = Action(t.action.kind, s(t.action.canonical), raw)
    if not counts:
        return t, counts
    new = replace(t, state=state, next_state=next_state, action=action, instruction=s(t.instruction))
    return replace(new, content_hash=content_hash(new.state, new.action, new.next_state)), counts


# -- decontaminate ------------------------------------------------------------------------------
def word_ngrams(text: str, n: int) -> set[int]:
    tokens = re.findall(r"\w+", text.lower())
    return {
        int.from_bytes(hashlib.blake2b(" ".join(tokens[i : i + n]).encode(), digest_size=8).digest(), "big")
        for i in range(len(tokens) - n + 1)
    }


@dataclass
class EvalIndex:
    """Evaluation tasks that must not leak into training data."""

    n: int = 13
    ids: dict[str, str] = field(default_factory=dict)  # task id -> file
    repos: dict[tuple[str, str], str] = field(default_factory=dict)  # (repo, commit) -> file
    ngrams: dict[int, str] = field(default_factory=dict)  # n-gram hash -> file

    @classmethod
    def from_files(cls, paths: Sequence[str], n: int = 13) -> EvalIndex:
        index = cls(n=n)
        for path in paths:
            name = Path(path).name
            for line in Path(path).read_text().splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                for key in ("id", "task_id"):
                    if item.get(key):
                        index.ids[str(item[key])] = name
                if item.get("repo") and item.get("commit"):
                    index.repos[(item["repo"], item["commit"])] = name
                for key in ("instruction", "text", "observation", "gold"):
                    if isinstance(item.get(key), str):
                        for g in word_ngrams(item[key], n):
                            index.ngrams.setdefault(g, name)
        return index

    def contamination(self, trajectory: Sequence[Transition]) -> str | None:
        first = trajectory[0]
        if first.task_id in self.ids:
            return f"task id {first.task_id} is in {self.ids[first.task_id]}"
        extra = json.loads(first.provenance.extra or "{}")
        key = (extra.get("repo"), extra.get("commit"))
        if key in self.repos:
            return f"repo {key[0]} at {key[1]} is in {self.repos[key]}"
        texts = [first.instruction or ""] + [t.next_state.text for t in trajectory]
        for text in texts:
            for g in word_ngrams(text, self.n):
                if g in self.ngrams:
                    return f"{self.n}-gram overlap with {self.ngrams[g]}"
        return None
