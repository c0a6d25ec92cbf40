"""The curation config (YAML), checked completely before any pipeline starts.

Unknown keys are refused; so are impossible values: bands x rows must equal the number of
permutations, thresholds must lie in [0, 1], shingle sizes must be positive. An empty
config, an empty ``domains`` list and a config with every stage disabled are refused as
doing nothing; every eval set file is read and checked line by line here, so Beam never
meets a bad one.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, model_validator

from pipelines.curate.scrub import KINDS as SECRET_KINDS
from schemas.config import StrictConfig as Strict
from schemas.config import load_yaml_model
from schemas.errors import ConfigError
from schemas.transition import DOMAINS


class ExactDedup(Strict):
    enabled: bool = True
    trajectories: bool = True  # drop later copies of a whole trajectory
    transitions: bool = True  # mark transitions whose (masked) step repeats a kept one


class NearDedup(Strict):
    enabled: bool = True
    num_perm: int = Field(128, ge=8, le=1024)
    # 32 x 4: a pair at Jaccard 0.65 shares a band with probability 0.998 (the exact check decides)
    bands: int = Field(32, ge=1)
    rows: int = Field(4, ge=1)
    threshold: float = Field(0.7, ge=0.0, le=1.0)  # exact Jaccard of the shingle sets at which a copy is dropped
    char_ngram: int = Field(5, ge=1, le=64)
    word_ngram: int = Field(5, ge=1, le=32)
    word_domains: list[str] = Field(default_factory=lambda: list(DOMAINS))  # the others: character n-grams
    max_components_rounds: int = Field(12, ge=1, le=64)

    @model_validator(mode="after")
    def _bands_rows(self) -> NearDedup:
        if self.bands * self.rows != self.num_perm:
            raise ValueError(f"bands x rows must equal num_perm: {self.bands} x {self.rows} != {self.num_perm}")
        bad = sorted(set(self.word_domains) - set(DOMAINS))
        if bad:
            raise ValueError(f"unknown domain {bad[0]!r} in word_domains")
        return self


class Quality(Strict):
    enabled: bool = True
    max_truncated_ratio: float = Field(0.5, ge=0.0, le=1.0)  # of a trajectory's steps
    max_repeated_action: int = Field(5, ge=2)  # the same action this many times in a row
    max_state_loop: int = Field(4, ge=2)  # the same masked state this many times
    min_chars: int = Field(0, ge=0)
    max_chars: int = Field(200_000, ge=1)
    max_garbage_ratio: float = Field(0.3, ge=0.0, le=1.0)  # non-printable or replacement characters
    nondeterminism_jaccard: float = Field(0.5, ge=0.0, le=1.0)  # below: the same step gave very different results


class Scrub(Strict):
    """Which kinds of secret curation replaces by placeholders (``pipelines.curate.scrub``)."""

    enabled: bool = True
    kinds: list[str] = Field(default_factory=lambda: list(SECRET_KINDS))

    @model_validator(mode="after")
    def _known_kinds(self) -> Scrub:
        unknown = [k for k in self.kinds if k not in SECRET_KINDS]
        if unknown:
            raise ValueError(f"unknown secret kind {unknown[0]!r} (known: {', '.join(SECRET_KINDS)})")
        return self


class Decontaminate(Strict):
    enabled: bool = True
    # JSONL files: id, task_id, instance_id, extra.source_id, instruction, text, repo, commit / base_commit
    # (a suite from `trajforge tasks import`, or SWE-bench rows, work as they are)
    eval_sets: list[str] = Field(default_factory=list)
    ngram: int = Field(13, ge=3, le=64)


class CurationConfig(Strict):
    name: str = Field("default", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    domains: list[str] | None = Field(None, min_length=1)  # None: every domain
    exact_dedup: ExactDedup = ExactDedup()
    near_dedup: NearDedup = NearDedup()
    quality: Quality = Quality()
    scrub: Scrub = Scrub()
    decontaminate: Decontaminate = Decontaminate()
    max_transitions_per_pass: int = Field(100_000, ge=100)  # Beam passes over groups of runs: bounded memory

    @model_validator(mode="after")
    def _does_something(self) -> CurationConfig:
        stages = (self.exact_dedup, self.near_dedup, self.quality, self.scrub, self.decontaminate)
        if not any(s.enabled for s in stages):
            raise ValueError(
                "every stage is disabled: enable at least one of exact_dedup, near_dedup, quality, scrub, decontaminate"
            )
        return self


def load_curation(path: str | Path) -> CurationConfig:
    """Load and check a curation config, its eval set files included."""
    path = Path(path)
    config = load_yaml_model(path, CurationConfig, "curation config")
    for d in config.domains or []:
        if d not in DOMAINS:
            raise ConfigError(f"{path}: domains: unknown domain {d!r}")
    base = path.parent
    resolved = []
    for e in config.decontaminate.eval_sets:
        found = base / e if (base / e).is_file() else Path(e)
        if not found.is_file():
            raise ConfigError(f"{path}: decontaminate.eval_sets: {e} {'is not a file' if found.exists() else 'not found'}")
        if config.decontaminate.enabled:
            problem = eval_set_problem(found)
            if problem:
                raise ConfigError(f"{path}: decontaminate.eval_sets: {e}: {problem}")
        resolved.append(str(found))
    config.decontaminate.eval_sets = resolved
    return config


# what ``logic.EvalIndex`` matches on: ids, (repo, commit) pairs and the n-grams of texts
EVAL_KEYS: dict[str, tuple[type, ...]] = {"id": (str, int), "task_id": (str, int), "repo": (str,), "commit": (str,)}
EVAL_TEXTS = ("instruction", "text", "observation", "gold")


def eval_set_problem(path: Path) -> str | None:
    """What is wrong with an eval set file, or None: UTF-8 JSONL, one object per line, each
    with something to match on (ids strings or integers, repo/commit strings, or a text),
    and at least one item."""
    items = 0
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except ValueError as exc:
                    return f"line {n}: not JSON ({str(exc).split(':')[0]})"
                except RecursionError:
                    return f"line {n}: JSON nested too deeply"
                if not isinstance(item, dict):
                    return f"line {n}: an eval item must be a JSON object, got {type(item).__name__}"
                for key, value in item.items():
                    types = EVAL_KEYS.get(key)
                    if types and value is not None and (isinstance(value, bool) or not isinstance(value, types)):
                        expected = " or ".join("string" if t is str else "integer" for t in types)
                        return f"line {n}: {key} must be a {expected}, got {type(value).__name__}"
                if not any(item.get(k) for k in EVAL_KEYS) and not any(isinstance(item.get(k), str) for k in EVAL_TEXTS):
                    return f"line {n}: nothing to match on (give id, task_id, repo and commit, or {', '.join(EVAL_TEXTS)})"
                items += 1
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte at offset {exc.start} of a line)"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return None if items else "no eval items (an empty file decontaminates nothing)"
