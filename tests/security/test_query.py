"""Hostile SQL against ``trajforge query`` and the Python API (issue 21, "Queries").

Every query in ``HOSTILE`` tries to read a host file, write a file, load an extension,
change a setting, change the catalog or read the process environment, in every position
(CTE, subquery, EXPLAIN, EXPLAIN ANALYZE, several statements, comments, odd casing). Each
must be refused with one line naming what was refused, and no file may change: neither the
store nor a canary folder nor DuckDB's home folder. ``ENGINE_WALL`` runs the file-touching
ones straight on ``connect()``'s connection, with no statement check, to show that the
engine itself is confined.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from pipelines.query import connect, query_error, run_query
from pipelines.store import StoreWriter, WriterOptions
from schemas import QueryError
from tests.conftest import cli, make_transitions

SECRET = "tf-canary-7f3a9c1e5b"

# Table functions this DuckDB ships that take a file path or glob (derived from its catalog,
# so a reader added by a new version is tried too), and readers of extensions not loaded.
with duckdb.connect(":memory:") as _con:
    _TABLE_FUNCTIONS = {
        r[0] for r in _con.execute("SELECT function_name FROM duckdb_functions() WHERE function_type = 'table'").fetchall()
    }
FILE_READERS = sorted(
    {f for f in _TABLE_FUNCTIONS if f.startswith(("read_", "parquet_")) or f in ("glob", "sniff_csv")}
    | {"iceberg_scan", "delta_scan", "sqlite_scan", "postgres_scan", "mysql_scan"}
)

#: (SQL, word the refusal must name). {canary}: an empty folder; {store}: the store; {shard}: one of its shards.
HOSTILE: list[tuple[str, str]] = [
    *((f"SELECT * FROM {f}('/etc/passwd')", f) for f in FILE_READERS),
    # host files and the environment, in every position
    ("SELECT * FROM read_text('/proc/self/environ')", "read_text"),
    ("WITH e AS (SELECT content FROM read_text('/proc/self/environ')) SELECT * FROM e", "read_text"),
    ("SELECT (SELECT content FROM read_blob('/proc/self/environ')) AS x", "read_blob"),
    ("SELECT * FROM transitions WHERE EXISTS (SELECT 1 FROM glob('/etc/*'))", "glob"),
    ("EXPLAIN ANALYZE SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
    ("SELECT 1; SELECT * FROM read_text('/etc/hostname')", "read_text"),
    ("SELECT * FROM \"READ_TEXT\"('/etc/hostname')", "read_text"),
    ("select * from rEaD_cSv_AuTo('/etc/passwd')", "read_csv_auto"),
    ("SELECT * FROM system.main.read_text('/etc/hostname')", "read_text"),
    ("SELECT * FROM read_text/* split */('/etc/hostname')", "read_text"),
    ("SELECT * FROM '/etc/passwd'", "/etc/passwd"),
    ("SELECT * FROM '{store}/raw/web/synth-s0/manifest.json'", "manifest.json"),
    ("SELECT * FROM read_parquet('{canary}/../**/*.arrow')", "read_parquet"),
    ("SELECT * FROM query('SELECT * FROM read_text(''/proc/self/environ'')')", "query"),
    ("SELECT * FROM query_table('transitions')", "query_table"),
    ("SELECT getenv('TF_CANARY_SECRET')", "getenv"),
    ("SELECT current_setting('home_directory')", "current_setting"),
    ("SELECT * FROM pg_catalog.pg_settings", "pg_settings"),
    ("SELECT * FROM duckdb_settings()", "duckdb_settings"),
    ("SELECT * FROM duckdb_secrets()", "duckdb_secrets"),
    ("SELECT * FROM duckdb_extensions()", "duckdb_extensions"),
    ("SELECT * FROM which_secret('s3://bucket/x', 's3')", "which_secret"),
    ("SELECT * FROM canary_table", "canary_table"),  # a Python variable (replacement scan)
    # writes: COPY, EXPORT, ATTACH in every position
    ("COPY (SELECT * FROM transitions) TO '{canary}/leak.csv'", "COPY"),
    ("COPY (SELECT * FROM transitions) TO '{shard}' (FORMAT csv)", "COPY"),
    ("EXPLAIN ANALYZE COPY (SELECT * FROM transitions) TO '{shard}'", "COPY"),
    ("EXPLAIN COPY (SELECT 1) TO '{canary}/leak.csv'", "COPY"),
    ("/* a */ eXpLaIn /* b */ AnAlYzE cOpY (SELECT 1) To '{canary}/leak.csv'", "COPY"),
    ("EXPLAIN (FORMAT json) COPY (SELECT 1) TO '{canary}/leak.json'", "COPY"),
    ("WITH t AS (SELECT 1) COPY (SELECT * FROM t) TO '{canary}/leak.csv'", "COPY"),
    ("SELECT * FROM (COPY (SELECT 1) TO '{canary}/leak.csv')", "COPY"),
    ("SELECT 1; COPY (SELECT 1) TO '{canary}/leak.csv'", "COPY"),
    ("SELECT 1; -- only a comment\nCOPY (SELECT 1) TO '{canary}/leak.csv'", "COPY"),
    ("cOpY transitions TO '{canary}/leak.parquet' (FORMAT parquet)", "COPY"),
    ("COPY transitions FROM '/etc/passwd'", "COPY"),
    ("EXPORT DATABASE '{canary}/export'", "EXPORT"),
    ("EXPLAIN ANALYZE EXPORT DATABASE '{canary}/export'", "EXPORT"),
    ("COPY FROM DATABASE memory TO temp", "COPY"),
    ("ATTACH '{canary}/new.db' AS x", "ATTACH"),
    ("SELECT 1; ATTACH ':memory:' AS m", "ATTACH"),
    ("DETACH memory", "DETACH"),
    # extensions
    ("INSTALL httpfs", "INSTALL"),
    ("FORCE INSTALL httpfs", "INSTALL"),
    ("iNsTaLl httpfs FROM 'http://127.0.0.1:9'", "INSTALL"),
    ("LOAD httpfs", "LOAD"),
    ("LOAD '{canary}/evil.duckdb_extension'", "LOAD"),
    ("UPDATE EXTENSIONS", "UPDATE EXTENSIONS"),
    ("EXPLAIN UPDATE EXTENSIONS", "UPDATE EXTENSIONS"),
    # settings, pragmas, procedures
    ("SET enable_external_access = true", "SET"),
    ("SET temp_directory = '{canary}/spill'", "SET"),
    ("RESET lock_configuration", "RESET"),
    ("SET VARIABLE x = 1", "SET"),
    ("SELECT 1; SET threads = 64", "SET"),
    ("PRAGMA profile_output = '{canary}/profile.json'", "PRAGMA"),
    ("PRAGMA version", "PRAGMA"),
    ("CALL enable_logging(storage_path = '{canary}/logs')", "CALL"),
    ("SELECT * FROM enable_logging()", "enable_logging"),
    ("CALL pragma_version()", "CALL"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("SELECT * FROM checkpoint()", "checkpoint"),
    # the catalog: not read-only even when nothing reaches the disk
    ("CREATE MACRO m(a) AS a + 1", "CREATE"),
    ("CREATE TEMP TABLE t AS SELECT * FROM transitions", "CREATE"),
    ("CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')", "CREATE"),
    ("CREATE OR REPLACE TEMP VIEW transitions AS SELECT 1", "CREATE"),
    ("EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1", "CREATE"),
    ("DROP VIEW transitions", "DROP"),
    ("INSERT INTO transitions SELECT * FROM transitions", "INSERT"),
    ("WITH t AS (SELECT 1) INSERT INTO transitions SELECT * FROM transitions", "INSERT"),
    ("UPDATE transitions SET step = 0", "UPDATE"),
    ("DELETE FROM transitions", "DELETE"),
    ("ALTER VIEW transitions RENAME TO t2", "ALTER"),
    ("PREPARE p AS COPY (SELECT 1) TO '{canary}/leak.csv'", "PREPARE"),
    ("BEGIN TRANSACTION", "BEGIN"),
]

#: The file-touching queries, run with no statement check: the engine alone must refuse them.
ENGINE_WALL = [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/proc/self/environ')",
    "SELECT * FROM read_blob('/proc/self/environ')",
    "SELECT * FROM read_json_objects('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM read_parquet('{shard}')",
    "SELECT * FROM parquet_metadata('{shard}')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM query('SELECT * FROM read_text(''/proc/self/environ'')')",
    "SELECT * FROM canary_table",
    "COPY (SELECT * FROM transitions) TO '{canary}/leak.csv'",
    "COPY (SELECT * FROM transitions) TO '{shard}' (FORMAT csv)",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{canary}/leak.csv'",
    "EXPORT DATABASE '{canary}/export'",
    "ATTACH '{canary}/new.db' AS x",
    "INSTALL httpfs",
    "LOAD httpfs",
    "UPDATE EXTENSIONS",
    "SET enable_external_access = true",
    "SET temp_directory = '{canary}/spill'",
    "RESET lock_configuration",
    "PRAGMA profile_output = '{canary}/profile.json'",
    "CALL enable_logging(storage_path = '{canary}/logs')",
    "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
]

canary_table = pa.table({"secret": [SECRET]})  # what a replacement scan would find


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory) -> Path:
    """One small store for the whole module (each test still checks that it is unchanged)."""
    path = tmp_path_factory.mktemp("query") / "store"
    with StoreWriter(str(path), "synth-s0", WriterOptions(rows_per_batch=8, rows_per_shard=20)) as w:
        w.write_many(make_transitions(80))
    return path


@pytest.fixture
def places(shared_store, tmp_path, monkeypatch) -> dict[str, str]:
    """The paths hostile queries aim at, with the secret planted in the environment."""
    monkeypatch.setenv("TF_CANARY_SECRET", SECRET)
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("untouched\n")
    shard = next(shared_store.glob("raw/web/*/part-*.arrow"))
    return {"store": str(shared_store), "canary": str(canary), "shard": str(shard)}


def snapshot(*roots: str | Path) -> dict[str, tuple[int, int, str]]:
    """Path -> (size, mtime, sha256) of every file under the roots (and the roots' existence)."""
    seen: dict[str, tuple[int, int, str]] = {}
    for root in map(Path, roots):
        seen[f"{root} exists"] = (int(root.exists()), 0, "")
        for p in sorted(root.rglob("*")) if root.is_dir() else ():
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
            seen[str(p)] = (st.st_size, st.st_mtime_ns, digest)
    return seen


def _watched(places: dict[str, str]) -> list[str | Path]:
    # DuckDB's own folders (extensions, secrets) and a spill folder in the working directory.
    return [places["store"], places["canary"], Path.home() / ".duckdb", Path.cwd() / ".tmp"]


def _one_line_refusal(message: str, named: str) -> None:
    assert "\n" not in message and "Traceback" not in message, message
    assert message.startswith(("query refused: ", "SQL does not parse: ")) or "does not exist" in message, message
    assert named.lower() in message.lower(), f"{message!r} does not name {named!r}"
    assert SECRET not in message


@pytest.mark.parametrize(("sql", "named"), HOSTILE, ids=[f"{i:02d}-{s[:40]}" for i, (s, _) in enumerate(HOSTILE)])
def test_hostile_query_is_refused_and_changes_nothing(places, sql, named):
    before = snapshot(*_watched(places))
    with pytest.raises(QueryError) as caught:
        run_query(sql.format(**places), places["store"])
    _one_line_refusal(str(caught.value), named)
    assert snapshot(*_watched(places)) == before
    assert sorted(os.listdir(places["canary"])) == ["keep.txt"]  # no leak.csv, export/, new.db, logs/, ...


@pytest.mark.parametrize("sql", ENGINE_WALL)
def test_engine_refuses_without_the_statement_check(places, sql):
    """The Python API's ``connect`` is confined by the engine: no statement check runs here."""
    before = snapshot(*_watched(places))
    con = connect(places["store"])
    with pytest.raises(duckdb.Error) as caught:
        con.sql(sql.format(**places)).fetchall()
    assert SECRET not in str(caught.value)
    message = str(query_error(caught.value, timeout=1, memory="1GB"))
    assert "\n" not in message and message
    assert snapshot(*_watched(places)) == before
    assert sorted(os.listdir(places["canary"])) == ["keep.txt"]
    assert con.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)


