"""Read-only ad-hoc SQL over a store with DuckDB, confined to the store's views.

Each view is a lazy source over finished shards (see ``Store.relations``): DuckDB pushes
projections and filters into the pyarrow dataset, so ``SELECT domain, count(*)`` reads two
columns, not whole observations. The shards are read by pyarrow (local disk or object
store), so the engine itself needs no file access at all: ``connect`` opens DuckDB with
external access, extension install/load and Python replacement scans off, no spilling to
disk, a memory and thread cap, and then locks the configuration. No SQL can read a host
file, write anything or load an extension, whatever the statement. ``execute`` also checks
the statement first (``pipelines.sql_guard``) for one-line refusals, and stops a query at
its time limit::

    table = run_query("SELECT domain, count(*) FROM transitions GROUP BY 1", "store", timeout=60, memory="2GB")
"""

from __future__ import annotations

import base64
import contextlib
import csv
import json
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from typing import IO, Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads

from pipelines.release.manifest import Release, store_releases
from pipelines.sql_guard import STORE_ONLY, check_read_only
from pipelines.store.reader import Store
from schemas.arrow import shard_view_sql
from schemas.errors import QueryError, TrajforgeError
from schemas.versions import schema_for

#: View name -> the store tree it reads. Later stages add theirs (curated, rejected, ...).
VIEWS: dict[str, str] = {"transitions": "raw"}

FORMATS = ("table", "csv", "json", "parquet")
RELEASE_STAGES = ("cpt", "sft", "rl")

#: Defaults for ``--timeout`` (seconds), ``--memory`` and the engine's threads.
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_THREADS = max(1, min(os.cpu_count() or 1, 8))


def default_memory() -> str:
    """Half the host's memory, at most 4 GB: a runaway query cannot take the host."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "4GB"
    return f"{max(256, min(4096, total // 2**21))}MB"


def _confined_config(memory: str, threads: int) -> dict[str, Any]:
    """The engine settings every store connection starts with (locked once the views exist)."""
    if not re.fullmatch(r"\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*", memory, re.IGNORECASE):
        raise QueryError(f"--memory {memory!r}: expected a size such as 512MB or 2GB")
    if threads < 1:
        raise QueryError(f"threads {threads}: expected at least 1")
    return {
        "enable_external_access": False,  # no file, network, ATTACH, COPY, INSTALL or LOAD
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
        "allow_persistent_secrets": False,
        "python_enable_replacements": False,  # SQL cannot see the caller's Python variables
        "temp_directory": "",  # never spill to disk: a query that needs more than --memory stops
        "memory_limit": memory.strip(),
        "threads": threads,
    }


def connect(
    store: str | Store,
    *,
    memory: str | None = None,
    threads: int = DEFAULT_THREADS,
    release_stages: Iterable[str] = RELEASE_STAGES,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that sees only the store's views.

    The views read registered pyarrow sources, so the engine runs with external access
    off from the start; its configuration is locked before the connection is returned.
    ``release_stages``: the ``release_<stage>`` views to make (their files are hashed first).
    """
    store = store if isinstance(store, Store) else Store(store)
    try:
        con = duckdb.connect(":memory:", config=_confined_config(memory or default_memory(), threads))
    except duckdb.Error as exc:
        raise QueryError(f"--memory {memory!r}: {str(exc).splitlines()[0]}") from None
    logical = schema_for()
    for view, kind in VIEWS.items():
        parts = []
        for i, rel in enumerate(store.relations(kind)):
            name = f"_{view}_{i}"
            con.register(name, rel.source)
            parts.append(shard_view_sql(logical, name) if rel.on_disk_layout else f"SELECT * FROM {name}")
        if not parts:
            con.register(f"_{view}_empty", logical.empty_table())
            parts.append(f"SELECT * FROM _{view}_empty")
        con.execute(f"CREATE TEMP VIEW {view} AS " + " UNION ALL ".join(parts))
    for tree in CURATION_TREES:
        _curation_view(con, store, tree, logical)
    _release_views(con, store, release_stages)
    con.execute("SET TimeZone = 'UTC'")  # days and hours in results are UTC, as stored
    con.execute("SET lock_configuration = true")
    return con


CURATION_TREES = ("curated", "rejected")


