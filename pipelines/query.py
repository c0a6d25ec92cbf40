"""Read-only ad-hoc SQL over a store with DuckDB, confined to the store's views.

Each view is a lazy source over finished shards (see ``Store.relations``): DuckDB pushes
projections and filters into the pyarrow dataset, so ``SELECT domain, count(*)`` reads two
columns, not whole observations. The shards are read by pyarrow (local disk or object
store), so the engine itself needs no file access at all: ``connect`` opens DuckDB with
external access, extension install/load and Python replacement scans off, no spilling to
disk, a memory and thread cap, and then locks the configuration. No SQL can read a host
file, write anything or load an extension, whatever the statement. ``execute`` also checks
the statement first (``pipelines.sql_guard``) for one-line refusals, builds only the views
the statement names (DuckDB's parser finds them), so start-up grows with the trees a query
reads, not with the store, and stops a query at its time limit::

    table = run_query("SELECT domain, count(*) FROM transitions GROUP BY 1", "store", timeout=60, memory="2GB")
"""

from __future__ import annotations

import base64
import contextlib
import csv
import functools
import json
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import IO, Any

import duckdb
import pyarrow as pa

from pipelines.release.manifest import Release, store_releases
from pipelines.sql_guard import STORE_ONLY, check_read_only, sql_words
from pipelines.store.reader import Relation, Store
from schemas.arrow import shard_view_sql
from schemas.errors import QueryError, TrajforgeError
from schemas.versions import schema_for

#: The views a store query sees, and what each holds (``trajforge views`` lists their columns).
VIEWS: dict[str, str] = {
    "transitions": "every transition of the raw runs' finished, verified shards (one row per step)",
    "curated": "the transitions curation kept, with their curation attributes (status, stage, cluster, flags, curation_id)",
    "rejected": "what curation dropped and why (reason, one word of a fixed list; detail); unparsed records have NULL fields",
    "releases": "one row per release file: name, version, stage, split, path, rows, tokens, bytes, sha256",
    "release_cpt": "the continued-pretraining samples of every release, with its name and version",
    "release_sft": "the supervised fine-tuning samples of every release, with its name and version",
    "release_rl": "the RL (world-model prediction) samples of every release, with its name and version",
}

