"""``trajforge import FORMAT PATH...``: stream another project's trajectories into a store.

Files are read one record at a time (JSONL line by line; a JSON array item by item with
ijson; a JSON object whole), so memory stays flat whatever the file size. Each record goes
through its format's converter (``formats.<name>.episodes``) and becomes whole
trajectories of ``imported`` transitions in the run ``import-<source>``. Trajectories are
written whole, many to a record batch, and shards are committed as the collectors commit
them, so a killed import leaves whole trajectories only; running the same command again
skips every trajectory already in the run (ids come from the source name, the record's id
and what its transitions hold: ``formats.episode.fingerprint``) and writes the rest, so
re-importing a file adds nothing. A malformed record is
skipped and counted with its file, line or item and reason (``--strict``: the first one
ends the import with that line as the error).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from formats import fewer_collections, format_module
from formats.episode import Origin, RecordError, to_transitions
from pipelines.store.reader import Store
from pipelines.store.shards import read_column
from pipelines.store.writer import ShardWriter, WriterOptions, row_bytes
from schemas.errors import ConfigError, SchemaError
from schemas.transition import EXECUTED, Transition

SUFFIXES = (".json", ".jsonl", ".traj", ".ndjson")
BATCH_ROWS = 2048  # whole trajectories buffered per domain before a record batch is written ...
# ... or this many bytes of them (``row_bytes``), whichever comes first: twice a collector's batch
# (``WriterOptions.bytes_per_batch``), as each batch costs about a millisecond of fixed work and an
# import writes thousands of them; at 8 MiB, OpenHands imports were 3% slower
BATCH_BYTES = 2 * WriterOptions().bytes_per_batch
SHOWN_PROBLEMS = 20
READ_BUFFER = 1 << 20  # records of 100 KiB are common: the default 8 KiB buffer reads each in pieces, 5x slower


@dataclass
class Problem:
    file: str
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.reason}"


@dataclass
class ImportSummary:
    run_id: str
    files: int = 0
    records: int = 0
    trajectories: int = 0
    transitions: int = 0
    already_imported: int = 0
    empty: int = 0  # records without a single action
    malformed: int = 0
    problems: list[Problem] = field(default_factory=list)
    by_domain: dict[str, int] = field(default_factory=dict)

    def problem(self, p: Problem) -> None:
        self.malformed += 1
        if len(self.problems) < SHOWN_PROBLEMS:
            self.problems.append(p)


@dataclass(frozen=True)
class Record:
    file: str
    where: str  # "line 7", "item 3", "record"
    value: Any


def source_files(
    paths: Sequence[str | os.PathLike[str]], claims: Callable[[Path], bool] | None = None
) -> Iterator[Path | Problem]:
    """What to read, in order: each file given, and the JSON files under each folder. A
    folder that ``claims`` says is one record (a format that keeps a run as a folder of
    files) is yielded whole, as the folder. Inside a folder, symbolic links are not
    followed: a link to a file is a ``Problem`` (a dataset's link could name any file of
    this host), a link to a folder is not walked."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found: list[Path | Problem] = []
            for top, dirs, files in os.walk(path):
                here = Path(top)
                if claims is not None and claims(here):
                    found.append(here)
                    dirs[:] = []
                    continue
                for f in files:
                    p = here / f
                    if p.suffix in SUFFIXES:
                        found.append(_plain(p))
            yield from sorted(found, key=lambda item: item if isinstance(item, Path) else Path(item.file))
        elif path.is_file():
            yield path
        elif path.exists():
            raise ConfigError(f"{path}: not a regular file or a folder")
        else:
            raise ConfigError(f"{path}: no such file or folder")


def records(path: Path, whole_array: Callable[[Any], bool] | None = None) -> Iterator[Record | Problem]:
    """One file's records, streamed; a part that does not parse is a ``Problem``. A JSON
    array is a list of records, or one record when ``whole_array(first item)`` says so (an
    OpenHands event list, a bare list of chat messages)."""
    name = str(path)
    with open(path, "rb", buffering=READ_BUFFER) as f:
        head = f.read(4096).lstrip()
        f.seek(0)
        if path.suffix in (".jsonl", ".ndjson") or (head[:1] == b"{" and _many_lines(head)):
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    value = _parse(line)
                except (ValueError, RecursionError) as exc:
                    yield Problem(name, f"line {n}", f"not JSON ({_short(exc)})")
                    continue
                yield Record(name, f"line {n}", value)
        elif head[:1] == b"[":
            yield from _array_items(f, name, whole_array)
        else:
            data = f.read()
            try:
                value = _parse(data)
            except (ValueError, RecursionError) as exc:
                yield Problem(name, "record", f"not JSON ({_short(exc)})")
                return
            yield Record(name, "record", value)


