"""Where things live in a store, and how to list them.

    <store>/raw/<domain>/<run_id>/part-NNNNN.arrow   finished shards
    <store>/raw/<domain>/<run_id>/manifest.json      the run manifest (the list of finished shards)

Later stages add sibling trees (``curated/``, ``rejected/``, ``releases/``) with the same
run-folder layout, so one listing serves them all.
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


def run_dir(sfs: StoreFS, kind: str, domain: str, run_id: str) -> str:
    return sfs.join(kind, domain, run_id)


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
    found = []
    for domain_info in sfs.listdir(sfs.join(kind)):
        if domain_info.type.name != "Directory":
            continue
        for run_info in sfs.listdir(domain_info.path):
            if run_info.type.name == "Directory":
                found.append((domain_info.base_name, run_info.base_name, run_info.path))
    return found


def list_runs(sfs: StoreFS, kind: str = "raw") -> list[Run]:
    """Runs with a manifest; a run folder without one has no finished shard yet."""
    runs = []
    for domain, run_id, path in run_dirs(sfs, kind):
        manifest = RunManifest.load(sfs, path)
        if manifest is not None:
            runs.append(Run(kind, domain, run_id, path, manifest))
    return runs
