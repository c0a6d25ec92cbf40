"""Reading one shard file: open with clear errors, migrate old versions, salvage partials.

A shard is an Arrow IPC file (zstd-compressed buffers) whose schema metadata carries the
schema version. A ``.partial`` file is an IPC file without its footer yet: after the
8-byte magic it is an IPC stream, so its complete record batches can be read back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from pipelines.store.fs import StoreFS
from schemas.arrow import from_shard
from schemas.errors import SchemaError, ShardError
from schemas.versions import migrate, schema_for, schema_problem, version_of

ARROW_MAGIC = b"ARROW1"
SHARD_SUFFIX = ".arrow"
PARTIAL_SUFFIX = ".partial"


def _describe(exc: Exception) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


def open_shard(sfs: StoreFS, path: str) -> tuple[ipc.RecordBatchFileReader, int]:
    """Open a finished shard; ShardError names what is wrong with a foreign or broken file."""
    try:
        f = sfs.fs.open_input_file(path)
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(path, f"cannot open: {_describe(exc)}") from None
    head = f.read(6)
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


def stored_batches(sfs: StoreFS, path: str, *, full_check: bool = False,
                   span: RowSpan | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:  # fmt: skip
    """(schema version, record batch in the on-disk layout) for each batch of a shard, or of
    the rows in ``span`` (batches sliced to it)."""
    reader, version = open_shard(sfs, path)
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


def read_column(sfs: StoreFS, path: str, name: str) -> pa.ChunkedArray:
    """One top-level column of a shard (e.g. ``trajectory_id``), decompressing only its buffers."""
    reader, _ = open_shard(sfs, path)
    index = reader.schema.get_field_index(name)
    if index < 0:
        raise ShardError(path, f"no column {name!r}")
    f = sfs.fs.open_input_file(path)
    try:
        only = ipc.open_file(f, options=ipc.IpcReadOptions(included_fields=[index]))
        return pa.chunked_array([only.get_batch(i).column(0) for i in range(only.num_record_batches)],
                                type=reader.schema.field(index).type)  # fmt: skip
    finally:
        f.close()


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
    with sfs.fs.open_input_stream(path) as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def collected_range(batch: pa.RecordBatch | pa.Table) -> tuple[str | None, str | None]:
    """ISO min and max of provenance.collected_at in a batch."""
    if batch.num_rows == 0:
        return None, None
    col = pc.struct_field(batch.column("provenance"), "collected_at")
    mm = pc.min_max(col)
    return mm["min"].as_py().isoformat(), mm["max"].as_py().isoformat()