def _plain(path: Path) -> Path | Problem:
    """A file found in a folder, if it is a regular file (not a link, a FIFO that would block
    the read forever, or a device)."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return Problem(str(path), "file", "a symbolic link: not followed")
    return path if stat.S_ISREG(mode) else Problem(str(path), "file", "not a regular file")


def folder_record(module, folder: Path) -> Record | Problem:
    """A folder its format keeps one run in, as one record (``module.folder_record``, given
    a reader of its JSON files)."""

    def read(path: Path) -> Any:
        if not path.is_file() or isinstance(_plain(path), Problem):
            raise RecordError(f"{path.relative_to(folder)}: not a regular file")
        try:
            return _parse(path.read_bytes())
        except (ValueError, RecursionError) as exc:
            raise RecordError(f"{path.relative_to(folder)}: not JSON ({_short(exc)})") from None

    try:
        return Record(str(folder), "folder", module.folder_record(folder, read))
    except RecordError as exc:
        return Problem(str(folder), "folder", _short(exc))


def _many_lines(head: bytes) -> bool:
    """A .json file that is really JSON Lines: its first line is a whole object."""
    first = head.split(b"\n", 1)[0]
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return False
    return b"\n" in head and head.split(b"\n", 1)[1].strip()[:1] == b"{"


def _array_items(f, name: str, whole_array: Callable[[Any], bool] | None) -> Iterator[Record | Problem]:
    """A JSON array's items, streamed by ijson's C parser; where that parser cannot decode
    a string (a lone surrogate escape such as ``\\udfff``), the rest of the file is read
    again by ijson's Python parser, which decodes it as Python does."""
    import ijson

    done, whole = 0, None  # items already handed out (a list of records), or gathered (one record)
    for backend in (ijson, ijson.get_backend("python")):
        f.seek(0)
        n = -1
        whole = None
        try:
            for n, value in enumerate(backend.items(f, "item", use_float=True)):
                value = _text_safe(value)
                if n == 0 and whole_array is not None and whole_array(value):
                    whole = [value]
                elif whole is not None:
                    whole.append(value)
                elif n >= done:
                    done = n + 1
                    yield Record(name, f"item {n}", value)
        except UnicodeDecodeError:
            continue  # the C parser's strings: read on with the Python parser
        except (ijson.JSONError, ValueError, RecursionError) as exc:  # a truncated or broken array: the items before it stand
            yield Problem(name, "record" if whole is not None else f"item {n + 1}", f"not JSON ({_short(exc)})")
            return
        break
    else:  # neither parser could decode it
        yield Problem(name, "record" if whole is not None else f"item {done}", "not JSON (undecodable text)")
        return
    if whole is not None:
        yield Record(name, "record", whole)


def _parse(raw: bytes) -> Any:
    """One JSON text: orjson where it can (several times faster on long strings), else
    Python's parser, whose answer is the reference (lone surrogate escapes, NaN, integers
    beyond 64 bits, which orjson refuses)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _text_safe(json.loads(raw), raw)


_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def _text_safe(value: Any, raw: bytes | None = None) -> Any:
    """A parsed record with every lone surrogate (JSON's ``\\ud800`` escapes, which no
    UTF-8 text can hold) replaced by U+FFFD; a record whose raw bytes have no such escape
    is returned as it is, unwalked."""
    if raw is not None and not _SURROGATE_ESCAPE.search(raw):
        return value
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace") if not value.isascii() else value
    if isinstance(value, list):
        return [_text_safe(v) for v in value]
    if isinstance(value, dict):
        return {_text_safe(k): _text_safe(v) for k, v in value.items()}
    return value


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def run_id_for(source: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", source).strip("-.") or "source"
    return f"import-{slug[:80]}"


def existing_trajectories(store: Store, run_id: str) -> set[str]:
    """The trajectory ids already in a run (every domain): what a re-import skips. A killed
    import's unfinished shard is recovered first (its whole batches), as its writer would."""
    if store.exists():
        for run in store.runs():
            if run.run_id == run_id:
                ShardWriter(store, run.domain, run_id).close()  # opening a run repairs it, under its lock
    found: set[str] = set()
    for shard in store.shards():
        if shard.run.run_id == run_id:
            found.update(read_column(store.sfs, shard.path, "trajectory_id").unique().to_pylist())
    return found


