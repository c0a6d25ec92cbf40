"""Where things live in a store, and how to list them.

    <store>/raw/<domain>/<run_id>/part-NNNNN.arrow          finished shards of a collection run
    <store>/raw/<domain>/<run_id>/manifest.json             the run manifest (the list of finished shards)
    <store>/curated/<curation_id>/<domain>/part-NNNNN.arrow  what a curation kept (same files, same manifest)
    <store>/rejected/<curation_id>/<domain>/part-NNNNN.arrow what it rejected

Raw trees group by domain first (runs come and go per domain); curation trees group by
curation first (a curation is one unit). One listing serves them all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipelines.store.fs import StoreFS
from pipelines.store.manifest import RunManifest
from pipelines.store.shards import SHARD_SUFFIX

_PART = re.compile(r"^part-(\d{5,})\.arrow$")


def part_name(index: int) -> str:
    return f"part-{index:05d}{SHARD_SUFFIX}"


def parse_part_index(name: str) -> int:
    m = _PART.match(name)
    if not m:
        raise ValueError(f"not a shard name: {name!r}")
    return int(m.group(1))


def is_part_name(name: str) -> bool:
    return bool(_PART.match(name))


RUN_FIRST = frozenset({"curated", "rejected"})


def run_dir(sfs: StoreFS, kind: str, domain: str, run_id: str) -> str:
    return sfs.join(kind, run_id, domain) if kind in RUN_FIRST else sfs.join(kind, domain, run_id)


@dataclass(frozen=True)
class Run:
    """One run folder of a store with its manifest."""

    kind: str
    domain: str
    run_id: str
    dir: str
    manifest: RunManifest

    def shard_paths(self) -> list[str]:
        return [f"{self.dir}/{s.path}" for s in self.manifest.shards]


def run_dirs(sfs: StoreFS, kind: str = "raw") -> list[tuple[str, str, str]]:
    """(domain, run_id, dir) of every run folder under ``<store>/<kind>``."""
    from schemas.transition import DOMAINS

    found = []
    for outer in sfs.listdir(sfs.join(kind)):
        if outer.type.name != "Directory" or outer.base_name.startswith(("_", ".")):
            continue
        for inner in sfs.listdir(outer.path):
            if inner.type.name != "Directory":
                continue
            domain, run_id = (inner.base_name, outer.base_name) if kind in RUN_FIRST else (outer.base_name, inner.base_name)
            if domain in DOMAINS:
                found.append((domain, run_id, inner.path))
    return found


def list_runs(sfs: StoreFS, kind: str = "raw") -> list[Run]:
    """Runs with a manifest; a run folder without one has no finished shard yet."""
    runs = []
    for domain, run_id, path in run_dirs(sfs, kind):
        manifest = RunManifest.load(sfs, path)
        if manifest is not None:
            runs.append(Run(kind, domain, run_id, path, manifest))
    return runs
