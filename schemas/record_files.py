"""Files of records that other projects write, read one record at a time whatever their size.

    for item in records(Path("runs.jsonl.gz")):
        if isinstance(item, Problem):   # a part that does not read: its file, where, and why
            ...
        else:                           # item.where: "line 7", "item 3", "row 12" or "record"
            use(item.value)

The kinds: JSON Lines; JSON, one object or an array of records (streamed item by item with
ijson); and Parquet, as the Hugging Face Hub serves datasets (streamed a few rows at a
time). JSON and JSON Lines may also be compressed (``.gz``, ``.bz2``, ``.zst``), and are
decompressed as they are read by pyarrow's codecs. A Parquet row gives every column and
struct field, null where its source had none, so its nulls are dropped: the record reads as
its source wrote it, and a converter's "is this field there" means what it means in JSON.

Every file is hostile: a part that does not parse is a ``Problem`` and what came before it
stands; no record is read into memory beyond ``MAX_RECORD`` bytes (a compressed file of a
few megabytes can hold a line of gigabytes).
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pyarrow as pa

from schemas.errors import ConfigError

SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj", ".parquet")
#: A compressed file's suffix -> pyarrow's codec.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
READ_BUFFER = 1 << 20  # records of 100 KiB are common: the default 8 KiB buffer reads each in pieces, 5x slower
COMPRESSED_READ = 1 << 16  # decompressed bytes a read asks for: what a broken stream can take with it
MAX_DEPTH = 2_000  # JSON nesting levels an array's reader follows (Python's own recursion stops near 1,000)
MAX_RECORD = 1 << 29  # 512 MiB: a line or a whole-file record longer than this is refused, unread
PARQUET_ROWS = 64  # rows converted to Python at a time: trajectories of a megabyte each are common
MAX_ROW_GROUP = 4 * MAX_RECORD  # 2 GiB uncompressed: a Parquet row group beyond this is refused, unread


@dataclass
class Problem:
    file: str
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.reason}"


@dataclass(frozen=True)
class Record:
    file: str
    where: str  # "line 7", "item 3", "row 12", "record"
    value: Any


def compression_of(path: Path) -> str | None:
    """The codec a file's name says it is compressed with, or None."""
    return COMPRESSIONS.get(path.suffix.lower())


def record_stem(path: Path) -> str:
    """A file's name without its suffixes of kind and compression (``runs.jsonl.gz`` -> ``runs``)."""
    return (path.with_suffix("") if compression_of(path) else path).stem


def is_record_file(path: Path) -> bool:
    """A file a folder walk reads: one of ``SUFFIXES``, or JSON compressed."""
    plain = path.with_suffix("") if compression_of(path) else path
    return plain.suffix.lower() in SUFFIXES and not (plain is not path and plain.suffix.lower() == ".parquet")


def source_files(
    paths: Sequence[str | os.PathLike[str]], claims: Callable[[Path], bool] | None = None
) -> Iterator[Path | Problem]:
    """What to read, in order: each file given, and the record files under each folder. A
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
                found += [plain_file(here / f) for f in files if is_record_file(here / f)]
            yield from sorted(found, key=lambda item: item if isinstance(item, Path) else Path(item.file))
        elif path.is_file():
            yield path
        elif path.exists():
            raise ConfigError(f"{path}: not a regular file or a folder")
        else:
            raise ConfigError(f"{path}: no such file or folder")


def plain_file(path: Path) -> Path | Problem:
    """A file found in a folder, if it is a regular file (not a link, a FIFO that would block
    the read forever, or a device)."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return Problem(str(path), "file", "a symbolic link: not followed")
    return path if stat.S_ISREG(mode) else Problem(str(path), "file", "not a regular file")


@contextmanager
def _opened(path: Path) -> Iterator[io.BufferedReader]:
    """The file's bytes, decompressed where its name says it is compressed, after the UTF-8
    byte order mark that some editors write first (JSON's parsers refuse it)."""
    codec = compression_of(path)
    raw = open(path, "rb", buffering=0) if codec is None else pa.input_stream(str(path), compression=codec)  # noqa: SIM115
    # a compressed stream that breaks loses the read it broke in: a smaller one loses less
    with io.BufferedReader(raw, READ_BUFFER if codec is None else COMPRESSED_READ) as f:
        if f.peek(3)[:3] == b"\xef\xbb\xbf":
            f.read(3)
        yield f