def _curation_view(con: duckdb.DuckDBPyConnection, store: Store, tree: str, logical) -> None:
    """``curated`` / ``rejected``: the tree's transitions with their curation attributes
    (status, stage, reason, duplicate_of, cluster, flags, exclude_as_target, curation_id).
    Rejected records that never parsed (quarantine) appear with NULL transition fields.
    Attribute files are read through the store's pyarrow file system (local or object store)."""
    sfs = store.sfs
    attribute_files = store.curation_attributes(tree)  # confined, regular Parquet files; others warned about
    if not attribute_files:
        return
    parts = []
    for i, (cid, path) in enumerate(attribute_files):
        name = f"_{tree}_{i}"
        sources = store.relations(tree, run_id=cid)
        rows = " UNION ALL ".join(
            shard_view_sql(logical, f"{name}_{j}") if rel.on_disk_layout else f"SELECT * FROM {name}_{j}"
            for j, rel in enumerate(sources)
        )
        for j, rel in enumerate(sources):
            con.register(f"{name}_{j}", rel.source)
        if not rows:
            con.register(f"{name}_empty", logical.empty_table())
            rows = f"SELECT * FROM {name}_empty"
        con.register(f"{name}_attrs", pads.dataset(path, format="parquet", filesystem=sfs.fs))
        attrs = f"(SELECT * EXCLUDE (trajectory_id, domain), '{cid}' AS curation_id FROM {name}_attrs)"
        join = "JOIN" if tree == "curated" else "RIGHT JOIN"
        parts.append(f"SELECT t.* EXCLUDE (transition_id), a.* FROM ({rows}) t {join} {attrs} a USING (transition_id)")
    con.execute(f"CREATE TEMP VIEW {tree} AS " + " UNION ALL BY NAME ".join(parts))


def _release_views(con: duckdb.DuckDBPyConnection, store: Store, stages: Iterable[str] = RELEASE_STAGES) -> None:
    """``releases``: one row per release file (name, version, stage, split, rows, tokens,
    sha256); ``release_cpt`` / ``release_sft`` / ``release_rl``: the samples of every
    release with its name and version. Each release's manifest and folder are checked, and
    the files of a stage view are hashed against the manifest before they are registered
    (only for ``stages``: a query that reads no samples hashes nothing); a release or stage
    that fails is left out with one warning line naming the file."""
    opened = []
    for folder, rel in store_releases(store):
        if isinstance(rel, Release):
            opened.append(rel)
        else:
            store.warn(f"skipped release {folder}: {rel}")
    rows = [{"name": rel.manifest.name, "version": rel.manifest.version, "stage": f.stage, "split": f.split,
             "path": f.path, "rows": f.rows, "tokens": f.tokens, "bytes": f.bytes, "sha256": f.sha256}
            for rel in opened for f in rel.manifest.files if f.rows is not None]  # fmt: skip
    if not rows:
        return
    con.register("_releases", pa.Table.from_pylist(rows))
    con.execute("CREATE TEMP VIEW releases AS SELECT * FROM _releases")
    for stage in stages:
        parts = []
        for k, rel in enumerate(opened):
            if not (entries := rel.entries(stage)):
                continue
            try:
                files = rel.check(entries)
            except TrajforgeError as exc:
                store.warn(f"skipped release {rel.manifest.name}/{rel.manifest.version} {stage} samples: {exc}")
                continue
            con.register(f"_release_{stage}_{k}", pads.dataset(files, format="parquet", filesystem=rel.sfs.fs))
            parts.append(f"SELECT {_literal(rel.manifest.name)} AS name, {_literal(rel.manifest.version)} AS version, * "
                         f"FROM _release_{stage}_{k}")  # fmt: skip
        if parts:
            con.execute(f"CREATE TEMP VIEW release_{stage} AS " + " UNION ALL BY NAME ".join(parts))


def release_stages_named(sql: str) -> list[str]:
    """The release stage views a query names (``release_sft`` ...): only their files are hashed."""
    return [stage for stage in RELEASE_STAGES if re.search(rf"\brelease_{stage}\b", sql, re.IGNORECASE)]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def execute(
    sql: str,
    store: str | Store,
    *,
    batch_rows: int = 8192,
    timeout: float = DEFAULT_TIMEOUT_S,
    memory: str | None = None,
    threads: int = DEFAULT_THREADS,
) -> pa.RecordBatchReader:
    """Run a read-only query; the result streams as record batches.

    ``timeout`` (seconds) covers the whole query, reading the result included; ``memory``
    caps what the engine may hold (default: ``default_memory()``). Every refusal or failure
    is a ``QueryError`` of one line.
    """
    if not timeout > 0:
        raise QueryError(f"--timeout {timeout}: expected a number of seconds above 0")
    memory = memory or default_memory()
    con = connect(store, memory=memory, threads=threads, release_stages=release_stages_named(sql))
    deadline: _Deadline | None = None
    try:
        check_read_only(con, sql)
        deadline = _Deadline(con, timeout)
        relation = con.sql(sql)
        if relation is None:
            raise QueryError("the query returned no result")
        reader = relation.to_arrow_reader(batch_rows)
    except BaseException as exc:
        if deadline:
            deadline.cancel()
        con.close()
        if isinstance(exc, duckdb.Error):
            stopped = deadline is not None and deadline.passed
            raise query_error(exc, timeout=timeout, memory=memory, stopped=stopped) from None
        raise
    return pa.RecordBatchReader.from_batches(reader.schema, _guarded(con, reader, deadline, memory))


