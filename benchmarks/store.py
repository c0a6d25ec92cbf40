"""Store benchmark: write and read N synthetic transitions, against JSONL(.zst) and Parquet.

    python benchmarks/store.py [--transitions 1000000] [--workdir benchmarks/.work]

Measured in one run, on the same records: write throughput of the shard store against
JSONL compressed with zstandard (level 3, all cores); bytes per transition against JSONL
and JSONL.zst; read throughput of both; the writer's resident memory as N grows (it
streams); and a GROUP BY through ``trajforge query`` against DuckDB over a native Parquet
file of the same records (median of 3 runs each). Prints a Markdown report.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from collectors.synth import Synthesizer
from pipelines.query import run_query
from pipelines.store import Store, StoreWriter
from schemas.arrow import from_record_batch

CHUNK = 10_000
QUERY = "SELECT domain, count(*), avg(length(next_state.text)) FROM transitions GROUP BY 1"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _obs(o) -> dict:
    return {
        "text": o.text,
        "format": o.format,
        "screenshot_png": None,
        "extra": o.extra,
        "truncated": o.truncated,
        "volatile_spans": [{"start": s.start, "end": s.end, "kind": s.kind} for s in o.volatile_spans],
    }


def as_json_dict(t) -> dict:
    """The record as a plain dict, built directly (faster than dataclasses.asdict)."""
    p = t.provenance
    return {
        "transition_id": t.transition_id,
        "trajectory_id": t.trajectory_id,
        "step": t.step,
        "domain": t.domain,
        "env_id": t.env_id,
        "task_id": t.task_id,
        "instruction": t.instruction,
        "state": _obs(t.state),
        "action": {"kind": t.action.kind, "canonical": t.action.canonical, "raw": t.action.raw},
        "next_state": _obs(t.next_state),
        "reward": t.reward,
        "terminated": t.terminated,
        "truncated": t.truncated,
        "action_error": t.action_error,
        "action_ms": t.action_ms,
        "observe_ms": t.observe_ms,
        "settle_ms": t.settle_ms,
        "provenance": {
            "run_id": p.run_id,
            "collector": p.collector,
            "collector_version": p.collector_version,
            "sandbox_backend": p.sandbox_backend,
            "image_digest": p.image_digest,
            "seed": p.seed,
            "policy": p.policy,
            "model": p.model,
            "job_id": p.job_id,
            "collected_at": p.collected_at.isoformat(),
            "simulated": p.simulated,
            "extra": p.extra,
        },
        "content_hash": t.content_hash,
    }


def chunks(n: int, seed: int):
    gen = Synthesizer(seed, run_id="bench", duplicates=0.05)
    it = gen.transitions(n)
    while True:
        chunk = [t for _, t in zip(range(CHUNK), it, strict=False)]
        if not chunk:
            return
        yield chunk


def writer_only(store: str, n: int) -> None:
    """Child mode: generate and write n transitions, print peak RSS in MB."""
    with StoreWriter(store, "bench") as w:
        for chunk in chunks(n, seed=1):
            w.write_many(chunk)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent across exec
    with open("/proc/self/status") as f:
        print(next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")) / 1e3)


def median_time(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transitions", type=int, default=1_000_000)
    ap.add_argument("--workdir", default=str(Path(__file__).parent / ".work"))
    ap.add_argument("--rss-sizes", default="100000,300000", help="N for the writer-only memory runs")
    ap.add_argument("--writer-only", nargs=2, metavar=("STORE", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.writer_only:
        writer_only(args.writer_only[0], int(args.writer_only[1]))
        return

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store, jsonl_zst, parquet = work / "store", work / "bench.jsonl.zst", work / "bench.parquet"
    n = args.transitions

    t_gen = t_arrow = t_jsonl = 0.0
    jsonl_bytes = 0
    rss_points = []
    cctx = zstandard.ZstdCompressor(level=3, threads=-1)
    with open(jsonl_zst, "wb") as raw, cctx.stream_writer(raw) as zf, StoreWriter(str(store), "bench") as w:
        done = 0
        t0 = time.perf_counter()
        for chunk in chunks(n, seed=0):
            t1 = time.perf_counter()
            t_gen += t1 - t0
            w.write_many(chunk)
            t2 = time.perf_counter()
            t_arrow += t2 - t1
            buf = io.StringIO()
            for t in chunk:
                buf.write(json.dumps(as_json_dict(t), ensure_ascii=False))
                buf.write("\n")
            data = buf.getvalue().encode()
            jsonl_bytes += len(data)
            zf.write(data)
            t0 = time.perf_counter()
            t_jsonl += t0 - t2
            done += len(chunk)
            if done in {n // 10, n // 4, n // 2} or done == n:
                rss_points.append((done, rss_mb()))
            if done % 100_000 == 0:
                print(f"  wrote {done}", file=sys.stderr, flush=True)
        t1 = time.perf_counter()
    t_arrow += time.perf_counter() - t1  # the final flush and close
    handle = Store.open(str(store))  # opened once the writes are done, read through below
    arrow_bytes = sum(r.manifest.bytes for r in handle.runs())
    zst_bytes = jsonl_zst.stat().st_size

    # reads
    t0 = time.perf_counter()
    rows = sum(b.num_rows for b in handle.iter_batches())
    t_read_arrow = time.perf_counter() - t0
    assert rows == n, (rows, n)
    t0 = time.perf_counter()
    objs = 0
    for b in handle.iter_batches():
        objs += sum(1 for _ in from_record_batch(b))
        if objs >= 100_000:
            break
    t_read_objs = (time.perf_counter() - t0) / objs
    t0 = time.perf_counter()
    dctx = zstandard.ZstdDecompressor()
    jrows = 0
    with open(jsonl_zst, "rb") as f, io.TextIOWrapper(dctx.stream_reader(f), encoding="utf-8") as lines:
        for line in lines:
            json.loads(line)
            jrows += 1
    t_read_jsonl = time.perf_counter() - t0
    assert jrows == n

    # query: trajforge query (DuckDB over the shard store) vs DuckDB over native Parquet
    with pq.ParquetWriter(parquet, next(handle.iter_batches()).schema, compression="zstd") as pw:
        for b in handle.iter_batches():
            pw.write_batch(b)
    parquet_bytes = parquet.stat().st_size
    ours = run_query(QUERY + " ORDER BY 1", str(store))
    con = duckdb.connect()
    theirs = con.sql(QUERY.replace("transitions", f"read_parquet('{parquet}')") + " ORDER BY 1").to_arrow_table()
    assert ours.column(1).to_pylist() == theirs.column(1).to_pylist()
    t_query = median_time(lambda: run_query(QUERY, str(store)))
    t_parquet = median_time(
        lambda: duckdb.connect().sql(QUERY.replace("transitions", f"read_parquet('{parquet}')")).to_arrow_table()
    )

    # writer memory as N grows (separate processes: generation + writer only)
    peak = []
    for size in [int(s) for s in args.rss_sizes.split(",") if s]:
        child_store = work / f"rss-{size}"
        out = subprocess.run(
            [sys.executable, __file__, "--writer-only", str(child_store), str(size)],
            capture_output=True,
            text=True,
            check=True,
        )
        peak.append((size, float(out.stdout.strip())))
        shutil.rmtree(child_store)

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    versions = f"pyarrow {pa.__version__}, duckdb {duckdb.__version__}, zstandard {zstandard.__version__}"
    rows = [
        (
            "write throughput (transitions/s)",
            f"{n / t_arrow:,.0f}",
            f"JSONL + zstd-3 (all cores): {n / t_jsonl:,.0f}",
            f"{t_jsonl / t_arrow:.2f}x faster",
        ),
        (
            "bytes per transition",
            f"{arrow_bytes / n:,.0f}",
            f"JSONL: {jsonl_bytes / n:,.0f}; JSONL.zst: {zst_bytes / n:,.0f}; Parquet zstd: {parquet_bytes / n:,.0f}",
            f"{arrow_bytes / zst_bytes:.2f}x JSONL.zst, {arrow_bytes / jsonl_bytes:.3f}x JSONL",
        ),
        (
            "read throughput, Arrow batches (transitions/s)",
            f"{n / t_read_arrow:,.0f}",
            f"JSONL.zst + json.loads: {n / t_read_jsonl:,.0f}",
            f"{t_read_jsonl / t_read_arrow:.1f}x faster",
        ),
        ("read to `Transition` objects (transitions/s)", f"{1 / t_read_objs:,.0f}", "", ""),
        (
            f"`{QUERY}` (median of 3)",
            f"{t_query:.2f} s via `trajforge query`",
            f"DuckDB on native Parquet: {t_parquet:.2f} s",
            f"{t_query / t_parquet:.2f}x its time",
        ),
    ]
    print(f"\n### Store: {n:,} transitions ({datetime.now(UTC):%Y-%m-%d}, {cpu}, {os.cpu_count()} cores, {mem:.0f} GiB)")
    print(f"Python {platform.python_version()}, {versions}. Synthetic records (`collectors/synth.py`, seed 0,")
    print(f"5% duplicate trajectories), {jsonl_bytes / n / 2 / 1000:.1f} KB of JSON per observation on average;")
    print(f"generation ({t_gen:.0f} s) is not timed.\n")
    print("| measure | trajforge store | baseline | ratio |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(
        "\nWriter memory (it streams): resident MB of the benchmark process at "
        + ", ".join(f"{d:,} rows: {m:.0f}" for d, m in rss_points)
        + "; peak RSS of a writer-only process (generation + writer): "
        + ", ".join(f"N={s:,}: {m:.0f} MB" for s, m in peak)
        + "."
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
