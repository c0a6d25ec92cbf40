"""Reading releases back: ``verify`` (every hash), ``diff`` (samples added and removed),
``list``, and ``export`` to the JSONL files AgentWorldBench's harness reads.

Each opens its releases through ``pipelines.release.manifest`` and hashes the files it
reads before reading them, so a changed, missing or extra file is refused with one line.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pipelines.store import Store

from pipelines.release.manifest import FileEntry, Release, load, open_release, store_releases
from pipelines.release.samples import CLOSE, OPEN
from schemas.domains import DOMAINS
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
    from pipelines.release.layout import SCHEMAS

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
            rows.append(
                {
                    "stage": key[0],
                    "split": key[1],
                    "domain": key[2],
                    "added": len(y - x),
                    "removed": len(x - y),
                    "kept": len(x & y),
                }
            )
    return rows


def _warn(message: str) -> None:
    print(f"warning: skipped {message}", file=sys.stderr, flush=True)


def list_releases(store_root: Store | str | os.PathLike[str], on_skip: Callable[[str], None] = _warn) -> list[dict[str, Any]]:
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
        out.append(
            {
                "name": m.name,
                "version": m.version,
                "files": len(data),
                "samples": sum(f.rows or 0 for f in data),
                "tokens": sum(f.tokens or 0 for f in data),
                "curations": ",".join(m.curations),
                "config_hash": m.config_hash,
            }
        )
    return out


# -- AgentWorldBench export ----------------------------------------------------------------------
HARNESS_DOMAINS = DOMAINS  # the harness's subtasks: the registered domains (schemas.domains)
ROWS_PER_BATCH = 256


@dataclass(frozen=True)
class Turns:
    """An SFT sample's turns in the harness's terms: the system message, the user turns
    (the first holds the task and the state, each later one an ``## Action``) and the
    observation after each, the last one the sample's target."""

    system: str
    prompt: list[str]
    response: list[str]


def _body(content: str) -> str:
    """The observation inside ``wrap()``'s tags, by offset: wrap adds exactly one newline on each side."""
    head, tail = f"{OPEN}\n", f"\n{CLOSE}"
    if not (content.startswith(head) and content.endswith(tail) and len(content) >= len(head) + len(tail)):
        raise ValueError("not an observation in its tags")
    return content[len(head) : len(content) - len(tail)]


def _target(completion: list[dict[str, Any]], has_reasoning: bool) -> str:
    (message,) = completion
    content = message["content"]
    # "REASONING\n<predicted_observation>\n...": the first tag line is the observation's, which may hold
    # tags itself; the reasoning is not expected to (the teacher never sees them, distill.INSTRUCTION)
    if has_reasoning:
        cut = content.find(f"\n{OPEN}\n")
        if cut < 0:
            raise ValueError("no observation after the reasoning")
        content = content[cut + 1 :]
    return _body(content)


def sample_turns(row: dict[str, Any]) -> Turns:
    """The turns of an SFT sample (its ``prompt``: system, then user and assistant in turn,
    ending on a user message); ValueError, TypeError or KeyError when it is not one."""
    messages = row["prompt"]
    roles = [m["role"] for m in messages]
    if len(roles) % 2 or roles != ["system", *(["user", "assistant"] * (len(roles) // 2 - 1)), "user"]:
        raise ValueError("not system, then user and assistant in turn")
    contents = [m["content"] for m in messages]
    if not all(isinstance(c, str) for c in contents) or not isinstance(row["id"], str) or type(row["total_turns"]) is not int:
        raise ValueError("not strings")
    history = [_body(c) for c in contents[2::2]]
    return Turns(contents[0], contents[1::2], [*history, _target(row["completion"], row["has_reasoning"])])


def agentworldbench_items(samples: list[tuple[dict[str, Any], Turns]]) -> list[dict[str, Any]]:
    """The harness's rows for one trajectory's SFT samples (in file order).

    Samples with all their history share the turn lists of the longest of them (turns
    1..K, ``turn_idx`` its own step + 1); a sample whose oldest turns were dropped to fit the
    prompt budget carries its own window (its first prompt names the turns omitted) with
    ``turn_idx = len(prompt)``. Either way the harness's messages are the sample's own, less
    the tags around history observations, and ``response[turn_idx - 1]`` is its target."""
    whole = [t for row, t in samples if row["dropped_turns"] == 0]
    shared = max(whole, key=lambda t: len(t.prompt), default=None)
    out = []
    for row, own in samples:
        n = len(own.prompt)
        fits = (
            row["dropped_turns"] == 0
            and shared is not None
            and shared.system == own.system
            and shared.prompt[:n] == own.prompt
            and shared.response[:n] == own.response
        )
        turns = shared if fits else own
        out.append(
            {
                "task": row["domain"],
                "id": row["id"],
                "prompt": turns.prompt,
                "response": turns.response,
                "current_prompt": own.prompt[-1],
                "system_str": own.system,
                "turn_idx": n,
                "total_turns": row["total_turns"],
            }
        )
    return out


def _stream(rel: Release, entry: FileEntry) -> Iterator[dict[str, Any]]:
    """The rows of a checked SFT file, a batch at a time (a split never sits in memory whole)."""
    from pipelines.release.layout import SCHEMAS

    try:
        with rel.sfs.fs.open_input_file(rel.sfs.join(entry.path)) as f:
            parquet = pq.ParquetFile(f)
            if not parquet.schema_arrow.equals(SCHEMAS["sft"]):
                raise ShardError(rel.uri(entry), "not a sft file of this trajforge (its columns differ)")
            for batch in parquet.iter_batches(batch_size=ROWS_PER_BATCH):
                yield from batch.to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(rel.uri(entry), f"unreadable Parquet ({one_line(str(exc), 160)})") from None


def export_agentworldbench(root: str | os.PathLike[str], out: str | Path) -> dict[Path, int]:
    """The SFT test split as the files AgentWorldBench's harness (QwenLM/Qwen-AgentWorld
    ``eval/eval.py``) loads: ``<domain>_test.jsonl`` in ``out``, one row per sample with
    ``task, id, prompt[], response[], current_prompt, system_str, turn_idx, total_turns``:
    ``prompt`` and ``response`` are a trajectory's turns (the agent's turn, the environment's
    plain observation), equally long; ``turn_idx`` is 1-based and ``current_prompt`` is
    ``prompt[turn_idx - 1]``, its answer ``response[turn_idx - 1]`` (see
    :func:`agentworldbench_items`). The files read are checked first; each output file
    appears whole or not at all. Returns each file written and its number of rows."""
    rel = open_release(root)
    entries = rel.entries("sft", "test")
    if not entries:
        raise StoreError(f"{rel.sfs.uri()}: no SFT test split to export")
    rel.check(entries)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = defaultdict(int)
    handles: dict[str, Any] = {}

    def partial(domain: str) -> Path:
        return out / f".{domain}_test.jsonl.partial"  # not a *_test.jsonl: the harness never reads it

    def write(group: list[tuple[dict[str, Any], Turns]]) -> None:
        for item in agentworldbench_items(group):
            if item["task"] not in handles:
                handles[item["task"]] = open(partial(item["task"]), "w", encoding="utf-8")  # noqa: SIM115
            handles[item["task"]].write(json.dumps(item, ensure_ascii=True) + "\n")  # ASCII: read under any locale
            counts[item["task"]] += 1

    done = False
    try:
        group: list[tuple[dict[str, Any], Turns]] = []
        for entry in entries:
            for row in _stream(rel, entry):
                try:
                    if row["domain"] not in HARNESS_DOMAINS:  # it names a file, and the harness knows only these
                        raise ValueError("domain")
                    turns = sample_turns(row)
                except (TypeError, KeyError, AttributeError, ValueError):
                    sample = one_line(repr(row.get("id")), 80)
                    raise ShardError(rel.uri(entry), f"sample {sample}: not an SFT sample (domain, messages)") from None
                if group and group[-1][0]["trajectory_id"] != row["trajectory_id"]:
                    write(group)
                    group = []
                group.append((row, turns))
        write(group)
        done = True
    finally:
        for h in handles.values():
            h.close()
        for domain in handles:
            if done:
                os.replace(partial(domain), out / f"{domain}_test.jsonl")
            else:
                partial(domain).unlink(missing_ok=True)
    return {out / f"{d}_test.jsonl": n for d, n in sorted(counts.items())}
