"""What a release build counts: ``Stats``, filled by each worker as it writes samples and
summed by the driver, and ``ReleaseReport``, what ``create_release`` answers.

Each worker writes its ``Stats`` as JSON beside its sample files (``stats-<name>.json``);
the driver merges them (``pipelines.tally.Tally``) to plan the mixture and to fill the
card and the report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipelines.release.config import SPLITS
from pipelines.tally import Tally


@dataclass
class Stats(Tally):
    """Per (stage, split, domain): samples and tokens; per (stage, reason): samples dropped
    for length; per licence: trajectories that name it. Keys are ``|``-joined strings, so
    the JSON form is flat."""

    rows: Counter = field(default_factory=Counter)  # "stage|split|domain" -> samples
    tokens: Counter = field(default_factory=Counter)  # "stage|split|domain" -> tokens
    dropped: Counter = field(default_factory=Counter)  # "stage|reason" -> samples left out
    licenses: Counter = field(default_factory=Counter)  # licence -> trajectories
    sources: Counter = field(default_factory=Counter)  # "origin|source|licence" -> trajectories

    def add(self, stage: str, sample: dict[str, Any]) -> None:
        key = f"{stage}|{sample['split']}|{sample['domain']}"
        self.rows[key] += 1
        self.tokens[key] += sample["tokens"]

    def drops(self) -> dict[str, dict[str, int]]:
        """{stage: {reason: samples}} dropped for length."""
        out: dict[str, dict[str, int]] = {}
        for key, n in sorted(self.dropped.items()):
            stage, reason = key.split("|")
            out.setdefault(stage, {})[reason] = n
        return out

    def by(self, what: str, stage: str, split: str | None = None) -> dict[str, int]:
        """{domain: rows or tokens} of a stage (and split)."""
        out: Counter = Counter()
        for key, n in (self.rows if what == "rows" else self.tokens).items():
            st, sp, domain = key.split("|")
            if st == stage and (split is None or sp == split):
                out[domain] += n
        return dict(sorted(out.items()))


@dataclass
class ReleaseReport:
    """What a build made (or found already made): samples and tokens per stage and split,
    the mixture's shortfalls, what was dropped for length, and the tokenizer shipped."""

    name: str
    version: str
    path: str
    samples: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> split -> rows
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    shortfall: dict[str, dict[str, float]] = field(default_factory=dict)
    identical: bool = False  # the version existed with exactly this content
    tokenizer: dict[str, Any] = field(default_factory=dict)  # what ship_tokenizer wrote (the card states it)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> length reason -> samples left out
    lengths: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> p50/p90/p99/max tokens per sample
    input_hash: str = ""  # what the release was built from (input_hash): an unchanged rerun answers without building

    def count(self, stage: str, split: str, rows: int, tokens: int) -> None:
        """Add a data file's rows and tokens to its stage and split."""
        self.samples.setdefault(stage, {}).setdefault(split, 0)
        self.samples[stage][split] += rows
        self.tokens.setdefault(stage, {}).setdefault(split, 0)
        self.tokens[stage][split] += tokens

    def summary(self) -> str:
        lines = [f"release {self.name} {self.version} at {self.path}{' (already there, identical)' if self.identical else ''}"]
        for stage, splits in self.samples.items():
            parts = ", ".join(f"{s} {splits.get(s, 0):,} samples / {self.tokens[stage].get(s, 0):,} tokens" for s in SPLITS)
            lines.append(f"  {stage}: {parts}")
        for stage, lacks in self.shortfall.items():
            for domain, n in lacks.items():
                lines.append(f"  shortfall: {stage} {domain} lacks {n:,.0f} tokens of its target")
        for stage, reasons in self.dropped.items():
            if reasons:
                parts = ", ".join(f"{n:,} {reason}" for reason, n in sorted(reasons.items()))
                lines.append(f"  dropped for length: {stage} {parts} (over max_tokens)")
        return "\n".join(lines)
