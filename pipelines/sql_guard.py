"""Which statements and functions a store query may use: the check before the engine runs it.

The wall is the engine: ``pipelines.query.connect`` turns DuckDB's external access off and
locks its configuration, so no query reads or writes a file whatever it says. This check
comes first, as defence in depth and so that every refusal is one line naming what was
refused. It also refuses what touches no file but is not a read (CREATE MACRO, a temp
table, SET VARIABLE), SQL hidden in strings (``query('...')``), and what shows host state
(``current_setting``, ``pg_settings``)::

    check_read_only(con, "EXPLAIN ANALYZE COPY (SELECT 1) TO 'x.csv'")
    # QueryError: query refused: COPY writes files; queries are read-only
"""

from __future__ import annotations

import functools
import re

import duckdb

from schemas.errors import QueryError

ST = duckdb.StatementType
READ_ONLY = "queries are read-only (SELECT, EXPLAIN, PIVOT)"
STORE_ONLY = "queries read only the store's views"

#: Why each kind of statement other than a query is refused.
STATEMENT_REASONS: dict[ST, str] = {
    ST.COPY: "writes files",
    ST.COPY_DATABASE: "writes files",
    ST.EXPORT: "writes files",
    ST.ATTACH: "opens another database",
    ST.DETACH: "detaches a database",
    ST.LOAD: "installs or loads extensions",
    ST.EXTENSION: "installs or loads extensions",
    ST.SET: "changes settings",
    ST.VARIABLE_SET: "changes settings",
    ST.PRAGMA: "runs a pragma",
    ST.CALL: "runs a procedure",
    ST.CREATE: "creates objects",
    ST.CREATE_FUNC: "creates functions",
    ST.DROP: "drops objects",
    ST.ALTER: "alters objects",
    ST.INSERT: "writes data",
    ST.UPDATE: "writes data",
    ST.DELETE: "writes data",
    ST.MERGE_INTO: "writes data",
}

#: Table functions that only compute or describe the store's own views.
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {
        *("range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree"),
        *("summary", "histogram", "histogram_values", "pg_timezone_names", "icu_calendar_names"),
        *("duckdb_views", "duckdb_tables", "duckdb_columns", "duckdb_schemas", "duckdb_types", "duckdb_functions"),
        *("duckdb_keywords", "duckdb_constraints", "duckdb_dependencies", "duckdb_indexes", "duckdb_sequences"),
        *("pragma_table_info", "pragma_show"),
    }
)

#: Scalar functions that show the host or the engine's state, or change it.
DENIED_FUNCTIONS: dict[str, str] = {
    "getenv": "reads the process environment",
    "current_setting": "reads engine settings (host paths)",
    "write_log": "writes to the engine log",
}
#: System views that show the engine's state.
DENIED_VIEWS: dict[str, str] = {
    "pg_settings": "reads engine settings (host paths)",
    "duckdb_logs": "reads the engine log",
}

# Words that start a statement other than a query, to name them when they hide inside one.
_STATEMENT_WORDS = {"COPY", "EXPORT", "ATTACH", "DETACH", "INSTALL", "LOAD", "PRAGMA", "CALL", "SET", "RESET", "CREATE"}
_STATEMENT_WORDS |= {"DROP", "ALTER", "INSERT", "UPDATE", "DELETE", "MERGE", "CHECKPOINT", "VACUUM", "PREPARE"}

_DYNAMIC_SQL = {"query", "query_table", "json_execute_serialized_sql"}
# Readers of files, by the names DuckDB and its extensions give them (also those not loaded).
_FILE_READER = re.compile(
    r"^(read_\w+|parquet_\w+|glob|sniff_csv|\w+_scan(ner)?|(iceberg|delta|ducklake|sqlite|postgres|mysql|odbc|"
    r"lance|vortex|excel|st)_\w+)$"
)


@functools.cache
def _table_functions() -> frozenset[str]:
    """Every table function this DuckDB ships (a new one is refused until it is allowed here)."""
    with duckdb.connect(":memory:", config={"enable_external_access": False}) as con:
        rows = con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type IN ('table', 'table_macro')"
        ).fetchall()
    return frozenset(r[0].lower() for r in rows)


