"""The query views as a user meets them (issue 22, "Friendlier queries"): the listing of
views and columns, internal sources hidden from the catalog, views built only for the
trees a query names, the table and records formats for wide rows, and ``stats`` in human
units. One small curated store with one release is built for the module."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.cells import cell_len

import pipelines.query as query
from pipelines.query import VIEWS, describe_views, execute, run_query, write_result
from pipelines.stats import human_bytes, store_stats
from pipelines.store.reader import Store
from tests.conftest import cli


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> str:
    """A store with raw runs, a curation (curated and rejected trees) and release wm/1."""
    from pipelines.release.build import create_release
    from pipelines.release.config import load_mixture
    from tests.pipelines.release.test_release import IN_MEMORY, curated_store

    store = curated_store(tmp_path_factory.mktemp("views") / "s", n=120)
    create_release(
        load_mixture("examples/mixtures/default.yaml", store), store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None
    )
    return store


def test_views_lists_every_view_and_its_columns(full, tmp_path):
    listed = {v.name: v for v in describe_views(full)}
    assert list(listed) == list(VIEWS) and all(v.present and v.columns for v in listed.values())
    columns = {name: {c for c, _ in v.columns} for name, v in listed.items()}
    assert {"transition_id", "next_state", "next_state.text", "provenance.run_id", "action.canonical"} <= columns["transitions"]
    assert {"transition_id", "next_state.text", "status", "curation_id"} <= columns["curated"]
    assert {"transition_id", "reason", "curation_id"} <= columns["rejected"]
    assert {"name", "version", "stage", "split", "rows", "sha256"} <= columns["releases"]
    for stage in ("cpt", "sft", "rl"):
        assert {"name", "version", "split"} <= columns[f"release_{stage}"], stage
    assert {"prompt", "completion"} <= columns["release_sft"]
    assert dict(listed["transitions"].columns)["next_state.text"] == "VARCHAR"

    text = cli("views", "--store", full).stdout
    for name, description in VIEWS.items():
        assert f"{name}: {description}\n" in text
    assert re.search(r"^ {4}next_state\.text +VARCHAR$", text, re.MULTILINE)
    assert cli("query", "--schema", "--store", full).stdout == text
    as_json = json.loads(cli("views", "--store", full, "--json").stdout)
    assert [v["name"] for v in as_json] == list(VIEWS) and ["step", "INTEGER"] in as_json[0]["columns"]

    (tmp_path / "raw-only").mkdir()
    bare = {v.name: v for v in describe_views(str(tmp_path / "raw-only"))}
    assert bare["transitions"].present and not bare["curated"].present and bare["curated"].columns == []
    assert "curated: " in (out := cli("views", "--store", str(tmp_path / "raw-only")).stdout)
    assert "(none in this store yet)" in out.split("curated: ")[1].splitlines()[0]


def test_query_help_names_every_view():
    from pipelines.cli import VIEW_NAMES

    assert ", ".join(VIEWS) == VIEW_NAMES
    text = " ".join(cli("query", "--help").stdout.split())
    assert all(name in text for name in VIEWS) and "trajforge views" in text and "--schema" in text
    no_sql = cli("query", "--store", ".", check=False)
    assert no_sql.returncode == 2 and "--schema" in no_sql.stderr


CATALOG = {
    "SHOW TABLES": "name",
    "SHOW ALL TABLES": "name",
    "SELECT table_name FROM information_schema.tables": "table_name",
    "SELECT DISTINCT table_name FROM information_schema.columns": "table_name",
    "SELECT view_name FROM duckdb_views() WHERE NOT internal": "view_name",
    "SELECT DISTINCT table_name FROM duckdb_columns() WHERE NOT internal": "table_name",
}


@pytest.mark.parametrize("sql", CATALOG)
def test_the_catalog_shows_the_views_and_nothing_internal(full, sql):
    names = set(run_query(sql, full).column(CATALOG[sql]).to_pylist())
    assert names == set(VIEWS)
    assert run_query("SELECT count(*) AS n FROM duckdb_tables()", full).to_pylist() == [{"n": 0}]


class SpyStore(Store):
    """A store that notes which trees are listed and which curation folders are opened."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.scanned: set[str] = set()
        self.attributes: set[str] = set()

    def scan(self, kind: str = "raw"):
        self.scanned.add(kind)
        return super().scan(kind)

    def curation_attributes(self, tree: str):
        self.attributes.add(tree)
        return super().curation_attributes(tree)


