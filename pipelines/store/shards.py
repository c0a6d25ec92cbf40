"""Reading one shard file: open with clear errors, migrate old versions, salvage partials.

A shard is an Arrow IPC file (zstd-compressed buffers) whose schema metadata carries the
schema version. A ``.partial`` file is an IPC file without its footer yet: after the
8-byte magic it is an IPC stream, so its complete record batches can be read back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from pipelines.store.fs import StoreFS
from schemas.arrow import from_shard
from schemas.errors import SchemaError, ShardError
from schemas.versions import migrate, schema_for, schema_problem, version_of

if TYPE_CHECKING:
    from pipelines.store.manifest import ShardEntry  # for annotations only: the manifest does not import this module

__all__ = [
    "RowSpan",
    "collected_range",
    "file_sha256",
    "open_shard",
    "read_column",
    "read_columns",
    "read_shard",
    "salvage_partial",
    "stored_batches",
    "verify_shard",
]

ARROW_MAGIC = b"ARROW1"


def _describe(exc: Exception) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


def open_shard(sfs: StoreFS, path: str, source: pa.NativeFile | None = None) -> tuple[ipc.RecordBatchFileReader, int]:
    """Open a finished shard (its bytes from ``source`` when given, e.g. already in memory);
    ShardError names what is wrong with a foreign or broken file."""
    try:
        f = sfs.fs.open_input_file(path) if source is None else source
        head = f.read(6)
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(path, f"cannot open: {_describe(exc)}") from None
    if head != ARROW_MAGIC:
        f.close()
        raise ShardError(path, "not an Arrow IPC file (no ARROW1 magic)")
    f.seek(0)
    try:
        reader = ipc.open_file(f)
    except (OSError, pa.ArrowException) as exc:
        f.close()
        raise ShardError(path, f"truncated or corrupt Arrow file ({_describe(exc)})") from None
    try:
        version = version_of(reader.schema)
    except SchemaError as exc:
        raise ShardError(path, str(exc)) from None
    if version is None:
        raise ShardError(path, "foreign Arrow file: no trajforge.schema_version in its metadata")
    try:
        problem = schema_problem(reader.schema, version, shard=True)
    except SchemaError as exc:
        raise ShardError(path, str(exc)) from None
    if problem:
        raise ShardError(path, f"schema does not match transition schema v{version}: {problem}")
    return reader, version


@dataclass(frozen=True)
class RowSpan:
    """Rows ``[start, stop)`` of a shard whose record batches hold ``batch_rows`` rows each
    (known from an earlier read of one column), so batches outside the span are not read."""

    start: int
    stop: int
    batch_rows: tuple[int, ...]


def stored_batches(
    sfs: StoreFS, path: str, *, full_check: bool = False, span: RowSpan | None = None, source: pa.NativeFile | None = None
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(schema version, record batch in the on-disk layout) for each batch of a shard, or of
    the rows in ``span`` (batches sliced to it)."""
    reader, version = open_shard(sfs, path, source)
    offset = 0
    for i in range(reader.num_record_batches):
        if span is not None:
            rows = span.batch_rows[i] if i < len(span.batch_rows) else None
            if offset >= span.stop:
                break
            if rows is not None and offset + rows <= span.start:
                offset += rows
                continue
        try:
            batch = reader.get_batch(i)
            batch.validate(full=full_check)
        except (OSError, pa.ArrowException) as exc:
            raise ShardError(path, f"corrupt record batch {i} ({_describe(exc)})") from None
        if span is not None:
            lo, hi = max(span.start - offset, 0), min(span.stop - offset, batch.num_rows)
            offset += batch.num_rows
            if hi <= lo:
                continue
            batch = batch.slice(lo, hi - lo) if (lo, hi) != (0, batch.num_rows) else batch
        yield version, batch


#: An object-store shard up to this size is downloaded once for both its hash and its decoding.
WHOLE_READ_BYTES = 256 << 20


