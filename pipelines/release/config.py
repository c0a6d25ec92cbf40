"""The mixture config (YAML): which curated data, how it becomes CPT/SFT/RL samples, how
much of each domain each stage gets, and how samples split. Checked before any work.

    curations: all                # or a list of curation ids
    tokenizer: tokenizer.json     # a Hugging Face tokenizer (tokenizer.json or its folder)
    seed: 0
    splits: {validation: 0.05, test: 0.05, held_out_envs: []}
    stages:
      sft: {token_budget: 5000000, weights: {terminal: 2, swe: 1}, max_epochs: 2, max_prompt_tokens: 4096,
            max_tokens: 4096}     # the most tokens a sample may have as training renders it (null: no limit)
    license: apache-2.0           # Hugging Face licence id; null: from the sources' licences
    language: [en]                # null: en
    simulated: {use: exclude}     # trajectories a world model simulated: exclude (default) | include | cap
                                  # (cap: {use: cap, max_share: 0.2} of the trajectories at most)
    provenance: {executed: [executed]}   # the default: only executed next states (see ProvenanceFilter)

Weights are relative (any positive numbers; domains not named get 0 unless ``weights`` is
empty, which means every domain in proportion to what exists). Budgets and weights apply
to the train split; validation and test take every sample of their tasks.

``max_tokens`` is a hard limit per sample: SFT and RL samples drop their oldest history
until they fit, the target is never cut, and a sample that cannot fit even without
history is dropped and counted with its reason (``pipelines.release.samples``).

A mixture that can build nothing is refused: an empty file, ``stages: {}``, every stage
disabled, ``curations: []``, or weights that sum to 0.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from schemas.config import StrictConfig as Strict
from schemas.config import load_yaml_model
from schemas.transition import DOMAINS, STOP_REASONS

STAGES = ("cpt", "sft", "rl")
SPLITS = ("train", "validation", "test")
ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # names that become folder names: no separators, no ..
LICENSE = r"^[a-z0-9][a-z0-9.+_-]{0,63}$"  # Hugging Face's licence ids: apache-2.0, cc-by-4.0, other
LANGUAGE = r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$"


class Stage(Strict):
    enabled: bool = True
    token_budget: int | None = Field(None, ge=1)  # train tokens; None: everything, once
    weights: dict[str, float] = Field(default_factory=dict)
    max_epochs: float = Field(1.0, ge=1.0, le=100.0)  # the most times any sample may repeat
    context_tokens: int = Field(4096, ge=64)  # CPT: documents split at turn boundaries past this
    max_prompt_tokens: int = Field(4096, ge=64)  # SFT/RL: oldest history turns dropped past this
    max_tokens: int | None = Field(None, ge=64)  # a sample's whole length as training renders it; None: no limit

    @model_validator(mode="after")
    def _weights(self) -> Stage:
        for domain, w in self.weights.items():
            if domain not in DOMAINS:
                raise ValueError(f"unknown domain {domain!r} in weights")
            if w < 0 or w != w:
                raise ValueError(f"weight of {domain} must be >= 0, got {w}")
        if self.weights and sum(self.weights.values()) <= 0:
            raise ValueError("weights sum to 0: give at least one domain a positive weight")
        return self


class Splits(Strict):
    validation: float = Field(0.05, ge=0.0, lt=1.0)
    test: float = Field(0.05, ge=0.0, lt=1.0)
    held_out_envs: list[str] = Field(default_factory=list)  # every task of these environments goes to test

    @model_validator(mode="after")
    def _sum(self) -> Splits:
        if self.validation + self.test >= 1.0:
            raise ValueError(f"validation + test must leave room for train: {self.validation} + {self.test} >= 1")
        return self


class Simulated(Strict):
    """What a release does with simulated trajectories (``provenance.simulated``): left out
    by default, so a world model is never trained on its own outputs by accident."""

    use: Literal["exclude", "include", "cap"] = "exclude"
    max_share: float | None = Field(None, gt=0.0, lt=1.0)  # cap: simulated trajectories / all kept ones
    keep_below: float | None = Field(None, ge=0.0, le=1.0)  # set by the build for cap (recorded in the manifest)

    @model_validator(mode="after")
    def _cap(self) -> Simulated:
        if (self.use == "cap") != (self.max_share is not None):
            raise ValueError("max_share goes with use: cap, and use: cap needs max_share")
        return self


class ProvenanceFilter(Strict):
    """Which trajectories a release takes by where they came from (``provenance.origin``:
    collected, imported; simulated ones follow ``simulated:``) and whether their next states
    were produced by executing the actions (``provenance.executed``). By default only
    executed ones: a world model is never trained on generated, mocked or summarised
    observations, nor on ones nobody can vouch for, unless the mixture asks
    (``executed: [executed, unknown]``)."""

    origins: list[Literal["collected", "imported", "simulated"]] = Field(
        default_factory=lambda: ["collected", "imported", "simulated"]
    )
    executed: list[Literal["executed", "not_executed", "unknown"]] = Field(default_factory=lambda: ["executed"])
    # caps: an origin or an executed value -> the most share of the release's trajectories it
    # may have (e.g. {imported: 0.5, unknown: 0.1}); kept: the lowest seeded hashes, as simulated: cap
    max_share: dict[Literal["collected", "imported", "simulated", "executed", "not_executed", "unknown"], float] = Field(
        default_factory=dict
    )
    keep_below: dict[str, float] = Field(default_factory=dict)  # set by the build for max_share (recorded in the manifest)
    # why the episode ended (schemas.transition.STOP_REASONS; none: not recorded); None takes every one
    stop_reasons: list[Literal[(*STOP_REASONS, "none")]] | None = None  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _some(self) -> ProvenanceFilter:
        if not self.origins or not self.executed or self.stop_reasons == []:
            raise ValueError("origins, executed and stop_reasons each need at least one value (else the release is empty)")
        for key, share in self.max_share.items():
            if not 0.0 < share < 1.0:
                raise ValueError(f"max_share of {key} must be in (0, 1), got {share}")
        return self


class MixtureConfig(Strict):
    name: str = Field("default", pattern=ID)
    curations: str | list[str] = "all"
    tokenizer: str = "tokenizer.json"
    seed: int = 0
    strict: bool = False  # refuse a budget that the data cannot meet (else: report the shortfall)
    license: str | None = Field(None, pattern=LICENSE)  # a Hugging Face licence id; None: from the sources
    license_name: str | None = Field(None, pattern=LICENSE)  # with license: other (Hugging Face's rule)
    license_link: str | None = Field(None, min_length=1, max_length=500)
    language: list[str] | None = None  # ISO 639 codes; None: en
    splits: Splits = Splits()
    stages: dict[str, Stage] = Field(default_factory=lambda: {s: Stage() for s in STAGES})
    simulated: Simulated = Simulated()
    provenance: ProvenanceFilter = ProvenanceFilter()

    @field_validator("curations")
    @classmethod
    def _curation_ids(cls, value: str | list[str]) -> str | list[str]:
        ids = [value] if isinstance(value, str) and value != "all" else value
        if isinstance(ids, list) and (not ids or not all(re.match(ID, i) for i in ids)):
            raise ValueError(f"give 'all' or a list of curation ids (letters, digits, '.', '_', '-'), got {value!r}")
        return ids

    @field_validator("language", mode="before")
    @classmethod
    def _languages(cls, value: object) -> object:
        value = [value] if isinstance(value, str) else value
        if isinstance(value, list) and not all(isinstance(v, str) and re.match(LANGUAGE, v) for v in value):
            raise ValueError(f"give ISO 639 language codes such as [en] or [en, zh], got {value!r}")
        return value

    @model_validator(mode="after")
    def _license(self) -> MixtureConfig:
        if (self.license_name or self.license_link) and self.license not in (None, "other"):
            raise ValueError(f"license_name and license_link go with license: other, not {self.license!r}")
        return self

    @model_validator(mode="after")
    def _stages(self) -> MixtureConfig:
        for stage in self.stages:
            if stage not in STAGES:
                raise ValueError(f"unknown stage {stage!r} (expected {', '.join(STAGES)})")
        if not self.enabled():
            raise ValueError(f"no stage to build: enable at least one of {', '.join(STAGES)} under stages")
        return self

    def enabled(self) -> list[str]:
        return [s for s in STAGES if s in self.stages and self.stages[s].enabled]


def load_mixture(path: str | Path, store: str | None = None) -> MixtureConfig:
    """Load and check a mixture config; the tokenizer path is resolved against the config's
    folder, then the store."""
    path = Path(path)
    cfg = load_yaml_model(path, MixtureConfig, "mixture config")
    for base in (path.parent, Path(store) if store else None):
        if base is not None and not Path(cfg.tokenizer).is_absolute() and (base / cfg.tokenizer).exists():
            cfg.tokenizer = str(base / cfg.tokenizer)
            break
    return cfg
