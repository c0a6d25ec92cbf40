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

from pipelines.curate import minhash
from pipelines.curate.config import NearDedup, Quality
from schemas.transition import Action, Observation, Transition, content_hash, mask_volatile

# -- normalise ----------------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BLANKS = re.compile(r"\t[ \t]*| [ \t]+")  # runs with a tab, or of 2+ blanks (a lone space stays as it is)
_GARBAGE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")


def normalise(text: str) -> str:
    """For hashing and comparison only: no ANSI or control codes, LF, single blanks, no trailing blanks."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _BLANKS.sub(" ", _CONTROL.sub("", text))
    return text.replace(" \n", "\n").replace("\n ", "\n").strip()


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
# Shingles and MinHash live in ``pipelines.curate.minhash``; these take the config.
shingle_hashes = minhash.shingle_hashes
estimated_jaccard = minhash.estimated_jaccard


def signature(hashes: np.ndarray, cfg: NearDedup) -> np.ndarray:
    """A 64-bit MinHash signature (datasketch's affine64 scheme) of precomputed shingle hashes."""
    return minhash.signature(hashes, cfg.num_perm)


def band_keys(sig: np.ndarray, cfg: NearDedup) -> list[str]:
    return minhash.band_keys(sig, cfg.bands, cfg.rows)


WORDS_PERM = 32


def word_signature(text: str) -> np.ndarray:
    """A small MinHash of a text's word set: how different two next states are, in 128 bytes
    (the low 32 bits of each value are plenty to tell equal from different)."""
    return word_signatures([text])[0]


def word_signatures(texts: Sequence[str]) -> np.ndarray:
    docs = [minhash.shingles(t, words=True, n=1) for t in texts]
    return minhash.hasher(WORDS_PERM).signatures(docs).astype(np.uint32)


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


# Literals without which a pattern cannot match: a text is searched only for the kinds whose
# literal it holds (``in`` is a fast scan; the patterns' leading classes are not).
SECRET_LITERALS: dict[str, tuple[str, ...]] = {
    "private_key": ("PRIVATE KEY",),
    "aws_key": ("AKIA", "ASIA"),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "openai_key": ("sk-",),
    "slack_token": ("xox",),
    "jwt": ("eyJ",),
    "url_credentials": ("://",),
    "password_arg": ("passw",),  # searched in the lower-cased text
    "email": ("@",),
}


def secret_rows(batch, kinds: Sequence[str]) -> list[bool]:
    """Which rows of a record batch may hold a secret of these kinds (any text field holds a
    literal of one): only those need ``scrub_transition``. One RE2 scan per column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    literals = [re.escape(lit) for kind in kinds if kind != "password_arg" for lit in SECRET_LITERALS[kind]]
    pattern = "|".join(literals + (["(?i:passw)"] if "password_arg" in kinds else []))
    hit = pa.array([False] * batch.num_rows)
    for column, sub in (("state", "text"), ("next_state", "text"), ("action", "canonical"), ("action", "raw"),
                          ("instruction", None)):  # fmt: skip
        values = batch.column(column)
        values = pc.struct_field(values, sub) if sub else values
        hit = pc.or_(hit, pc.fill_null(pc.match_substring_regex(values, pattern), False))
    return hit.to_pylist()


def placeholder(kind: str, length: int) -> str:
    tag = f"<{kind}>"
    return tag[:length] if length <= len(tag) else tag + "*" * (length - len(tag))


def scrub_text(text: str, kinds: Sequence[str]) -> tuple[str, Counter]:
    counts: Counter = Counter()
    lowered = text.lower() if "password_arg" in kinds else text
    for kind in kinds:
        haystack = lowered if kind == "password_arg" else text
        if not any(literal in haystack for literal in SECRET_LITERALS[kind]):
            continue
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