#: What reading a file's bytes raises where they are not what its name says (a broken
#: gzip stream, a truncated zstd frame, a Parquet file whose pages do not decode).
UNREADABLE = (OSError, EOFError, pa.ArrowException)


def records(path: Path, whole_array: Callable[[Any], bool] | None = None) -> Iterator[Record | Problem]:
    """One file's records, streamed; a part that does not parse is a ``Problem``. A JSON
    array is a list of records, or one record when ``whole_array(first item)`` says so (an
    OpenHands event list, a bare list of chat messages). A ``.json`` file whose first line
    is a whole JSON value with more after it is JSON Lines."""
    name = str(path)
    kind = "done"
    try:
        with _opened(path) as f:
            if f.peek(4)[:4] == b"PAR1" and compression_of(path) is None:
                kind = "parquet"
            elif (path.with_suffix("") if compression_of(path) else path).suffix.lower() in (".jsonl", ".ndjson"):
                yield from _lines(f, name)
            else:
                blank_lines = _skip_blanks(f)
                first = f.peek(1)[:1]
                if first == b"[":
                    kind = "array"
                elif first == b"{":
                    yield from _object_or_lines(f, name, blank_lines)
                elif first:
                    yield from _whole(f, name, b"")
    except UNREADABLE as exc:
        yield Problem(name, "file", f"unreadable ({short(exc)})")
        return
    if kind == "parquet":
        yield from _parquet_rows(path, name)
    elif kind == "array":
        yield from _array_items(path, name, whole_array)


def _skip_blanks(f: io.BufferedReader) -> int:
    """Read past the blanks at the head of ``f``; the line ends among them."""
    newlines = 0
    while chunk := f.peek(1):
        blanks = len(chunk) - len(chunk.lstrip())
        newlines += chunk.count(b"\n", 0, blanks)
        f.read(blanks)
        if blanks < len(chunk):
            break
    return newlines


def _object_or_lines(f: io.BufferedReader, name: str, blank_lines: int) -> Iterator[Record | Problem]:
    """A file that starts with ``{``: JSON Lines when its first line is a whole value and
    more follows, else one (pretty-printed) object."""
    line = f.readline(MAX_RECORD + 1)
    try:
        value = parse(line) if line.endswith(b"\n") else _NOTHING
    except (ValueError, RecursionError):
        value = _NOTHING
    if value is _NOTHING:
        yield from _whole(f, name, line)
        return
    more_blank_lines = _skip_blanks(f)
    if not f.peek(1):
        yield Record(name, "record", value)
        return
    yield Record(name, f"line {blank_lines + 1}", value)
    yield from _lines(f, name, blank_lines + 1 + more_blank_lines)


_NOTHING = object()


def read_json(path: Path) -> Any:
    """One JSON file read whole, as ``records`` reads a file of one object (a byte order
    mark skipped, at most ``MAX_RECORD`` bytes): for a format that keeps a run as a folder
    of files. ``ValueError`` says why not; ``UNREADABLE`` where the bytes do not read."""
    with _opened(path) as f:
        [item] = _whole(f, str(path), b"")
    if isinstance(item, Problem):
        raise ValueError(item.reason)
    return item.value


def _whole(f: io.BufferedReader, name: str, head: bytes) -> Iterator[Record | Problem]:
    """The rest of ``f`` (after ``head``, already read) as one JSON value."""
    data = head + f.read(MAX_RECORD + 1 - len(head))
    if len(data) > MAX_RECORD:
        yield Problem(name, "record", f"longer than {MAX_RECORD >> 20} MiB: not read")
        return
    try:
        yield Record(name, "record", parse(data))
    except (ValueError, RecursionError) as exc:
        yield Problem(name, "record", f"not JSON ({short(exc)})")