FORMATS = ("table", "records", "csv", "json", "parquet")
#: Longest cell of --format table, and value of --format records, before it is cut with an ellipsis.
CELL_CHARS = 80
RECORD_CHARS = 2000
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
    views: Iterable[str] | None = None,
    release_stages: Iterable[str] = RELEASE_STAGES,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that sees only the store's views.

    The views read pyarrow sources held by the views themselves (no helper view or table
    beside them), so the engine runs with external access off from the start; its
    configuration is locked before the connection is returned. ``views``: the views to make
    (default: all); only their trees are listed, verified and opened. ``release_stages``:
    the ``release_<stage>`` views to make (their files are hashed first).
    """
    store = Store.open(store)
    con = _open(memory or default_memory(), threads)
    try:
        wanted = set(VIEWS if views is None else views)
        wanted -= {f"release_{s}" for s in RELEASE_STAGES} - {f"release_{s}" for s in release_stages}
        build_views(con, store, wanted)
        _lock(con)
    except BaseException:
        con.close()
        raise
    return con


def _open(memory: str, threads: int) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(":memory:", config=_confined_config(memory, threads))
    except duckdb.Error as exc:
        raise QueryError(f"--memory {memory!r}: {str(exc).splitlines()[0]}") from None


def _lock(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET TimeZone = 'UTC'")  # days and hours in results are UTC, as stored
    con.execute("SET lock_configuration = true")


def build_views(con: duckdb.DuckDBPyConnection, store: Store, views: Iterable[str]) -> list[str]:
    """Make the named views (unknown names are ignored); the ones made, in ``VIEWS`` order.

    A view exists only where its tree has something (``curated`` once a curation ran,
    ``releases`` once a release exists); ``transitions`` always, empty in an empty store."""
    wanted = set(views)
    logical = schema_for()
    releases: list[Release] | None = None
    made = []
    for view in VIEWS:
        if view not in wanted:
            continue
        if view == "transitions":
            relation = _shards_relation(con, store.relations("raw"), logical)
        elif view in CURATION_TREES:
            relation = _curation_relation(con, store, view, logical)
        else:
            releases = _opened_releases(store) if releases is None else releases
            relation = _releases_relation(con, releases) if view == "releases" else _stage_relation(con, store, releases, view)
        if relation is not None:
            relation.create_view(view)
            made.append(view)
    return made


#: Words of a query that read the catalog (SHOW TABLES, information_schema, duckdb_views(),
#: pragma_table_info, ...): such a query gets every view, so that it lists them all.
_CATALOG_WORDS = frozenset({"show", "information_schema", "pg_catalog", "sqlite_master", "sqlite_schema"})


def views_named(con: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    """The store views a (checked) query reads: only these are built.

    DuckDB's own parser names the tables of each statement; where it cannot (PIVOT,
    ``pragma_table_info('curated')``), every word of the query that names a view counts. A
    query on the catalog gets every view. Run it after ``check_read_only`` on a confined
    connection: naming tables binds table functions."""
    words = sql_words(sql)
    if words & _CATALOG_WORDS or any(w.startswith(("duckdb_", "pg_", "pragma_")) for w in words) or words == {"describe"}:
        return set(VIEWS)
    try:
        names = {n.lower() for st in con.extract_statements(sql) for n in con.get_table_names(st.query)}
    except duckdb.Error:
        names = words
    return names & set(VIEWS)


@dataclass(frozen=True)
class ViewSchema:
    """One view as ``trajforge views`` lists it: ``columns`` are (name, DuckDB type), a
    struct's members as ``column.member``; ``present`` is False where the store has nothing
    for it yet (no curation, no release)."""

    name: str
    description: str
    columns: list[tuple[str, str]]
    present: bool


def describe_views(store: str | Store) -> list[ViewSchema]:
    """Every view of ``VIEWS`` with its columns in this store (what ``query --schema`` prints)."""
    con = connect(store)
    try:
        made = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        listed = []
        for view, description in VIEWS.items():
            columns: list[tuple[str, str]] = []
            if view in made:
                rel = con.table(view)
                for name, dtype in zip(rel.columns, rel.types, strict=True):
                    columns.append((name, dtype.id.upper() if dtype.id == "struct" else str(dtype)))
                    if dtype.id == "struct":
                        columns.extend((f"{name}.{member}", str(member_type)) for member, member_type in dtype.children)
            listed.append(ViewSchema(view, description, columns, view in made))
        return listed
    finally:
        con.close()


def format_views(views: list[ViewSchema]) -> str:
    """The listing as text: a line per view, then its columns indented."""
    lines = []
    for v in views:
        lines.append(f"{v.name}: {v.description}" + ("" if v.present else " (none in this store yet)"))
        width = max((len(name) for name, _ in v.columns), default=0)
        lines.extend(f"    {name:<{width}}  {_shorter(dtype, 100)}" for name, dtype in v.columns)
    return "\n".join(lines) + "\n"


def _shorter(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _shards_relation(con: duckdb.DuckDBPyConnection, sources: list[Relation], logical: pa.Schema) -> duckdb.DuckDBPyRelation:
    """The shards of a tree (or one run) in the logical layout, one source per schema version."""
    parts = [
        con.from_arrow(rel.source).query("shards", shard_view_sql(logical, "shards"))
        if rel.on_disk_layout
        else con.from_arrow(rel.source)
        for rel in sources
    ]
    return functools.reduce(lambda a, b: a.union(b), parts) if parts else con.from_arrow(logical.empty_table())


CURATION_TREES = ("curated", "rejected")


def _curation_relation(
    con: duckdb.DuckDBPyConnection, store: Store, tree: str, logical: pa.Schema
) -> duckdb.DuckDBPyRelation | None:
    """``curated`` / ``rejected``: the tree's transitions with their curation attributes
    (status, stage, reason, duplicate_of, cluster, flags, exclude_as_target, curation_id).
    Rejected records that never parsed (quarantine) appear with NULL transition fields.
    Attribute files are read through the store's pyarrow file system (local or object store)."""
    import pyarrow.dataset as pads

    parts = []
    for cid, path in store.curation_attributes(tree):  # confined, regular Parquet files; others warned about
        rows = _shards_relation(con, store.relations(tree, run_id=cid), logical).set_alias("t")
        attrs = con.from_arrow(pads.dataset(path, format="parquet", filesystem=store.sfs.fs)).query(
            "attrs", f"SELECT * EXCLUDE (trajectory_id, domain), {_literal(cid)} AS curation_id FROM attrs"
        )
        joined = rows.join(attrs.set_alias("a"), "transition_id", how="inner" if tree == "curated" else "right")
        parts.append(joined.project("t.* EXCLUDE (transition_id), a.*"))
    return functools.reduce(lambda a, b: a.union_by_name(b), parts) if parts else None


