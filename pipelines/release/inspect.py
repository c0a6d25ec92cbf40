"""Reading releases back: ``verify`` (every hash), ``diff`` (samples added and removed),
``list``, and ``export`` to AgentWorldBench-style JSONL."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pipelines.release.samples import unwrap
from pipelines.store.fs import StoreFS
from pipelines.store.shards import file_sha256
from schemas.errors import StoreError


def load_manifest(root: str | Path) -> dict[str, Any]:
    """A release's manifest (a release folder: a local path or an object-store URI)."""
    sfs = StoreFS.open(root)
    path = sfs.join("manifest.json")
    if sfs.info(path).type.name != "File":
        raise StoreError(f"{root}: not a release (no manifest.json)")
    try:
        return json.loads(sfs.read_bytes(path))
    except json.JSONDecodeError as exc:
        raise StoreError(f"{sfs.uri(path)}: unreadable manifest ({exc.msg} at line {exc.lineno})") from None


def verify(root: str | Path) -> list[str]:
    """One line per problem: a file changed, missing, or not in the manifest."""
    manifest = load_manifest(root)
    sfs = StoreFS.open(root)
    listed = {f["path"]: f for f in manifest["files"]}
    problems = []
    for rel, f in sorted(listed.items()):
        path = sfs.join(rel)
        info = sfs.info(path)
        if info.type.name != "File":
            problems.append(f"{sfs.uri(path)}: missing")
        elif info.size != f["bytes"] or file_sha256(sfs, path) != f["sha256"]:
            problems.append(f"{sfs.uri(path)}: changed (sha256 differs from the manifest)")
    for path in sfs.files(sfs.root):
        rel = sfs.rel(path)
        if rel != "manifest.json" and rel not in listed:
            problems.append(f"{sfs.uri(path)}: extra file, not in the manifest")
    return problems


def _ids(root: str | Path) -> dict[tuple[str, str, str], set[str]]:
    out: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    sfs = StoreFS.open(root)
    for path in sfs.files(sfs.join("data")):
        stage, name = path.split("/")[-2:]
        if not name.endswith(".parquet"):
            continue
        table = pq.read_table(path, columns=["id", "domain"], filesystem=sfs.fs)
        split = name.split("-")[0]
        for sid, domain in zip(table.column("id").to_pylist(), table.column("domain").to_pylist(), strict=True):
            out[(stage, split, domain)].add(sid)
    return out


def diff(a: str | Path, b: str | Path) -> list[dict[str, Any]]:
    """Per (stage, split, domain): samples only in B (added), only in A (removed), in both."""
    load_manifest(a), load_manifest(b)
    left, right = _ids(a), _ids(b)
    rows = []
    for key in sorted(set(left) | set(right)):
        x, y = left.get(key, set()), right.get(key, set())
        if x != y or x:
            rows.append({"stage": key[0], "split": key[1], "domain": key[2], "added": len(y - x), "removed": len(x - y),
                         "kept": len(x & y)})  # fmt: skip
    return rows


def list_releases(store_root: str | Path) -> list[dict[str, Any]]:
    from pipelines.query import release_manifests
    from pipelines.store import Store

    out = []
    for _, m in release_manifests(Store(store_root, must_exist=False)):
        data = [f for f in m["files"] if "rows" in f]
        out.append({"name": m["name"], "version": m["version"], "files": len(data), "samples": sum(f["rows"] for f in data),
                    "tokens": sum(f["tokens"] for f in data), "curations": ",".join(m["curations"]),
                    "config_hash": m["config_hash"]})  # fmt: skip
    return out


def export_agentworldbench(root: str | Path, out: str | Path) -> dict[str, int]:
    """The SFT test split as AgentWorldBench-style JSONL, one file per domain:
    ``task, id, prompt[], response[], current_prompt, system_str, turn_idx, total_turns``.
    ``prompt`` holds the agent's earlier turns and ``response`` the environment's answers
    to them, then the gold answer to ``current_prompt`` as its last element."""
    root, out = Path(root), Path(out)
    load_manifest(root)
    files = sorted(root.glob("data/sft/test-*.parquet"))
    if not files:
        raise StoreError(f"{root}: no SFT test split to export")
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = defaultdict(int)
    handles = {}
    try:
        for path in files:
            for row in pq.read_table(path).to_pylist():
                messages = row["prompt"]
                system = next(m["content"] for m in messages if m["role"] == "system")
                users = [m["content"] for m in messages if m["role"] == "user"]
                answers = [unwrap(m["content"]) for m in messages if m["role"] == "assistant"]
                gold = unwrap(row["completion"][0]["content"])
                item = {"task": row["domain"], "id": row["id"], "prompt": users[:-1], "response": [*answers, gold],
                        "current_prompt": users[-1], "system_str": system, "turn_idx": row["step"],
                        "total_turns": row["total_turns"]}  # fmt: skip
                if row["domain"] not in handles:
                    handles[row["domain"]] = open(out / f"{row['domain']}.jsonl", "w")  # noqa: SIM115
                handles[row["domain"]].write(json.dumps(item, ensure_ascii=False) + "\n")
                counts[row["domain"]] += 1
    finally:
        for h in handles.values():
            h.close()
    return dict(counts)