def verify_shard(
    sfs: StoreFS,
    path: str,
    entry: ShardEntry | None = None,
    *,
    on_batch: Callable[[int, int, pa.RecordBatch], None] | None = None,
) -> tuple[int, int]:
    """Read a whole shard: decode every record batch and validate it fully (offsets, UTF-8),
    and when it has a manifest ``entry`` compare rows, size, sha256 and schema version with it.
    ``on_batch(first_row, version, batch)`` sees each batch. Returns (rows, schema version);
    ShardError names the first problem. A file bigger than its entry says is not read."""
    try:
        size = sfs.info(path).size
        if entry is not None and size is not None and size > entry.bytes:
            raise ShardError(path, f"is {size} bytes, manifest says {entry.bytes}")
        whole = None
        if not sfs.local and size is not None and size <= WHOLE_READ_BYTES:
            with sfs.fs.open_input_file(path) as f:
                whole = f.read_buffer()
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(path, f"cannot read: {_describe(exc)}") from None

    def source() -> pa.NativeFile | None:
        return pa.BufferReader(whole) if whole is not None else None

    _, version = open_shard(sfs, path, source())
    rows = 0
    for _, batch in stored_batches(sfs, path, full_check=True, source=source()):
        if on_batch is not None:
            on_batch(rows, version, batch)
        rows += batch.num_rows
    if entry is None:
        return rows, version
    if entry.rows != rows:
        raise ShardError(path, f"has {rows} rows, manifest says {entry.rows}")
    if size != entry.bytes:
        raise ShardError(path, f"is {size} bytes, manifest says {entry.bytes}")
    sha = hashlib.sha256(whole).hexdigest() if whole is not None else file_sha256(sfs, path)
    if sha != entry.sha256:
        raise ShardError(path, "sha256 differs from the manifest (file changed after it was finished)")
    if entry.schema_version != version:
        raise ShardError(path, f"is schema v{version}, manifest says v{entry.schema_version}")
    return rows, version


def read_columns(sfs: StoreFS, path: str, names: list[str]) -> pa.Table:
    """Top-level columns of a shard in the on-disk layout (e.g. ``trajectory_id`` and
    ``provenance``), decompressing only their buffers."""
    reader, _ = open_shard(sfs, path)
    indices = []
    for name in names:
        index = reader.schema.get_field_index(name)
        if index < 0:
            raise ShardError(path, f"no column {name!r}")
        indices.append(index)
    f = sfs.fs.open_input_file(path)
    try:
        only = ipc.open_file(f, options=ipc.IpcReadOptions(included_fields=sorted(indices)))
        return pa.Table.from_batches([only.get_batch(i) for i in range(only.num_record_batches)], schema=only.schema)
    finally:
        f.close()


def read_column(sfs: StoreFS, path: str, name: str) -> pa.ChunkedArray:
    """One top-level column of a shard (e.g. ``trajectory_id``), decompressing only its buffers."""
    return read_columns(sfs, path, [name]).column(name)


def read_shard(
    sfs: StoreFS, path: str, *, migrate_to: int | None = None, span: RowSpan | None = None
) -> Iterator[pa.RecordBatch]:
    """Logical record batches of a shard (or of its rows in ``span``), lifted to the current
    schema version (or ``migrate_to``)."""
    for version, batch in stored_batches(sfs, path, span=span):
        yield migrate(from_shard(batch, schema_for(version)), version, migrate_to)


def salvage_partial(sfs: StoreFS, path: str) -> tuple[pa.Schema | None, list[pa.RecordBatch]]:
    """The complete record batches of a footer-less ``.partial`` file (a killed writer's)."""
    data = sfs.read_bytes(path)
    if not data.startswith(ARROW_MAGIC):
        return None, []
    try:
        reader = ipc.open_stream(pa.BufferReader(pa.py_buffer(data)[8:]))
    except (OSError, pa.ArrowException):
        return None, []  # killed before the schema message was whole
    batches = []
    while True:
        try:
            batch = reader.read_next_batch()
            batch.validate(full=True)
        except StopIteration:
            break
        except (OSError, pa.ArrowException):
            break  # the torn batch being written at the kill: everything before it is whole
        batches.append(batch)
    return reader.schema, batches


def file_sha256(sfs: StoreFS, path: str) -> str:
    h = hashlib.sha256()
    try:
        with sfs.fs.open_input_stream(path) as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(path, f"cannot read: {_describe(exc)}") from None
    return h.hexdigest()


def collected_range(batch: pa.RecordBatch | pa.Table) -> tuple[str | None, str | None]:
    """ISO min and max of provenance.collected_at in a batch."""
    if batch.num_rows == 0:
        return None, None
    col = pc.struct_field(batch.column("provenance"), "collected_at")
    mm = pc.min_max(col)
    return mm["min"].as_py().isoformat(), mm["max"].as_py().isoformat()
