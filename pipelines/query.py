"""Read-only ad-hoc SQL over a store with DuckDB.

Each view is a lazy source over finished shards (see ``Store.relations``): DuckDB pushes
projections and filters into the pyarrow dataset, so ``SELECT domain, count(*)`` reads two
columns, not whole observations. Only SELECT and EXPLAIN statements run; anything that
writes, attaches, loads or configures is refused before execution::

    table = run_query("SELECT domain, count(*) FROM transitions GROUP BY 1", "store")
"""

from __future__ import annotations

import base64
import contextlib
import csv
import json
import sys
from collections.abc import Iterator
from datetime import date, datetime
from typing import IO, Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads

from pipelines.store.reader import Store
from schemas.arrow import shard_view_sql
from schemas.errors import QueryError
from schemas.versions import schema_for

#: View name -> the store tree it reads. Later stages add theirs (curated, rejected, ...).
VIEWS: dict[str, str] = {"transitions": "raw"}

_ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
FORMATS = ("table", "csv", "json", "parquet")


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse any statement that is not a SELECT or EXPLAIN (writes, ATTACH, COPY, SET, ...)."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"SQL does not parse: {str(exc).splitlines()[0]}") from None
    if not statements:
        raise QueryError("empty query")
    for st in statements:
        if st.type not in _ALLOWED:
            kind = st.type.name.replace("StatementType.", "")
            raise QueryError(f"refused {kind} statement: queries are read-only (SELECT and EXPLAIN only)")


def connect(store: str | Store) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the store's views registered."""
    store = store if isinstance(store, Store) else Store(store)
    con = duckdb.connect(":memory:")
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
    _release_views(con, store)
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
    attribute_files = [f"{i.path}/attributes.parquet" for i in sfs.listdir(sfs.join(tree))
                       if i.type.name == "Directory" and sfs.exists(f"{i.path}/attributes.parquet")]  # fmt: skip
    if not attribute_files:
        return
    parts = []
    for i, path in enumerate(attribute_files):
        cid = path.rsplit("/", 2)[-2]
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


def release_manifests(store: Store) -> list[tuple[str, dict]]:
    """(release folder, manifest) of every release of a store: a release exists once its
    ``manifest.json`` does (written last, also on object stores)."""
    sfs = store.sfs
    found = []
    for name in sfs.listdir(sfs.join("releases")):
        for version in sfs.listdir(name.path) if name.type.name == "Directory" else ():
            path = f"{version.path}/manifest.json"
            if version.type.name == "Directory" and not version.base_name.startswith(".") and sfs.exists(path):
                found.append((version.path, json.loads(sfs.read_bytes(path))))
    return found


def _release_views(con: duckdb.DuckDBPyConnection, store: Store) -> None:
    """``releases``: one row per release file (name, version, stage, split, rows, tokens,
    sha256); ``release_cpt`` / ``release_sft`` / ``release_rl``: the samples of every
    release with its name and version."""
    manifests = release_manifests(store)
    rows = []
    for _, m in manifests:
        rows += [{"name": m["name"], "version": m["version"], "stage": f["stage"], "split": f["split"], "path": f["path"],
                  "rows": f["rows"], "tokens": f["tokens"], "bytes": f["bytes"], "sha256": f["sha256"]}
                 for f in m["files"] if "rows" in f]  # fmt: skip
    if not rows:
        return
    con.register("_releases", pa.Table.from_pylist(rows))
    con.execute("CREATE TEMP VIEW releases AS SELECT * FROM _releases")
    for stage in ("cpt", "sft", "rl"):
        parts = []
        for k, (root, m) in enumerate(manifests):
            files = sorted(f"{root}/{f['path']}" for f in m["files"] if f.get("stage") == stage)
            if files:
                con.register(f"_release_{stage}_{k}", pads.dataset(files, format="parquet", filesystem=store.sfs.fs))
                parts.append(f"SELECT {_literal(m['name'])} AS name, {_literal(m['version'])} AS version, * "
                             f"FROM _release_{stage}_{k}")  # fmt: skip
        if parts:
            con.execute(f"CREATE TEMP VIEW release_{stage} AS " + " UNION ALL BY NAME ".join(parts))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def execute(sql: str, store: str | Store, *, batch_rows: int = 8192) -> pa.RecordBatchReader:
    """Run a read-only query; the result streams as record batches."""
    con = connect(store)
    check_read_only(con, sql)
    try:
        relation = con.sql(sql)
        if relation is None:
            raise QueryError("the query returned no result")
        return relation.to_arrow_reader(batch_rows)
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from None


def run_query(sql: str, store: str | Store) -> pa.Table:
    return execute(sql, store).read_all()


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
