"""Reading releases back: ``verify`` (every hash), ``diff`` (samples added and removed),
``list``, and ``export`` to AgentWorldBench-style JSONL.

Each opens its releases through ``pipelines.release.manifest`` and hashes the files it
reads before reading them, so a changed, missing or extra file is refused with one line.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.release.manifest import NAME, FileEntry, Release, load, open_release, store_releases
from pipelines.release.samples import unwrap
from schemas.errors import ShardError, StoreError, one_line


def load_manifest(root: str | os.PathLike[str]) -> dict[str, Any]:
    """A release's manifest as written, once checked (a local path or an object-store URI)."""
    return open_release(root).manifest.model_dump(exclude_none=True)


def verify(root: str | os.PathLike[str]) -> list[str]:
    """One line per problem: a file changed, missing, or not in the manifest (StoreError
    when there is no release there or its manifest is refused)."""
    return [str(p) for p in load(root).problems()]


def read_table(rel: Release, entry: FileEntry, columns: list[str] | None = None) -> pa.Table:
    """A data file the caller has checked (``rel.check``); damage that a matching hash
    cannot rule out (a hostile manifest written with it) is a one-line ShardError too."""
    from pipelines.release.build import SCHEMAS

    path, want = rel.sfs.join(entry.path), SCHEMAS[entry.stage or ""]
    try:
        schema = pq.read_schema(path, filesystem=rel.sfs.fs)
        if not schema.equals(want):
            raise ShardError(rel.uri(entry), f"not a {entry.stage} file of this trajforge (its columns differ)")
        return pq.read_table(path, columns=columns, filesystem=rel.sfs.fs)
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(rel.uri(entry), f"unreadable Parquet ({one_line(str(exc), 160)})") from None


def _ids(rel: Release) -> dict[tuple[str, str, str], set[str]]:
    out: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    data = [e for e in rel.manifest.files if e.stage]
    rel.check(data)
    for entry in data:
        table = read_table(rel, entry, ["id", "domain"])
        for sid, domain in zip(table.column("id").to_pylist(), table.column("domain").to_pylist(), strict=True):
            out[(entry.stage, entry.split, domain)].add(sid)
    return out


def diff(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Per (stage, split, domain): samples only in B (added), only in A (removed), in both."""
    ra, rb = open_release(a), open_release(b)
    left, right = _ids(ra), _ids(rb)
    rows = []
    for key in sorted(set(left) | set(right)):
        x, y = left.get(key, set()), right.get(key, set())
        if x != y or x:
            rows.append({"stage": key[0], "split": key[1], "domain": key[2], "added": len(y - x), "removed": len(x - y),
                         "kept": len(x & y)})  # fmt: skip
    return rows


def _warn(message: str) -> None:
    print(f"warning: skipped {message}", file=sys.stderr, flush=True)


def list_releases(store_root: str | os.PathLike[str], on_skip: Callable[[str], None] = _warn) -> list[dict[str, Any]]:
    """The releases of a store from their manifests (checked, and each folder's listing;
    no data file is read). A release refused is reported to ``on_skip`` and left out;
    StoreError when the store does not exist."""
    out = []
    for _, rel in store_releases(store_root):
        if not isinstance(rel, Release):
            on_skip(str(rel))
            continue
        m = rel.manifest
        data = [f for f in m.files if f.stage]
        out.append({"name": m.name, "version": m.version, "files": len(data), "samples": sum(f.rows or 0 for f in data),
                    "tokens": sum(f.tokens or 0 for f in data), "curations": ",".join(m.curations),
                    "config_hash": m.config_hash})  # fmt: skip
    return out


def _item(row: dict[str, Any]) -> dict[str, Any] | None:
    """An AgentWorldBench item of an SFT sample; None for one without its messages."""
    try:
        return _awb(row)
    except (TypeError, KeyError, AttributeError):
        return None


def _awb(row: dict[str, Any]) -> dict[str, Any] | None:
    messages = row["prompt"] or []
    system = next((m["content"] for m in messages if m["role"] == "system"), None)
    users = [m["content"] for m in messages if m["role"] == "user"]
    if system is None or not users or not row["completion"]:
        return None
    answers = [unwrap(m["content"]) for m in messages if m["role"] == "assistant"]
    gold = unwrap(row["completion"][0]["content"])
    return {"task": row["domain"], "id": row["id"], "prompt": users[:-1], "response": [*answers, gold],
            "current_prompt": users[-1], "system_str": system, "turn_idx": row["step"],
            "total_turns": row["total_turns"]}  # fmt: skip


def export_agentworldbench(root: str | os.PathLike[str], out: str | Path) -> dict[Path, int]:
    """The SFT test split as AgentWorldBench-style JSONL, one file per domain:
    ``task, id, prompt[], response[], current_prompt, system_str, turn_idx, total_turns``.
    ``prompt`` holds the agent's earlier turns and ``response`` the environment's answers
    to them, then the gold answer to ``current_prompt`` as its last element. The files
    read are checked first; returns each file written and its number of samples."""
    rel = open_release(root)
    entries = rel.entries("sft", "test")
    if not entries:
        raise StoreError(f"{rel.sfs.uri()}: no SFT test split to export")
    rel.check(entries)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[Path, int] = defaultdict(int)
    handles = {}
    try:
        for entry in entries:
            for row in read_table(rel, entry).to_pylist():
                item = _item(row)
                if item is None or not NAME.match(row["domain"] or ""):  # the domain names a file: no path in it
                    sample = one_line(repr(row["id"]), 80)
                    raise ShardError(rel.uri(entry), f"sample {sample}: not an SFT sample (domain, messages)")
                dest = out / f"{row['domain']}.jsonl"
                if dest not in handles:
                    handles[dest] = open(dest, "w")  # noqa: SIM115
                handles[dest].write(json.dumps(item, ensure_ascii=False) + "\n")
                counts[dest] += 1
    finally:
        for h in handles.values():
            h.close()
    return dict(counts)