def _opened_releases(store: Store) -> list[Release]:
    """The store's releases whose manifest and folder pass their checks; one warning line for each other."""
    opened = []
    for folder, rel in store_releases(store):
        if isinstance(rel, Release):
            opened.append(rel)
        else:
            store.warn(f"skipped release {folder}: {rel}")
    return opened


def _releases_relation(con: duckdb.DuckDBPyConnection, opened: list[Release]) -> duckdb.DuckDBPyRelation | None:
    """``releases``: one row per release file (name, version, stage, split, path, rows, tokens, bytes, sha256)."""
    rows = [
        {
            "name": rel.manifest.name,
            "version": rel.manifest.version,
            "stage": f.stage,
            "split": f.split,
            "path": f.path,
            "rows": f.rows,
            "tokens": f.tokens,
            "bytes": f.bytes,
            "sha256": f.sha256,
        }
        for rel in opened
        for f in rel.manifest.files
        if f.rows is not None
    ]
    return con.from_arrow(pa.Table.from_pylist(rows)) if rows else None


def _stage_relation(
    con: duckdb.DuckDBPyConnection, store: Store, opened: list[Release], view: str
) -> duckdb.DuckDBPyRelation | None:
    """``release_cpt`` / ``release_sft`` / ``release_rl``: the samples of every release with
    its name and version. A stage's files are hashed against the manifest before they are
    read; a release whose files fail is left out with one warning line naming the file."""
    import pyarrow.dataset as pads

    stage = view.removeprefix("release_")
    parts = []
    for rel in opened:
        if not (entries := rel.entries(stage)):
            continue
        try:
            files = rel.check(entries)
        except TrajforgeError as exc:
            store.warn(f"skipped release {rel.manifest.name}/{rel.manifest.version} {stage} samples: {exc}")
            continue
        samples = con.from_arrow(pads.dataset(files, format="parquet", filesystem=rel.sfs.fs))
        parts.append(
            samples.query(
                "samples",
                f"SELECT {_literal(rel.manifest.name)} AS name, {_literal(rel.manifest.version)} AS version, * FROM samples",
            )
        )
    return functools.reduce(lambda a, b: a.union_by_name(b), parts) if parts else None


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
    store = Store.open(store)
    con = _open(memory, threads)
    deadline: _Deadline | None = None
    try:
        check_read_only(con, sql)
        build_views(con, store, views_named(con, sql))  # only what the query reads is listed, verified, hashed
        _lock(con)
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
    """Write a result as table, records (one ``column | value`` block per row, like psql's
    ``\\x``), csv, json (JSON lines) or parquet; returns the rows written."""
    if fmt not in FORMATS:
        raise QueryError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    twice = sorted({n for n in reader.schema.names if reader.schema.names.count(n) > 1})
    if twice:  # rows are written by name: one column would hide the other
        raise QueryError(f"column {twice[0]!r} is named twice in the result: give each its own name (AS)")
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
        if fmt == "records":
            return _write_records(reader, handle, limit)
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
    """A rich table, one line per row: every cell is cut to ``CELL_CHARS`` (newlines shown as
    ``\\n``), columns are narrowed to fit the terminal and cut with an ellipsis, never wrapped,
    and columns that still do not fit are left out (and counted)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=handle, width=200 if not handle.isatty() else None)
    names = reader.schema.names
    shown: list[list[str]] = []
    n = 0
    for row in _rows(reader):
        if n < limit:
            shown.append([_cell(v).replace("\n", "\\n") for v in row.values()])
        n += 1
    widths = _fit([max([len(name), *(len(r[i]) for r in shown)]) for i, name in enumerate(names)], names, console.width)
    table = Table(show_lines=False)
    for name, width in zip(names, widths, strict=False):
        table.add_column(name, no_wrap=True, overflow="ellipsis", width=width)
    for cells in shown:
        table.add_row(*(Text(c) for c in cells[: len(widths)]))  # Text: no markup ("[exit 0]" stays)
    console.print(table)
    _footer(handle, n, limit)
    if len(widths) < len(names) or any(w < len(c) for cells in shown for w, c in zip(widths, cells, strict=False)):
        left_out = f"{len(names) - len(widths)} columns left out, " if len(widths) < len(names) else ""
        handle.write(f"(wide rows: {left_out}cells cut; -x shows one block per row)\n")
    return n


def _fit(wanted: list[int], names: list[str], total: int) -> list[int]:
    """Column widths within ``total`` characters (3 of border and padding per column, 1 more
    for the edge): the widest columns narrow first, to at least ``min(len(name), 8)``; the
    columns past what fits at that are left out."""
    floors = [min(w, max(3, min(len(n), 8))) for w, n in zip(wanted, names, strict=True)]
    room = total - 1
    keep = 0
    while keep < len(floors) and room - (floors[keep] + 3) >= 0:
        room -= floors[keep] + 3
        keep += 1
    keep = max(keep, 1)
    widths = wanted[:keep]
    while sum(widths) + 3 * keep + 1 > total:
        i = max(range(keep), key=lambda k: widths[k] - floors[k])
        if widths[i] <= floors[i]:
            break
        widths[i] -= 1
    return widths


def _write_records(reader: pa.RecordBatchReader, handle: IO[str], limit: int) -> int:
    """One block per row, a ``column | value`` line per column (psql's ``\\x``): for rows too
    wide for a table. Values are cut at ``RECORD_CHARS``; their own lines stay lines."""
    width = max((len(name) for name in reader.schema.names), default=0)
    n = 0
    for row in _rows(reader):
        if n < limit:
            handle.write(f"-[ RECORD {n + 1} ]{'-' * max(4, width - 8)}\n")
            for name, value in row.items():
                first, *more = _cell(value, RECORD_CHARS).split("\n")
                handle.write(f"{name:<{width}} | {first}\n")
                handle.writelines(f"{'':<{width}} | {line}\n" for line in more)
        n += 1
    _footer(handle, n, limit)
    return n


def _footer(handle: IO[str], n: int, limit: int) -> None:
    if n > limit:
        handle.write(f"({n} rows, first {limit} shown; use --format csv|json|parquet for all)\n")
    else:
        handle.write(f"({n} rows)\n")


def _cell(value: Any, chars: int = CELL_CHARS) -> str:
    text = "NULL" if value is None else json.dumps(_plain(value)) if isinstance(value, dict | list) else str(_plain(value))
    return text if len(text) <= chars else text[: chars - 1] + "\u2026"