def _lines(f: BinaryIO, name: str, n: int = 0) -> Iterator[Record | Problem]:
    """JSON Lines from where ``f`` is, its line ``n + 1``."""
    try:
        while line := f.readline(MAX_RECORD + 1):
            n += 1
            if len(line) > MAX_RECORD and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # the rest of the line, a buffer at a time
                    line = f.readline(READ_BUFFER)
                yield Problem(name, f"line {n}", f"longer than {MAX_RECORD >> 20} MiB: not read")
                continue
            line = line.strip()
            if not line:
                continue
            try:
                value = parse(line)
            except (ValueError, RecursionError) as exc:
                yield Problem(name, f"line {n}", f"not JSON ({short(exc)})")
                continue
            yield Record(name, f"line {n}", value)
    except UNREADABLE as exc:  # a compressed stream broken or cut short: the lines before it stand
        yield Problem(name, f"line {n + 1}", f"unreadable ({short(exc)})")


def _array_items(path: Path, name: str, whole_array: Callable[[Any], bool] | None) -> Iterator[Record | Problem]:
    """A JSON array's items, streamed by ijson's C parser; where that parser cannot decode
    a string (a lone surrogate escape such as ``\\udfff``), the rest of the file is read
    again by ijson's Python parser, which decodes it as Python does."""
    import ijson

    done, whole = 0, None  # items already handed out (a list of records), or gathered (one record)
    for backend in (ijson, ijson.get_backend("python")):
        n = -1
        whole = None
        try:
            with _opened(path) as f:
                for n, value in enumerate(_items(backend, f, lambda: whole is not None)):  # noqa: B023 (its value now)
                    try:
                        value = _text_safe(value)
                    except RecursionError:  # deeper than any record this reader hands on
                        if n >= done and whole is None:
                            done = n + 1
                            yield Problem(name, f"item {n}", "nested too deep to read")
                        continue
                    if n == 0 and whole_array is not None and whole_array(value):
                        whole = [value]
                    elif whole is not None:
                        whole.append(value)
                    elif n >= done:
                        done = n + 1
                        yield Record(name, f"item {n}", value)
        except UnicodeDecodeError:
            continue  # the C parser's strings: read on with the Python parser
        except (ijson.JSONError, ValueError, RecursionError, *UNREADABLE) as exc:  # broken or cut short: items before it stand
            yield Problem(name, "record" if whole is not None else f"item {n + 1}", f"not JSON ({short(exc)})")
            return
        except NotRead as exc:
            yield Problem(name, "record" if whole is not None else f"item {n + 1}", str(exc))
            return
        break
    else:  # neither parser could decode it
        yield Problem(name, "record" if whole is not None else f"item {done}", "not JSON (undecodable text)")
        return
    if whole is not None:
        yield Record(name, "record", whole)


class NotRead(Exception):
    """JSON this reader does not read on: nested deeper than ``MAX_DEPTH``, or one record
    longer than ``MAX_RECORD``."""


#: How a JSON parser's events move the nesting depth.
_DEPTH = {"start_map": 1, "start_array": 1, "end_map": -1, "end_array": -1}


def _items(backend: Any, f: io.BufferedReader, whole: Callable[[], bool]) -> Iterator[Any]:
    """The items of the JSON array ``f``, from ``backend``'s items parser, while a second,
    prefix-free parse of the same bytes watches the nesting depth: the items parser keeps
    the path of every open level, so a few hundred kilobytes of ``[[[[...`` would cost it
    gigabytes; beyond ``MAX_DEPTH`` (where no record is usable anyway) the read stops with
    ``NotRead`` before that parser has seen the bytes. So it does where one item runs on
    past ``MAX_RECORD`` bytes, or the array does while ``whole()`` (the array is one
    record)."""
    import ijson

    found, events = ijson.sendable_list(), ijson.sendable_list()
    items = backend.items_coro(found, "item", use_float=True)
    watch = backend.basic_parse_coro(events)
    depth = unfinished = total = 0  # bytes since an item was last finished, bytes in all
    while chunk := f.read(COMPRESSED_READ):
        unfinished, total = unfinished + len(chunk), total + len(chunk)
        if unfinished > MAX_RECORD or (total > MAX_RECORD and whole()):
            raise NotRead(f"longer than {MAX_RECORD >> 20} MiB: not read")
        try:
            watch.send(chunk)
        except Exception:  # broken JSON: the items before the break are still handed out
            with suppress(Exception):
                items.send(chunk)
            yield from found
            raise
        if events:
            levels = list(accumulate(map(_DEPTH.get, map(itemgetter(0), events), repeat(0)), initial=depth))
            depth = levels[-1]
            del events[:]
            if max(levels) > MAX_DEPTH:
                raise NotRead(f"nested deeper than {MAX_DEPTH} levels: not read")
        items.send(chunk)
        if found:
            unfinished = 0
        yield from found
        del found[:]
    watch.close()
    items.close()
    yield from found


