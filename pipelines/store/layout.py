"""Where things live in a store, and how to list them.

    <store>/raw/<domain>/<run_id>/part-NNNNN.arrow          finished shards of a collection run
    <store>/raw/<domain>/<run_id>/manifest.json             the run manifest (the list of finished shards)
    <store>/curated/<curation_id>/<domain>/part-NNNNN.arrow  what a curation kept (same files, same manifest)
    <store>/rejected/<curation_id>/<domain>/part-NNNNN.arrow what it rejected

Raw trees group by domain first (runs come and go per domain); curation trees group by
curation first (a curation is one unit). One listing serves them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipelines.store.fs import StoreFS
from pipelines.store.manifest import RunManifest
from pipelines.store.shards import is_part_name, parse_part_index, part_name
from schemas.errors import StoreError

__all__ = ["Run", "is_part_name", "parse_part_index", "part_name", "run_dir", "run_dirs"]

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


def run_dirs(sfs: StoreFS, kind: str = "raw", on_outside: Callable[[str], None] | None = None) -> list[tuple[str, str, str]]:
    """(domain, run_id, dir) of every run folder under ``<store>/<kind>``. A folder that
    resolves outside the store (a symbolic link leading out) is left out, and its one-line
    reason given to ``on_outside``."""
    from schemas.transition import DOMAINS

    found = []
    for outer in sfs.listdir(sfs.join(kind)):
        if outer.type.name != "Directory" or outer.base_name.startswith(("_", ".")):
            continue
        for inner in sfs.listdir(outer.path):
            if inner.type.name != "Directory":
                continue
            domain, run_id = (inner.base_name, outer.base_name) if kind in RUN_FIRST else (outer.base_name, inner.base_name)
            if domain not in DOMAINS:
                continue
            try:
                sfs.confine(sfs.root, sfs.rel(inner.path))
            except StoreError as exc:
                if on_outside is not None:
                    on_outside(f"{exc} (run folder not read)")
                continue
            found.append((domain, run_id, inner.path))
    return found
