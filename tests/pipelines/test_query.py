from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

from pipelines.query import run_query
from pipelines.stats import store_stats
from schemas import QueryError
from tests.conftest import cli


def test_select_matches_the_records(store, transitions):
    got = run_query("SELECT domain, count(*) AS n FROM transitions GROUP BY 1 ORDER BY 1", str(store)).to_pylist()
    assert got == [{"domain": d, "n": n} for d, n in sorted(Counter(t.domain for t in transitions).items())]
    tid = transitions[5].transition_id
    sql = f"SELECT next_state.text AS t, action.canonical AS a FROM transitions WHERE transition_id = '{tid}'"
    row = run_query(sql, str(store)).to_pylist()
    assert row == [{"t": transitions[5].next_state.text, "a": transitions[5].action.canonical}]


def test_query_pushes_projection_and_filters_into_the_scan(store):
    plan = run_query("EXPLAIN SELECT count(*) FROM transitions WHERE domain = 'web'", str(store)).to_pylist()
    text = "\n".join(r["explain_value"] for r in plan)
    assert "ARROW_SCAN" in text
    assert "Filters:" in text and "web" in text  # the filter reached the dataset scan


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO transitions SELECT * FROM transitions",
        "CREATE TABLE t AS SELECT 1",
        "ATTACH 'other.db'",
        "COPY (SELECT 1) TO 'out.csv'",
        "SET threads = 1",
        "INSTALL httpfs",
        "LOAD httpfs",
        "PRAGMA version",
        "EXPORT DATABASE 'x'",
        "DETACH memory",
        "CALL pragma_version()",
        "DELETE FROM transitions",
        "SELECT 1; DROP VIEW transitions",
        "UPDATE transitions SET step = 0",
    ],
)
def test_writing_statements_are_refused(store, sql):
    with pytest.raises(QueryError, match=r"^query refused: |does not parse"):
        run_query(sql, str(store))


def test_refused_statement_is_a_one_line_cli_error(store, tmp_path):
    proc = cli("query", f"COPY (SELECT * FROM transitions) TO '{tmp_path}/leak.csv'", "--store", str(store), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: query refused: COPY writes files; queries are read-only (SELECT, EXPLAIN, PIVOT)"
    assert not (tmp_path / "leak.csv").exists()
    bad = cli("query", "SELECT nope FROM transitions", "--store", str(store), check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "nope" in bad.stderr
    missing = cli("query", "SELECT 1", "--store", str(tmp_path / "nowhere"), check=False)
    assert missing.returncode == 2 and "no such store" in missing.stderr


def test_output_formats(store, tmp_path, transitions):
    sql = "SELECT transition_id, step, provenance FROM transitions ORDER BY transition_id LIMIT 3"
    js = [json.loads(line) for line in cli("query", sql, "--store", str(store), "-f", "json").stdout.splitlines()]
    assert len(js) == 3 and js[0]["provenance"]["collected_at"].endswith("+00:00")
    csv_out = cli("query", sql, "--store", str(store), "-f", "csv").stdout.splitlines()
    assert csv_out[0] == "transition_id,step,provenance" and len(csv_out) == 4
    cli("query", sql, "--store", str(store), "-f", "parquet", "--out", str(tmp_path / "r.parquet"))
    assert pq.read_table(tmp_path / "r.parquet").column("transition_id").to_pylist() == [r["transition_id"] for r in js]
    table = cli("query", sql, "--store", str(store)).stdout
    assert js[0]["transition_id"] in table and "(3 rows)" in table
    no_out = cli("query", sql, "--store", str(store), "-f", "parquet", check=False)
    assert no_out.returncode == 2 and "--out" in no_out.stderr


def test_empty_store_has_an_empty_view(tmp_path):
    (tmp_path / "s").mkdir()
    assert run_query("SELECT count(*) AS n FROM transitions", str(tmp_path / "s")).to_pylist() == [{"n": 0}]


def test_stats(store, transitions):
    s = store_stats(str(store))
    assert s.transitions == len(transitions)
    assert s.trajectories == len({t.trajectory_id for t in transitions})
    assert s.failed_steps == sum(t.action_error is not None for t in transitions) > 0
    assert {d for d, *_ in s.by_domain} == {t.domain for t in transitions}
    assert sum(n for _, n in s.by_day) == len(transitions)
    assert s.bytes == sum(p.stat().st_size for p in store.glob("raw/*/*/part-*.arrow"))
    out = json.loads(cli("stats", "--store", str(store), "--json").stdout)
    assert out["transitions"] == len(transitions) and 0 < out["failed_ratio"] < 0.5


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_a_result_with_a_column_named_twice_is_one_line_not_a_traceback(store, fmt):
    """Rows are written by column name: a second ``a`` would hide the first (JSON, CSV) or
    break the table's widths (a traceback)."""
    proc = cli("query", "SELECT 1 AS a, 2 AS a", "--store", str(store), "--format", fmt, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: column 'a' is named twice in the result: give each its own name (AS)"]