def function_refusal(name: str) -> str | None:
    """Why calling ``name`` is refused, or None when a store query may call it."""
    name = name.lower()
    if name in DENIED_FUNCTIONS:
        return DENIED_FUNCTIONS[name]
    if name in ALLOWED_TABLE_FUNCTIONS:
        return None
    if name in _DYNAMIC_SQL:
        return "runs SQL given as a string"
    if _FILE_READER.match(name):
        return "reads files outside the store"
    if name in _table_functions():
        return "reaches engine or host state, not the store"
    return None


def _tokens(sql: str) -> list[tuple[int, str, str]]:
    """(offset, token type, text) of each token that is not a comment."""
    try:
        raw = duckdb.tokenize(sql)
    except Exception as exc:  # the lexer's own failure: the SQL is not readable as SQL
        raise QueryError(f"SQL does not parse: {exc}") from None
    ends = [o for o, _ in raw[1:]] + [len(sql)]
    return [(o, t.name, sql[o:e].strip()) for (o, t), e in zip(raw, ends, strict=True) if t.name != "comment"]


def sql_words(sql: str) -> set[str]:
    """Every identifier, keyword and string of a query, lower case and unquoted (``main."Curated"``
    gives main and curated): what the query could name, comments left out."""
    quotes = {"identifier": '"', "string_const": "'"}
    return {text.strip(quotes.get(kind, "")).lower() for _, kind, text in _tokens(sql) if kind != "operator"}


def _leading(sql: str, words: int = 2) -> str:
    """The first keywords of a statement (``UPDATE EXTENSIONS``, ``COPY``), for messages."""
    lead = []
    for _, kind, text in _tokens(sql):
        if kind != "keyword" or len(lead) == words:
            break
        lead.append(text.upper())
    return " ".join(lead) or "statement"


def _refuse(what: str, why: str) -> QueryError:
    return QueryError(f"query refused: {what} {why}; {READ_ONLY}")


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse any statement that is not a query, and any function that reaches past the store."""
    if not sql.strip():
        raise QueryError("empty query")
    tokens = _tokens(sql)
    _check_statements(con, sql)
    for i, (_, kind, text) in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        name = text.strip('"').lower()
        if kind in ("identifier", "keyword"):
            called = nxt is not None and nxt[2].startswith("(")
            why = function_refusal(name) if called else DENIED_VIEWS.get(name)
            if why:
                raise QueryError(f"query refused: {name} {why}; {STORE_ONLY}")


def _check_statements(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        line = str(exc).splitlines()[0]
        inner = [t.upper() for _, kind, t in _tokens(sql) if kind == "keyword" and t.upper() in _STATEMENT_WORDS]
        hint = f" ({inner[0]} cannot appear inside a query; {READ_ONLY})" if inner else ""
        raise QueryError(f"SQL does not parse: {line}{hint}") from None
    if not statements:
        raise QueryError("empty query")
    for st in statements:
        try:
            kind = st.type
        except ValueError:  # a statement type the Python client does not know (UPDATE EXTENSIONS)
            raise _refuse(_leading(st.query), "is not a query") from None
        if kind == ST.EXPLAIN:
            _check_statements(con, _explained(st.query))
        elif kind == ST.MULTI and any(t[2].lower() == "pivot" for t in _tokens(st.query)):
            continue  # PIVOT without an IN list: DuckDB plans it as several statements
        elif kind != ST.SELECT:
            words = 2 if kind == ST.LOAD or kind not in STATEMENT_REASONS else 1  # FORCE INSTALL, ...
            what = _leading(st.query, words)
            what = kind.name.replace("_", " ") if what.startswith("WITH") else what  # WITH ... INSERT
            raise _refuse(what, STATEMENT_REASONS.get(kind, "is not a query"))


def _explained(sql: str) -> str:
    """The statement an EXPLAIN [ANALYZE] [(options)] explains."""
    tokens = _tokens(sql)
    i = 1  # past EXPLAIN
    if i < len(tokens) and tokens[i][2].lower() == "analyze":
        i += 1
    if i < len(tokens) and tokens[i][2].startswith("("):  # options, or a parenthesised query
        depth, j = 0, i
        while j < len(tokens):
            depth += tokens[j][2].count("(") - tokens[j][2].count(")")
            j += 1
            if depth <= 0:
                break
        i = j if j < len(tokens) else i
    return sql[tokens[i][0] :] if i < len(tokens) else "SELECT 1"
