"""Splits and mixture sampling, deterministic and decided per sample (no global sort).

- **Split**: by task within its environment. ``split_of`` hashes (seed, domain, env_id,
  task_id) to [0, 1): below ``test`` -> test, below ``test + validation`` -> validation,
  else train; every task of a held-out environment goes to test. All samples of a task
  land in one split, whatever the stage.
- **Mixture** (train only): a stage's token budget is shared among domains by weight;
  each domain's samples are taken ``m`` times, ``m = target / available`` (capped at
  ``max_epochs``): ``floor(m)`` copies, and one more for a seeded hash below ``m`` mod 1.
  A domain that cannot meet its target even at ``max_epochs`` is a *shortfall*: reported,
  or refused when the config is ``strict``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from pipelines.release.config import MixtureConfig
from schemas.errors import ConfigError


def unit(*parts: object) -> float:
    """A seeded hash of the parts in [0, 1)."""
    h = hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


def split_of(cfg: MixtureConfig, domain: str, env_id: str, task_id: str) -> str:
    if env_id in cfg.splits.held_out_envs:
        return "test"
    u = unit(cfg.seed, "split", domain, env_id, task_id)
    if u < cfg.splits.test:
        return "test"
    if u < cfg.splits.test + cfg.splits.validation:
        return "validation"
    return "train"


@dataclass
class StagePlan:
    """How often each domain's train samples are taken, and what that gives."""

    multiplier: dict[str, float] = field(default_factory=dict)
    available: dict[str, int] = field(default_factory=dict)  # train tokens per domain
    target: dict[str, float] = field(default_factory=dict)
    shortfall: dict[str, float] = field(default_factory=dict)  # tokens the budget asked for and the data lacks


def plan(cfg: MixtureConfig, available: dict[str, dict[str, int]]) -> dict[str, StagePlan]:
    """``available[stage][domain]`` = train tokens built -> a plan per stage."""
    plans = {}
    for stage in cfg.enabled():
        s = cfg.stages[stage]
        have = {d: n for d, n in available.get(stage, {}).items() if n > 0}
        p = StagePlan(available=dict(sorted(have.items())))
        weights = s.weights or {d: float(n) for d, n in have.items()}
        total_w = sum(weights.values())
        budget = s.token_budget if s.token_budget is not None else sum(have.values())
        for domain, w in sorted(weights.items()):
            if w <= 0:
                continue
            target = budget * w / total_w if total_w else 0.0
            p.target[domain] = target
            n = have.get(domain, 0)
            m = target / n if n else 0.0
            if m > s.max_epochs or n == 0:
                p.shortfall[domain] = target - n * min(m, s.max_epochs)
                m = min(m, s.max_epochs)
            p.multiplier[domain] = m
        if cfg.strict and p.shortfall:
            domain, lack = max(p.shortfall.items(), key=lambda kv: kv[1])
            raise ConfigError(
                f"stages.{stage}.token_budget: {budget} tokens cannot be met: {domain} lacks {lack:.0f} tokens "
                f"even at max_epochs {s.max_epochs} (strict: set strict: false to take what exists)"
            )
        plans[stage] = p
    return plans


def copies(cfg: MixtureConfig, stage: str, sample_id: str, multiplier: float) -> int:
    """How many times a train sample is taken under its domain's multiplier."""
    whole = math.floor(multiplier)
    return whole + (unit(cfg.seed, "take", stage, sample_id) < multiplier - whole)
