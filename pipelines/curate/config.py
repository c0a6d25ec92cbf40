"""The curation config (YAML), checked before any pipeline starts.

Unknown keys are refused; so are impossible values: bands x rows must equal the number of
permutations, thresholds must lie in [0, 1], shingle sizes must be positive.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.config import load_yaml_model
from schemas.errors import ConfigError
from schemas.transition import DOMAINS


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExactDedup(Strict):
    enabled: bool = True
    trajectories: bool = True  # drop later copies of a whole trajectory
    transitions: bool = True  # mark transitions whose (masked) step repeats a kept one


class NearDedup(Strict):
    enabled: bool = True
    num_perm: int = Field(128, ge=8, le=1024)
    bands: int = Field(16, ge=1)
    rows: int = Field(8, ge=1)
    threshold: float = Field(0.8, ge=0.0, le=1.0)  # Jaccard that confirms a candidate pair
    char_ngram: int = Field(5, ge=1, le=64)
    word_ngram: int = Field(3, ge=1, le=32)
    word_domains: list[str] = Field(default_factory=lambda: ["search", "web", "mcp"])  # prose-like text
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
    enabled: bool = True
    kinds: list[str] = Field(
        default_factory=lambda: [
            "private_key",
            "aws_key",
            "github_token",
            "openai_key",
            "slack_token",
            "jwt",
            "url_credentials",
            "password_arg",
            "email",
        ]
    )


class Decontaminate(Strict):
    enabled: bool = True
    eval_sets: list[str] = Field(default_factory=list)  # JSONL files: id, task_id, instruction, text, repo, commit
    ngram: int = Field(13, ge=3, le=64)


class CurationConfig(Strict):
    name: str = Field("default", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    domains: list[str] | None = None
    exact_dedup: ExactDedup = ExactDedup()
    near_dedup: NearDedup = NearDedup()
    quality: Quality = Quality()
    scrub: Scrub = Scrub()
    decontaminate: Decontaminate = Decontaminate()
    max_transitions_per_pass: int = Field(100_000, ge=100)  # Beam passes over groups of runs: bounded memory


def load_curation(path: str | Path) -> CurationConfig:
    path = Path(path)
    config = load_yaml_model(path, CurationConfig, "curation config")
    for d in config.domains or []:
        if d not in DOMAINS:
            raise ConfigError(f"{path}: domains: unknown domain {d!r}")
    base = path.parent
    missing = [e for e in config.decontaminate.eval_sets if not (base / e).is_file() and not Path(e).is_file()]
    if missing:
        raise ConfigError(f"{path}: decontaminate.eval_sets: {missing[0]} not found")
    config.decontaminate.eval_sets = [str(base / e) if (base / e).is_file() else e for e in config.decontaminate.eval_sets]
    return config
