"""What a release reads, and one hash of all of it.

A release is built from finished curations: their curated shards, ``attributes.parquet``
(targets excluded from samples), ``_index`` (the raw shards read), ``report.json``, and the
reasoning texts ``trajforge distill`` wrote beside the shards
(``distill/<curation>/<domain>/part-NNNNN.parquet``). ``input_hash`` hashes those, the
mixture config, the tokenizer, this code and the library versions, without reading a
shard: a rerun with the same hash answers from the release already there.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pipelines.release.config import MixtureConfig
from pipelines.release.tokens import tokenizer_hash
from pipelines.store import Store
from pipelines.store.shards import file_sha256, read_column
from schemas.errors import ConfigError

INPUTS = "trajforge.release-inputs/1"


def curations(store: Store, cfg: MixtureConfig) -> list[str]:
    """The finished curations (a ``report.json`` written) that the mixture names, or all of them."""
    sfs, layout = store.sfs, store.layout
    done = sorted(
        i.base_name
        for i in sfs.listdir(layout.tree("curated"))
        if i.type.name == "Directory" and sfs.exists(layout.curation_report(i.base_name))
    )
    if not done:
        raise ConfigError(f"{store.uri}: no finished curation to release: run trajforge curate first")
    if cfg.curations == "all":
        return done
    for cid in cfg.curations:
        if cid not in done:
            raise ConfigError(f"curations: {cid!r} is not a finished curation in {store.uri} (have: {', '.join(done)})")
    return list(cfg.curations)


def input_shards(store: Store, cids: list[str], digests: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(curation id, shard path) of every curated shard, in a stable order; ``digests`` gets
    each shard's sha256 (its manifest's, checked on reading)."""
    shards = [s for s in store.readable_shards("curated") if s.run.run_id in cids]
    if digests is not None:
        digests.update({s.path: s.entry.sha256 for s in shards})
    return sorted((s.run.run_id, s.path) for s in shards)


def split_trajectories(store: Store, shards: list[tuple[str, str]]) -> set[str]:
    """Trajectories whose rows are not one contiguous run of one shard (rare: a writer
    rolled mid-run, or interleaved writers): these are grouped by trajectory in Beam, all
    others are built while a shard streams by."""
    seen: dict[str, int] = {}
    spanning = set()
    for i, (_, path) in enumerate(shards):
        previous = None
        for t in read_column(store.sfs, path, "trajectory_id").to_pylist():
            if t != previous:
                if t in seen:  # a second run of rows: another shard, or later in this one
                    spanning.add(t)
                seen[t] = i
                previous = t
    return spanning


def excluded_ids(store: Store | str, cid: str) -> set[str]:
    """Kept transitions that curation marked ``exclude_as_target``: never a sample's target."""
    store = Store.open(store)
    sfs = store.sfs
    table = pq.read_table(
        store.layout.curation_attributes(cid),
        columns=["transition_id"],
        filesystem=sfs.fs,
        filters=[("exclude_as_target", "=", True), ("status", "=", "kept")],
    )
    return set(table.column("transition_id").to_pylist())


def distill_path(store: Store, shard_path: str) -> str:
    """Where ``trajforge distill`` writes the reasoning texts of a curated shard."""
    rel = os.path.relpath(shard_path, store.layout.tree("curated"))
    return store.sfs.join("distill", os.path.splitext(rel)[0] + ".parquet")


def reasoning_for(store: Store | str, shard_path: str) -> dict[str, str]:
    """Reasoning texts a distillation job wrote for a curated shard (``trajforge distill``)."""
    store = Store.open(store)
    sfs = store.sfs
    path = distill_path(store, shard_path)
    if not sfs.exists(path):
        return {}
    table = pq.read_table(path, columns=["transition_id", "reasoning"], filesystem=sfs.fs)
    return dict(zip(table.column("transition_id").to_pylist(), table.column("reasoning").to_pylist(), strict=True))


def library_versions() -> dict[str, str]:
    """trajforge's and the libraries' versions that a release's bytes may depend on."""
    from importlib import metadata

    out = {}
    for pkg in ("trajforge", "pyarrow", "apache-beam", "tokenizers", "numpy", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _code_sha256() -> str:
    """The source of the code that decides a release's content (sample layouts, records)."""
    h = hashlib.sha256()
    for package in ("pipelines/release", "schemas"):
        for path in sorted(Path(__file__).resolve().parents[2].joinpath(package).glob("*.py")):
            h.update(f"{package}/{path.name}\x00".encode() + path.read_bytes() + b"\x00")
    return h.hexdigest()


def input_hash(
    store: Store,
    cfg: MixtureConfig,
    cids: list[str],
    shards: list[tuple[str, str]],
    digests: dict[str, str],
    name: str,
    version: str,
    rows_per_file: int,
) -> str:
    """A hash of everything a release is built from: the curations' shards (their manifests'
    sha256), attributes and indexes and what the release reads of their reports (not their
    timings), the distillation files read, the mixture config, the tokenizer, the code and
    library versions. Paths are relative to the store, so the same
    inputs in another store hash the same. Reads no shard (only the small files are hashed)."""
    sfs, layout = store.sfs, store.layout

    def sha(path: str) -> str | None:
        return file_sha256(sfs, path) if sfs.exists(path) else None

    def report(cid: str) -> dict[str, Any]:  # the parts a release reads (the card, the lineage): not its timings
        body = json.loads(sfs.read_bytes(layout.curation_report(cid)))
        return {k: body.get(k) for k in ("config", "kept", "rejected", "by_reason")}

    curated = {
        cid: {"report": report(cid), "attributes": sha(layout.curation_attributes(cid)), "index": sha(layout.index_marker(cid))}
        for cid in cids
    }
    body = {
        "format": INPUTS,
        "release": [name, version, rows_per_file],
        "config": json.loads(json.dumps(cfg.model_dump(mode="json") | {"tokenizer": Path(cfg.tokenizer).name})),
        "tokenizer": tokenizer_hash(cfg.tokenizer),
        "curations": curated,
        "shards": [[cid, sfs.rel(path), digests.get(path), sha(distill_path(store, path))] for cid, path in shards],
        "code": [_code_sha256(), library_versions()],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