@pytest.mark.parametrize(
    ("sql", "views", "trees"),
    [
        ("SELECT 1", [], set()),
        ("SELECT count(*) FROM transitions WHERE domain = 'web'", ["transitions"], {"raw"}),
        ("SELECT count(*) FROM rejected", ["rejected"], {"rejected"}),
        (
            "WITH c AS (SELECT * FROM curated) SELECT count(*) FROM c JOIN transitions USING (trajectory_id)",
            ["transitions", "curated"],
            {"raw", "curated"},
        ),
        ("SELECT count(*) FROM release_sft WHERE split = 'train'", ["release_sft"], set()),
        ("SELECT DISTINCT stage FROM releases", ["releases"], set()),
        ("PIVOT (SELECT domain FROM rejected) ON domain USING count(*)", ["rejected"], {"rejected"}),
        ("SELECT count(*) FROM pragma_table_info('curated')", list(VIEWS), {"raw", "curated", "rejected"}),
        ("SHOW TABLES", list(VIEWS), {"raw", "curated", "rejected"}),
    ],
)
def test_a_query_builds_only_the_views_it_names(full, monkeypatch, sql, views, trees):
    made: list[list[str]] = []
    opened_releases: list[int] = []
    hashed: list[str] = []

    def build_views(con, store, names):
        made.append(query_build(con, store, names))
        return made[-1]

    def store_releases(store):
        opened_releases.append(1)
        return releases(store)

    def check(self, entries):
        hashed.extend({e.stage for e in entries})
        return release_check(self, entries)

    query_build, releases = query.build_views, query.store_releases
    release_check = query.Release.check
    monkeypatch.setattr(query, "build_views", build_views)
    monkeypatch.setattr(query, "store_releases", store_releases)
    monkeypatch.setattr(query.Release, "check", check)
    store = SpyStore(full)
    assert run_query(sql, store).num_rows >= 1
    assert made == [views]  # what the connection registered
    assert store.scanned == trees
    assert store.attributes == {t for t in trees if t != "raw"}
    reads_releases = any(v.startswith("release") for v in views)
    assert bool(opened_releases) == reads_releases
    assert set(hashed) == {v.removeprefix("release_") for v in views if v.startswith("release_")}


def test_records_format_gives_one_block_per_row(store):
    sql = "SELECT transition_id, step, 'one' || chr(10) || 'two' AS lines, repeat('x', 5000) AS long FROM transitions LIMIT 3"
    out = cli("query", sql, "--store", str(store), "-x").stdout
    assert out == cli("query", sql, "--store", str(store), "--format", "records").stdout
    blocks = out.split("-[ RECORD ")[1:]
    assert [b.split(" ]")[0] for b in blocks] == ["1", "2", "3"] and out.endswith("(3 rows)\n")
    first = blocks[0].splitlines()[1:]
    assert re.fullmatch(r"transition_id \| [0-9a-f]{32}", first[0])
    assert first[1] == "step          | 0" or re.fullmatch(r"step {10}\| \d+", first[1])
    assert first[2:4] == ["lines         | one", "              | two"]  # a value's own lines stay lines, aligned
    assert first[4] == "long          | " + "x" * (query.RECORD_CHARS - 1) + "\u2026"
    limited = io.StringIO()
    assert write_result(execute("SELECT * FROM range(5)", str(store)), "records", limited, limit=2) == 5
    assert limited.getvalue().count("-[ RECORD") == 2 and "(5 rows, first 2 shown" in limited.getvalue()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("columns", [60, 100, 200])
def test_table_cuts_wide_rows_to_one_line_each(store, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = Terminal()
    sql = "SELECT repeat('y', 300) AS wide, 'a' || chr(10) || 'b' AS nl, * FROM transitions ORDER BY transition_id LIMIT 4"
    assert write_result(execute(sql, str(store)), "table", out) == 4
    lines = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()  # a terminal gets bold headers
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert len(table) == 4 + 4 and all(cell_len(line) <= columns for line in table), max(map(cell_len, table))
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 4  # one line per row: nothing wraps
    assert all("\u2026" in row for row in rows) and "y\u2026" in rows[0] and "y" * 81 not in out.getvalue()
    assert "(4 rows)" in lines and any(line.startswith("(wide rows: ") and "-x shows" in line for line in lines)


def test_table_keeps_short_cells_whole(store, transitions):
    out = io.StringIO()
    write_result(execute("SELECT domain, count(*) AS n FROM transitions GROUP BY 1 ORDER BY 1", str(store)), "table", out)
    text = out.getvalue()
    assert all(f" {d} " in text for d in {t.domain for t in transitions})
    assert "\u2026" not in text and "wide rows" not in text
    out = io.StringIO()
    write_result(execute("SELECT 'a' || chr(10) || 'b' AS nl", str(store)), "table", out)
    assert "│ a\\nb │" in out.getvalue()  # a newline inside a cell is shown, not broken


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1 KB"),
        (1536, "1.54 KB"),
        (999_499, "999 KB"),
        (999_500, "1 MB"),
        (2_060_000, "2.06 MB"),
        (12_400_000_000, "12.4 GB"),
        (3 * 10**12, "3 TB"),
    ],
)
def test_human_bytes(n, text):
    assert human_bytes(n) == text


def test_stats_prints_bytes_in_human_units(store):
    s = store_stats(str(store))
    out = cli("stats", "--store", str(store)).stdout
    summary = out.splitlines()[0]
    assert f", {human_bytes(s.bytes)}, failed-step ratio" in summary and re.search(r"\d KB,", summary)
    for domain, run, rows, size in s.by_run:
        assert re.search(rf"│ {domain} +│ {run} +│ {rows} +│ {re.escape(human_bytes(size))} +│", out), (domain, size)
    assert json.loads(cli("stats", "--store", str(store), "--json").stdout)["bytes"] == s.bytes  # raw integers
