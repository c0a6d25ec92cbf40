"""Query benchmark: ``trajforge query`` against DuckDB on native Parquet, where the time
goes, and the start-up of a query as the store grows.

    python benchmarks/query.py [--transitions 200000] [--rounds 5] [--demo-store /tmp/demo-store]

One run, on the same synthetic records (``benchmarks/store.py``'s generator): the store's
GROUP BY through ``run_query`` and through DuckDB over a Parquet file of the same records,
then the steps between them, each timed alone: the engine on an open connection (no
listing or verification), DuckDB on the pyarrow dataset without the logical-layout view,
and pyarrow reading the columns the query needs. Rounds interleave the variants, so the
machine's noise hits all alike; medians are reported. With ``--demo-store``, also the
start-up (``SELECT 1``) of this ``pipelines.query`` and of the last commit's (lazy views
against all views built), and of queries naming one view or all of them. Prints Markdown.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from benchmarks.store import QUERY, chunks
from pipelines.query import connect, run_query
from pipelines.store import Store, StoreWriter

ROOT = Path(__file__).resolve().parents[1]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def medians(variants: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each variant over ``rounds`` interleaved rounds (after one warm-up each)."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            times[name].append(timed(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def build(work: Path, n: int) -> tuple[Path, Path, float]:
    store, parquet = work / "store", work / "bench.parquet"
    with StoreWriter(str(store), "bench") as w:
        for chunk in chunks(n, seed=0):
            w.write_many(chunk)
    batches = Store.open(str(store)).iter_batches()
    first = next(batches)
    with pq.ParquetWriter(parquet, first.schema, compression="zstd") as pw:
        pw.write_batch(first)
        for b in batches:
            pw.write_batch(b)
    verify = timed(lambda: run_query("SELECT 1 FROM transitions LIMIT 1", str(store)))  # the first read verifies every shard
    return store, parquet, verify


def last_commit_query():
    """The last commit's ``pipelines.query`` (every view built, registered sources), to compare in the same run."""
    old = subprocess.run(["git", "show", "HEAD:pipelines/query.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return load_module("query_before", old.stdout)


def query_variants(store: Path, parquet: Path) -> dict[str, Callable[[], object]]:
    old = last_commit_query()
    open_con = connect(str(store), views=["transitions"])
    paths = [s.path for s in Store.open(str(store)).readable_shards("raw")]
    on_disk = pads.dataset(paths, format="ipc")
    direct = duckdb.connect()
    direct.register("shards", on_disk)
    raw_sql = QUERY.replace("next_state.text", "observation_texts[2]").replace("transitions", "shards")
    return {
        "trajforge query (run_query)": lambda: run_query(QUERY, str(store)),
        "trajforge query, last commit": lambda: old.run_query(QUERY, str(store)),
        "DuckDB on native Parquet": lambda: (
            duckdb.connect().sql(QUERY.replace("transitions", f"read_parquet('{parquet}')")).fetchall()
        ),
        "engine only (open connection)": lambda: open_con.sql(QUERY).fetchall(),
        "DuckDB on the IPC dataset, no view": lambda: direct.sql(raw_sql).fetchall(),
        "pyarrow: read domain + observation_texts": lambda: on_disk.to_table(columns=["domain", "observation_texts"]),
    }


def load_module(name: str, source: str) -> types.ModuleType:
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # the last commit's pipelines/query.py
    return module


def startup_variants(demo: str) -> dict[str, Callable[[], object]]:
    old = last_commit_query()
    quiet = Store.open(demo, on_warning=lambda m: None)
    every = " UNION ALL ".join(f"SELECT count(*) FROM (SELECT * FROM {v} LIMIT 0)" for v in connect_views(quiet))
    return {
        "SELECT 1, last commit (every view built)": lambda: old.run_query("SELECT 1", quiet),
        "SELECT 1, lazy views": lambda: run_query("SELECT 1", quiet),
        "one view (transitions), lazy": lambda: run_query("SELECT count(*) FROM (SELECT * FROM transitions LIMIT 0)", quiet),
        "one view (release_sft), lazy": lambda: run_query("SELECT count(*) FROM (SELECT * FROM release_sft LIMIT 0)", quiet),
        "all views, lazy": lambda: run_query(every, quiet),
    }


def connect_views(store: Store) -> list[str]:
    con = connect(store)
    return [r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()]


def process_startup(demo: str, rounds: int) -> dict[str, float]:
    """Wall time of a fresh process that runs ``SELECT 1``: Python, the imports and the query."""
    code = "import sys; from pipelines.query import run_query; run_query('SELECT 1', sys.argv[1])"
    cmds = {
        "process: python -c run_query('SELECT 1')": [sys.executable, "-c", code, demo],
        "process: trajforge query 'SELECT 1'": [sys.executable, "-m", "trajforge", "query", "SELECT 1", "--store", demo],
        "process: python -c 'import trajforge' (no query)": [sys.executable, "-c", "import trajforge"],
    }
    run = {k: (lambda c=c: subprocess.run(c, cwd=ROOT, capture_output=True, check=True)) for k, c in cmds.items()}
    return medians(run, rounds)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transitions", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--demo-store", help="also measure start-up on this store (read only)")
    ap.add_argument("--workdir", help="where to build the store (default: a temporary folder, removed after)")
    ap.add_argument("--reuse", action="store_true", help="reuse the store and Parquet file already in --workdir")
    args = ap.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-query-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TRAJFORGE_STATE_DIR", str(work / "state"))

    t0 = time.perf_counter()
    if args.reuse and (work / "bench.parquet").exists():
        store, parquet = work / "store", work / "bench.parquet"
        verify = timed(lambda: run_query("SELECT 1 FROM transitions LIMIT 1", str(store)))
    else:
        store, parquet, verify = build(work, args.transitions)
    built = time.perf_counter() - t0
    size = sum(r.manifest.bytes for r in Store.open(str(store)).runs())
    theirs = sorted(duckdb.connect().sql(QUERY.replace("transitions", f"read_parquet('{parquet}')")).fetchall())
    ours = sorted(tuple(r.values()) for r in run_query(QUERY, str(store)).to_pylist())
    assert [r[:2] for r in ours] == [r[:2] for r in theirs], (ours, theirs)
    q = medians(query_variants(store, parquet), args.rounds)

    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    base = q["DuckDB on native Parquet"]
    print(f"\n### Query: {args.transitions:,} transitions ({datetime.now(UTC):%Y-%m-%d}, {cpu}, {os.cpu_count()} cores)")
    print(f"pyarrow {pa.__version__}, duckdb {duckdb.__version__}; store {size / 1e6:.0f} MB of Arrow IPC (zstd),")
    print(
        f"Parquet {parquet.stat().st_size / 1e6:.0f} MB; built in {built:.0f} s; first read (verifies all shards) {verify:.2f} s."
    )
    print(f"`{QUERY}`, median of {args.rounds} interleaved rounds:\n")
    print("| variant | median s | ratio to native Parquet |\n|---|---|---|")
    for name, t in q.items():
        print(f"| {name} | {t:.3f} | {t / base:.2f}x |")
    if args.demo_store:
        s = medians(startup_variants(args.demo_store), args.rounds * 2)
        p = process_startup(args.demo_store, args.rounds)
        print(f"\nStart-up on {args.demo_store} (in-process median of {args.rounds * 2}; processes median of {args.rounds}):\n")
        print("| what | median s |\n|---|---|")
        for name, t in {**s, **p}.items():
            print(f"| {name} | {t:.3f} |")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