def test_hostile_queries_cover_the_issue():
    """At least 40 hostile queries, with every file reader and every statement kind named in the issue."""
    assert len(HOSTILE) >= 40
    assert {"read_csv", "read_csv_auto", "read_json", "read_ndjson", "read_parquet", "parquet_scan", "read_text"} <= set(
        FILE_READERS
    )
    assert {"read_blob", "glob", "sniff_csv", "parquet_metadata", "parquet_schema", "read_json_objects"} <= set(FILE_READERS)
    named = {n for _, n in HOSTILE}
    assert {"COPY", "EXPORT", "ATTACH", "INSTALL", "LOAD", "SET", "PRAGMA", "UPDATE EXTENSIONS", "CREATE"} <= named
    texts = [s.lower() for s, _ in HOSTILE]
    assert any(t.startswith("explain analyze copy") for t in texts) and any(t.startswith("with") for t in texts)
    assert any("/*" in t for t in texts) and any("--" in t for t in texts) and any("; copy" in t for t in texts)


def test_hostile_query_through_the_cli_is_one_line(places):
    for sql in (
        "EXPLAIN ANALYZE COPY (SELECT * FROM transitions) TO '{shard}'",
        "SELECT * FROM read_text('/proc/self/environ')",
        "UPDATE EXTENSIONS",
    ):
        before = snapshot(*_watched(places))
        proc = cli("query", sql.format(**places), "--store", places["store"], check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: query refused: ")
        assert "Traceback" not in proc.stderr and SECRET not in proc.stderr
        assert snapshot(*_watched(places)) == before


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("PIVOT (SELECT domain FROM transitions) ON domain USING count(*)", lambda t: t.num_rows == 1),
        ("PIVOT transitions ON domain IN ('web', 'swe') USING count(*) GROUP BY step", lambda t: t.num_rows > 1),
        ("UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b INTO NAME k VALUE v", lambda t: t.to_pylist()[1] == {"k": "b", "v": 2}),
        (
            "SELECT domain, step, row_number() OVER (PARTITION BY domain ORDER BY step DESC) AS rn FROM transitions",
            lambda t: 1 in t.column("rn").to_pylist(),
        ),
        (
            "SELECT domain, step FROM transitions QUALIFY row_number() OVER (PARTITION BY domain ORDER BY step) = 1",
            lambda t: t.num_rows == len(set(t.column("domain").to_pylist())),
        ),
        (
            "WITH per AS (SELECT trajectory_id, count(*) AS n FROM transitions GROUP BY 1) SELECT sum(n) AS n FROM per",
            lambda t: t.to_pylist() == [{"n": 80}],
        ),
        (
            "SELECT count(*) AS n FROM transitions WHERE regexp_matches(next_state.text, '[a-z]+')",
            lambda t: t.to_pylist()[0]["n"] > 0,
        ),
        (
            "SELECT json_extract(state.extra, '$') AS e, json_extract_string(provenance.extra, '$') AS p FROM transitions",
            lambda t: t.num_rows == 80,
        ),
        ("EXPLAIN ANALYZE SELECT count(*) FROM transitions", lambda t: t.num_rows == 1),
        ("DESCRIBE transitions", lambda t: "next_state" in t.column("column_name").to_pylist()),
        ("SELECT * FROM range(3)", lambda t: t.num_rows == 3),
    ],
)
def test_legitimate_queries_keep_working(shared_store, sql, expected):
    assert expected(run_query(sql, str(shared_store)))


