"""What a built release records about itself: ``lineage.json`` (raw runs -> curations ->
this release) and ``manifest.json`` (every file with its sha256, bytes, rows and tokens,
the sample schemas' hashes, the config, the plan, the code and library versions).

``pipelines.release.manifest`` reads and checks what ``build_manifest`` writes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipelines.release import mixture
from pipelines.release.config import MixtureConfig
from pipelines.release.inputs import library_versions
from pipelines.release.layout import SCHEMAS, data_files, schema_hash
from pipelines.release.stats import ReleaseReport
from pipelines.release.tokens import tokenizer_hash
from pipelines.store import Store
from pipelines.store.fs import LOCAL
from pipelines.store.shards import file_sha256


def config_hash(cfg: MixtureConfig) -> str:
    """The mixture config's identity, wherever its tokenizer file lies."""
    body = cfg.model_dump(mode="json")
    body["tokenizer"] = Path(cfg.tokenizer).name  # where the file lies is not content
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def lineage_of(store: Store, cids: list[str], name: str, version: str) -> dict[str, Any]:
    """raw runs -> curations -> this release."""
    curated = {}
    sfs = store.sfs
    for cid in cids:
        index = store.layout.index_marker(cid)
        inputs = json.loads(sfs.read_bytes(index))["inputs"] if sfs.exists(index) else []
        report = json.loads(sfs.read_bytes(store.layout.curation_report(cid)))
        runs = sorted({os.path.dirname(rel) for rel in inputs})
        curated[cid] = {
            "config": report.get("config"),
            "raw_runs": runs,
            "raw_shards": inputs,
            "kept": report.get("kept"),
            "rejected": report.get("rejected"),
        }
    return {"format": "trajforge.lineage/1", "release": {"name": name, "version": version}, "curations": curated}


def build_manifest(
    root: Path,
    cfg: MixtureConfig,
    name: str,
    version: str,
    cids: list[str],
    lineage: dict[str, Any],
    plans: dict[str, mixture.StagePlan],
    report: ReleaseReport | None = None,
) -> dict[str, Any]:
    """``manifest.json`` of the release folder ``root``: every file but itself, with what
    ``report`` adds (input hash, drops and lengths)."""
    tokens = {f["path"]: f for f in data_files(root)}
    files = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"):
        rel = str(path.relative_to(root))
        entry = {"path": rel, "sha256": file_sha256(LOCAL, str(path)), "bytes": path.stat().st_size}
        if rel in tokens:
            entry.update(
                rows=tokens[rel]["rows"], tokens=tokens[rel]["tokens"], stage=tokens[rel]["stage"], split=tokens[rel]["split"]
            )
        files.append(entry)
    versions = library_versions()
    return {
        "format": "trajforge.release/1",
        "name": name,
        "version": version,
        "files": files,
        "schemas": {stage: schema_hash(SCHEMAS[stage]) for stage in cfg.enabled()},
        "config": cfg.model_dump(mode="json") | {"tokenizer": Path(cfg.tokenizer).name},
        "config_hash": config_hash(cfg),
        "tokenizer_sha256": tokenizer_hash(cfg.tokenizer),
        "curations": cids,
        "source_runs": sorted({run for c in lineage["curations"].values() for run in c["raw_runs"]}),
        "code_version": versions.pop("trajforge"),
        "libraries": versions,
        "seed": cfg.seed,
        "plan": {stage: asdict(p) for stage, p in plans.items()},
    } | ({"input_hash": report.input_hash, "dropped_for_length": report.dropped, "lengths": report.lengths} if report else {})


def write_json(path: Path, body: dict[str, Any]) -> None:
    """``lineage.json`` and ``manifest.json``: sorted keys, one space of indent, a final newline."""
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