def import_files(
    fmt: str,
    paths: Sequence[str | os.PathLike[str]],
    store: str | os.PathLike[str],
    *,
    source: str,
    license: str | None = None,
    domain: str | None = None,
    executed: str | None = None,
    strict: bool = False,
) -> ImportSummary:
    """Import every record of ``paths`` (files or folders) in format ``fmt`` into ``store``."""
    module = format_module(fmt)
    if not source.strip():
        raise ConfigError("--source: name the dataset the files come from")
    if executed is not None and executed not in EXECUTED:
        raise ConfigError(f"--executed: {executed!r} is not one of {', '.join(EXECUTED)}")
    files = list(source_files(paths, getattr(module, "claims_folder", None)))
    handle = Store.open(os.fspath(store), must_exist=False)
    summary = ImportSummary(run_id_for(source))
    seen = existing_trajectories(handle, summary.run_id)
    sink = _Sink(handle, summary)
    with fewer_collections():
        try:
            for path in files:
                if isinstance(path, Problem):
                    _fail(summary, path, strict)
                    continue
                summary.files += 1
                origin = Origin(source, fmt, path.name, license, summary.run_id, domain)
                _import_file(module, path, origin, sink, seen, executed=executed, strict=strict)
        finally:
            sink.close()
    return summary


def _import_file(module, path: Path, origin: Origin, sink: _Sink, seen: set[str], *, executed: str | None, strict: bool) -> None:
    """One file's records into ``sink``; trajectories in ``seen`` are skipped (and the new
    ones added to it)."""
    summary = sink.summary
    items = [folder_record(module, path)] if path.is_dir() else records(path, getattr(module, "whole_array", None))
    for item in items:
        if isinstance(item, Problem):
            _fail(summary, item, strict)
            continue
        summary.records += 1
        try:
            trajectories = [
                to_transitions(ep if executed is None else _with(ep, executed), origin, trajectory_key=(str(k),))
                for k, ep in enumerate(module.episodes(item.value, path.stem))
            ]
        except (RecordError, SchemaError) as exc:  # the record breaks its format's rules
            _fail(summary, Problem(item.file, item.where, _short(exc)), strict)
            continue
        except Exception as exc:  # a shape no rule foresaw: still this record's fault, never the import's
            _fail(summary, Problem(item.file, item.where, f"unreadable record ({type(exc).__name__}: {_short(exc)})"), strict)
            continue
        if not any(trajectories):
            summary.empty += 1
        for transitions in trajectories:
            if not transitions:
                continue
            if transitions[0].trajectory_id in seen:
                summary.already_imported += 1
                continue
            seen.add(transitions[0].trajectory_id)
            sink.add(transitions)


def _with(ep, executed: str):
    from dataclasses import replace

    return replace(ep, executed=executed)


def _fail(summary: ImportSummary, problem: Problem, strict: bool) -> None:
    if strict:
        raise ConfigError(str(problem))
    summary.problem(problem)


class _Sink:
    """Whole trajectories into one writer per domain, many trajectories to a record batch."""

    def __init__(self, store: Store, summary: ImportSummary) -> None:
        self.store, self.summary = store, summary
        self.writers: dict[str, ShardWriter] = {}
        self.buffers: dict[str, list[Transition]] = {}
        self.sizes: dict[str, int] = {}  # row_bytes of each buffer

    def add(self, transitions: list[Transition]) -> None:
        d = transitions[0].domain
        buf = self.buffers.setdefault(d, [])
        buf.extend(transitions)
        self.sizes[d] = self.sizes.get(d, 0) + sum(map(row_bytes, transitions))
        self.summary.trajectories += 1
        self.summary.transitions += len(transitions)
        self.summary.by_domain[d] = self.summary.by_domain.get(d, 0) + len(transitions)
        if len(buf) >= BATCH_ROWS or self.sizes[d] >= BATCH_BYTES:
            self._flush(d)

    def _flush(self, domain: str) -> None:
        buf = self.buffers.get(domain)
        if not buf:
            return
        if domain not in self.writers:
            self.writers[domain] = ShardWriter(self.store, domain, self.summary.run_id)
        self.writers[domain].write_episode(buf)  # whole trajectories: a kill keeps all of them or none
        self.buffers[domain], self.sizes[domain] = [], 0

    def close(self) -> None:
        try:
            for domain in list(self.buffers):
                self._flush(domain)
        finally:
            for w in self.writers.values():
                w.close()


def summary_lines(s: ImportSummary) -> list[str]:
    domains = ", ".join(f"{d} {n}" for d, n in sorted(s.by_domain.items())) or "none"
    lines = [
        f"imported {s.trajectories} trajectories ({s.transitions} transitions: {domains}) from {s.records} records "
        f"in {s.files} files into run {s.run_id}",
        f"already imported: {s.already_imported}; without actions: {s.empty}; malformed: {s.malformed}",
    ]
    lines += [f"  skipped {p}" for p in s.problems]
    if s.malformed > len(s.problems):
        lines.append(f"  ... and {s.malformed - len(s.problems)} more")
    return lines