def test_timeout_stops_a_runaway_query(shared_store, places):
    runaway = "SELECT count(*) FROM transitions a, transitions b, transitions c, transitions d, transitions e"
    with pytest.raises(QueryError, match=r"^query stopped after 1 s \(--timeout\)$"):
        run_query(runaway, str(shared_store), timeout=1)
    proc = cli("query", runaway, "--store", places["store"], "--timeout", "1", check=False)
    assert proc.returncode == 2 and proc.stderr == "error: query stopped after 1 s (--timeout)\n"


def test_memory_limit_stops_a_query_that_needs_more(shared_store, places):
    greedy = "SELECT list(a.next_state.text) FROM transitions a, transitions b, transitions c"
    with pytest.raises(QueryError, match=r"^query needs more memory than --memory 32MB allows \(") as caught:
        run_query(greedy, str(shared_store), memory="32MB")
    assert "\n" not in str(caught.value)
    proc = cli("query", greedy, "--store", places["store"], "--memory", "32MB", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--memory 32MB" in proc.stderr
    bad = cli("query", "SELECT 1", "--store", places["store"], "--memory", "lots", check=False)
    assert bad.returncode == 2 and bad.stderr == "error: --memory 'lots': expected a size such as 512MB or 2GB\n"
    with pytest.raises(QueryError, match="--timeout"):
        run_query("SELECT 1", str(shared_store), timeout=0)
