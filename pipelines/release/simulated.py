"""Simulated trajectories in a release (``simulated:`` of the mixture config): plain functions.

A trajectory is simulated when its transitions' ``provenance.simulated`` is true (a world
model played the environment, ``simulate``). ``exclude`` (the default) leaves every
one out, so a world model is never trained on its own outputs by accident; ``include``
takes them like real ones; ``cap`` takes at most ``max_share`` of the kept trajectories:
the simulated ones with the lowest seeded hashes of their trajectory ids, so the choice is
deterministic, decided per trajectory, and the same on every worker. The build counts real
and simulated trajectories once (two small columns per shard) and records the hash bound
as ``simulated.keep_below`` in the release's config.
"""

from __future__ import annotations

import math

import pyarrow.compute as pc

from pipelines.release.config import MixtureConfig
from pipelines.release.mixture import unit
from schemas.errors import ConfigError


def trajectory_hash(cfg: MixtureConfig, trajectory_id: str) -> float:
    return unit(cfg.seed, "simulated", trajectory_id)


def cap_bound(cfg: MixtureConfig, real: int, simulated: list[str]) -> float:
    """The hash bound that keeps the most simulated trajectories within ``max_share``."""
    share = cfg.simulated.max_share or 0.0
    keep = min(len(simulated), math.floor(share * real / (1.0 - share) + 1e-9))
    hashes = sorted(trajectory_hash(cfg, t) for t in set(simulated))
    return hashes[keep] if keep < len(hashes) else 1.0


def resolve(cfg: MixtureConfig, store, shards: list[tuple[str, str]]) -> MixtureConfig:
    """For ``use: cap``, the config with its ``keep_below`` bound counted from the shards."""
    if cfg.simulated.use != "cap":
        return cfg
    from pipelines.store.shards import read_column

    real: set[str] = set()
    simulated: set[str] = set()
    for _, path in shards:
        ids = read_column(store.sfs, path, "trajectory_id").to_pylist()
        flags = pc.struct_field(read_column(store.sfs, path, "provenance").combine_chunks(), "simulated").to_pylist()
        for tid, sim in zip(ids, flags, strict=True):
            (simulated if sim else real).add(tid)
    bound = cap_bound(cfg, len(real), sorted(simulated))
    return cfg.model_copy(update={"simulated": cfg.simulated.model_copy(update={"keep_below": bound})})


def keeps(cfg: MixtureConfig, traj) -> bool:
    """Whether a trajectory's samples go into the release: by its origin and whether it
    was executed (``cfg.provenance``; a simulated one is never executed, and follows
    ``cfg.simulated`` instead), then by ``cfg.simulated``."""
    prov = traj.first.provenance
    if prov.origin not in cfg.provenance.origins:
        return False
    if not prov.simulated and prov.executed not in cfg.provenance.executed:
        return False
    if not prov.simulated or cfg.simulated.use == "include":
        return True
    if cfg.simulated.use == "exclude":
        return False
    if cfg.simulated.keep_below is None:
        raise ConfigError("simulated: use: cap was not resolved against the data (call simulated.resolve)")
    return trajectory_hash(cfg, traj.first.trajectory_id) < cfg.simulated.keep_below