def _parquet_rows(path: Path, name: str) -> Iterator[Record | Problem]:
    """A Parquet file's rows as JSON records, a few rows at a time (memory: one row group's
    pages, as pyarrow reads them, and ``PARQUET_ROWS`` rows). A row group whose footer says
    it holds more than ``MAX_ROW_GROUP`` bytes uncompressed is a problem, not read (a few
    kilobytes of zstd can hold gigabytes of one repeated byte)."""
    import pyarrow.parquet as pq

    n = 0
    try:
        with pq.ParquetFile(path, buffer_size=READ_BUFFER) as pf:
            row = _jsonable(pa.struct(list(pf.schema_arrow)))
            for group in range(pf.num_row_groups):
                meta = pf.metadata.row_group(group)
                if meta.total_byte_size > MAX_ROW_GROUP:
                    said = f"rows {n}-{n + meta.num_rows - 1}"
                    yield Problem(name, said, f"a row group of {meta.total_byte_size >> 20} MiB uncompressed: not read")
                    n += meta.num_rows
                    continue
                for batch in pf.iter_batches(batch_size=PARQUET_ROWS, row_groups=[group]):
                    for value in batch.to_pylist():
                        yield Record(name, f"row {n}", row(value))
                        n += 1
    except Exception as exc:  # pyarrow's and its value conversions' (a date beyond Python's, an unknown time zone)
        yield Problem(name, f"row {n}" if n else "file", f"not readable Parquet ({type(exc).__name__}: {short(exc)})")


def _jsonable(t: pa.DataType) -> Callable[[Any], Any] | None:
    """A function that turns a value of Arrow type ``t`` (as ``to_pylist`` gives it) into
    what JSON would hold, or None where it already is: structs without their null fields,
    maps as objects, binary as text (base64 where it is not UTF-8), dates and times in ISO
    8601, durations in seconds, decimals as numbers."""
    if pa.types.is_struct(t):
        inner = {f.name: c for f in t if (c := _jsonable(f.type)) is not None}
        if not inner:
            return lambda v: {k: x for k, x in v.items() if x is not None}
        return lambda v: {k: inner[k](x) if k in inner else x for k, x in v.items() if x is not None}
    if pa.types.is_map(t):
        kc, ic = _jsonable(t.key_type), _jsonable(t.item_type)
        return lambda v: {str(kc(k) if kc else k): ic(x) if ic and x is not None else x for k, x in v}
    if pa.types.is_dictionary(t):
        return _jsonable(t.value_type)
    if isinstance(t, pa.ListType | pa.LargeListType | pa.FixedSizeListType | pa.ListViewType | pa.LargeListViewType):
        c = _jsonable(t.value_type)
        return None if c is None else lambda v: [c(x) if x is not None else None for x in v]
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t) or pa.types.is_boolean(t):
        return None
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t):
        return None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
        return _text
    if pa.types.is_duration(t):
        return lambda v: v.total_seconds()
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return lambda v: v.isoformat()
    if pa.types.is_decimal(t):
        return float
    return str


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(value).decode("ascii")


def parse(raw: bytes | str) -> Any:
    """One JSON text: orjson where it can (several times faster on long strings), else
    Python's parser, whose answer is the reference (lone surrogate escapes, NaN, integers
    beyond 64 bits, which orjson refuses), with each lone surrogate made U+FFFD."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _text_safe(json.loads(raw), raw if isinstance(raw, bytes) else None)


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


def short(exc: BaseException) -> str:
    """An exception as one line of a problem's reason."""
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