class _Deadline:
    """Interrupts the connection's query once ``timeout`` seconds have passed (DuckDB has no
    statement timeout of its own); ``passed`` tells an interrupt from any other error."""

    def __init__(self, con: duckdb.DuckDBPyConnection, timeout: float) -> None:
        self.timeout = timeout
        self._passed = threading.Event()
        self._timer = threading.Timer(min(timeout, threading.TIMEOUT_MAX), self._stop, args=(con,))
        self._timer.daemon = True
        self._timer.start()

    def _stop(self, con: duckdb.DuckDBPyConnection) -> None:
        self._passed.set()
        with contextlib.suppress(duckdb.Error):  # already closed: nothing left to stop
            con.interrupt()

    @property
    def passed(self) -> bool:
        return self._passed.is_set()

    def cancel(self) -> None:
        self._timer.cancel()


def _guarded(
    con: duckdb.DuckDBPyConnection, reader: pa.RecordBatchReader, deadline: _Deadline, memory: str
) -> Iterator[pa.RecordBatch]:
    """The result's batches; engine errors become one line, and the time limit holds between batches."""
    try:
        for batch in reader:
            if deadline.passed:
                raise query_error(None, timeout=deadline.timeout, memory=memory, stopped=True)
            yield batch
    except duckdb.Error as exc:
        raise query_error(exc, timeout=deadline.timeout, memory=memory, stopped=deadline.passed) from None
    finally:
        deadline.cancel()
        con.close()


def query_error(exc: BaseException | None, *, timeout: float, memory: str, stopped: bool = False) -> QueryError:
    """One line for an engine error: time and memory limits name their option, refusals
    by the engine (a file, an extension) name what was refused."""
    if stopped or isinstance(exc, duckdb.InterruptException):
        return QueryError(f"query stopped after {timeout:g} s (--timeout)")
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, duckdb.OutOfMemoryException):
        return QueryError(f"query needs more memory than --memory {memory} allows ({line})")
    if isinstance(exc, duckdb.PermissionException):
        path = re.search(r'Cannot access (?:file|directory) "([^"]*)"', line)
        what = f"access to {path.group(1)}" if path else line.removeprefix("Permission Error: ")
        return QueryError(f"query refused: {what} is outside the store; {STORE_ONLY}")
    table = re.search(r"Table with name (.+) does not exist", line)
    if isinstance(exc, duckdb.CatalogException) and table and re.search(r"[/\\]|\.\w+$", table.group(1)):
        return QueryError(f"query refused: FROM '{table.group(1)}' reads a file; {STORE_ONLY}")  # a replacement scan
    return QueryError(line)


def run_query(
    sql: str,
    store: str | Store,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    memory: str | None = None,
    threads: int = DEFAULT_THREADS,
) -> pa.Table:
    """Run a read-only query and return the whole result (same confinement and limits as ``execute``)."""
    return execute(sql, store, timeout=timeout, memory=memory, threads=threads).read_all()


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _rows(reader: pa.RecordBatchReader) -> Iterator[dict[str, Any]]:
    for batch in reader:
        yield from batch.to_pylist()


def write_result(reader: pa.RecordBatchReader, fmt: str, out: IO[str] | str | None = None, *, limit: int = 50) -> int:
    """Write a result as table, csv, json (JSON lines) or parquet; returns the rows written."""
    if fmt not in FORMATS:
        raise QueryError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        if not isinstance(out, str):
            raise QueryError("--format parquet needs --out FILE")
        n = 0
        with pq.ParquetWriter(out, reader.schema, compression="zstd") as w:
            for batch in reader:
                w.write_batch(batch)
                n += batch.num_rows
        return n
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(open(out, "w", newline="")) if isinstance(out, str) else (out or sys.stdout)
        if fmt == "table":
            return _write_table(reader, handle, limit)
        n = 0
        if fmt == "csv":
            w = csv.writer(handle)
            w.writerow(reader.schema.names)
            for row in _rows(reader):
                w.writerow([json.dumps(_plain(v)) if isinstance(v, dict | list) else _plain(v) for v in row.values()])
                n += 1
        else:
            for row in _rows(reader):
                handle.write(json.dumps(_plain(row), ensure_ascii=False) + "\n")
                n += 1
        return n


def _write_table(reader: pa.RecordBatchReader, handle: IO[str], limit: int) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(*reader.schema.names, show_lines=False)
    n = 0
    for row in _rows(reader):
        if n < limit:
            table.add_row(*(Text(_cell(v)) for v in row.values()))  # Text: no markup ("[exit 0]" stays)
        n += 1
    Console(file=handle, width=200 if not handle.isatty() else None).print(table)
    if n > limit:
        handle.write(f"({n} rows, first {limit} shown; use --format csv|json|parquet for all)\n")
    else:
        handle.write(f"({n} rows)\n")
    return n


def _cell(value: Any) -> str:
    text = "NULL" if value is None else json.dumps(_plain(value)) if isinstance(value, dict | list) else str(_plain(value))
    return text if len(text) <= 80 else text[:77] + "..."
