"""Where things live in a store: every path of a store is named here, and nowhere else.

    <store>/raw/<domain>/<run_id>/part-NNNNN.arrow           finished shards of a collection run
    <store>/raw/<domain>/<run_id>/manifest.json              the run manifest (the list of finished shards)
    <store>/raw/<domain>/<run_id>/.lock                      held by the run's one writer
    <store>/curated/<curation_id>/<domain>/part-NNNNN.arrow  what a curation kept (same files, same manifest)
    <store>/curated/<curation_id>/attributes.parquet         why each transition was kept (and flags)
    <store>/curated/<curation_id>/report.json                the curation's report
    <store>/curated/_index/<curation_id>/                    kept trajectories' and steps' keys (later curations dedupe on them)
    <store>/curated/_index/<curation_id>.json                the marker written after them: the curation is finished
    <store>/rejected/<curation_id>/<domain>/part-NNNNN.arrow what it rejected (and attributes.parquet, why)
    <store>/jobs/<job_id>/.lock[-sIofN]                      held by the running job (or shard I of N of it)
    <store>/jobs/<job_id>/ledger.jsonl                       one line per episode attempted (local stores append)
    <store>/jobs/<job_id>/ledger/<run_id>.jsonl              the same, one object per run (object stores, Beam units)
    <store>/jobs/<job_id>/runs/<run_id>.json                 each run's summary
    <store>/jobs/<job_id>/staging/                           Beam units being written (local stores)
    <store>/releases/<name>/<version>/manifest.json          a release (its data files beside the manifest)
    <store>/runs/<name>/                                     training outputs kept with the store

Raw trees group by domain first (runs come and go per domain); curation trees group by
curation first (a curation is one unit). One listing (``run_dirs``) serves them all.
``Layout`` gives every path from the store's root (a local path or an object store's
``bucket/prefix``); ``Store.layout`` is the one of an open store::

    store.layout.run_dir("raw", "web", "r1")      # <root>/raw/web/r1
    store.layout.job_ledger("nightly", "r1")      # <root>/jobs/nightly/ledger/r1.jsonl
    store.layout.release_dir("demo", "v1")        # <root>/releases/demo/v1
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass

from pipelines.store.fs import StoreFS
from schemas.errors import StoreError

__all__ = [
    "LOCK",
    "MANIFEST",
    "PARTIAL_SUFFIX",
    "SHARD_SUFFIX",
    "TREES",
    "Layout",
    "is_part_name",
    "parse_part_index",
    "part_name",
    "run_dir",
    "run_dirs",
]

MANIFEST = "manifest.json"  # of a run folder and of a release: written last, it is the commit
LOCK = ".lock"
SHARD_SUFFIX = ".arrow"
PARTIAL_SUFFIX = ".partial"
TREES = ("raw", "curated", "rejected")  # the trees of run folders (shards and run manifests)
RUN_FIRST = frozenset({"curated", "rejected"})
INDEX = "_index"
ATTRIBUTES = "attributes.parquet"  # of a curation tree: one row per transition, why it is there
LEDGER = "ledger.jsonl"  # a job's appended ledger
LEDGERS = "ledger"  # a job's folder of one-object-per-run ledgers
_PART = re.compile(r"part-(\d{5,})\.arrow")


def part_name(index: int) -> str:
    return f"part-{index:05d}{SHARD_SUFFIX}"


def parse_part_index(name: str) -> int:
    m = _PART.fullmatch(name)
    if not m:
        raise ValueError(f"not a shard name: {name!r}")
    return int(m.group(1))


def is_part_name(name: str) -> bool:
    """A finished shard's file name, ``part-NNNNN.arrow``: a plain name, never a path."""
    return bool(_PART.fullmatch(name))


@dataclass(frozen=True)
class Layout:
    """Every path of the store rooted at ``root`` (see the module docstring)."""

    root: str

    def join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    # -- run folders: raw, curated, rejected -----------------------------------------------------
    def tree(self, kind: str) -> str:
        return self.join(kind)

    def run_dir(self, kind: str, domain: str, run_id: str) -> str:
        return self.join(kind, run_id, domain) if kind in RUN_FIRST else self.join(kind, domain, run_id)

    @staticmethod
    def manifest(folder: str) -> str:
        """The manifest of a run folder or a release folder."""
        return f"{folder}/{MANIFEST}"

    @staticmethod
    def run_lock(run_dir: str) -> str:
        return f"{run_dir}/{LOCK}"

    # -- curations -------------------------------------------------------------------------------
    def curation_dir(self, cid: str, tree: str = "curated") -> str:
        return self.join(tree, cid)

    def curation_attributes(self, cid: str, tree: str = "curated") -> str:
        return self.join(tree, cid, ATTRIBUTES)

    def curation_report(self, cid: str) -> str:
        return self.join("curated", cid, "report.json")

    def index_root(self) -> str:
        return self.join("curated", INDEX)

    def index_dir(self, cid: str) -> str:
        return self.join("curated", INDEX, cid)

    def index_marker(self, cid: str) -> str:
        return self.join("curated", INDEX, f"{cid}.json")

    # -- collection jobs -------------------------------------------------------------------------
    def job_dir(self, job_id: str) -> str:
        return self.join("jobs", job_id)

    def job_lock(self, job_id: str, shard: tuple[int, int] = (0, 1)) -> str:
        index, count = shard
        return self.join("jobs", job_id, LOCK + (f"-s{index}of{count}" if count > 1 else ""))

    def job_ledger(self, job_id: str, run_id: str | None = None) -> str:
        """The job's appended ledger, or the one object of run ``run_id``'s lines."""
        if run_id is None:
            return self.join("jobs", job_id, LEDGER)
        return self.join("jobs", job_id, LEDGERS, f"{run_id}.jsonl")

    def job_ledger_dir(self, job_id: str) -> str:
        return self.join("jobs", job_id, LEDGERS)

    def job_runs_dir(self, job_id: str) -> str:
        return self.join("jobs", job_id, "runs")

    def job_run_summary(self, job_id: str, run_id: str) -> str:
        return self.join("jobs", job_id, "runs", f"{run_id}.json")

    def job_staging(self, job_id: str) -> str:
        return self.join("jobs", job_id, "staging")

    # -- releases and training runs --------------------------------------------------------------
    def releases_root(self) -> str:
        return self.join("releases")

    def release_dir(self, name: str, version: str | None = None) -> str:
        return self.join("releases", name) if version is None else self.join("releases", name, version)

    def training_run(self, name: str) -> str:
        return self.join("runs", name)


def run_dir(sfs: StoreFS, kind: str, domain: str, run_id: str) -> str:
    return Layout(sfs.root).run_dir(kind, domain, run_id)


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
