"""Upload benchmark: the store writer into a local S3 server (moto) against local disk.

    python benchmarks/s3.py [--transitions 20000] [--rounds 5] [--workdir benchmarks/.work]

The same synthetic transitions (made once, beforehand) are written by ``StoreWriter`` as
one run into a fresh local folder and into a fresh bucket of a moto server on 127.0.0.1
(its own process; the writer stages each shard locally, uploads it as one object and
commits the manifest). Reported: transitions/s and MiB/s of shard bytes, median of
``--rounds``, and the S3/local ratio; beside it the bare upload of one finished shard
(``pyarrow.fs.copy_files``), which bounds what the writer can reach. Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow.fs as pafs

from collectors.synth import Synthesizer
from pipelines.store import Store, StoreFS, StoreWriter, WriterOptions
from tests.s3server import ENV, moto_server, new_bucket

MIB = 1 << 20


def write_run(store: str, transitions, run_id: str, options: WriterOptions) -> tuple[float, int]:
    """Seconds to write (and commit) the run; the bytes of its shards."""
    t0 = time.perf_counter()
    with StoreWriter(store, run_id, options) as w:
        w.write_many(transitions)
    seconds = time.perf_counter() - t0
    return seconds, sum(s.entry.bytes for s in Store(store).shards())


def bare_upload(shard: str, endpoint: str, rounds: int) -> float:
    """Median MiB/s of uploading one finished shard file as one object."""
    bucket = new_bucket(endpoint)
    fs = StoreFS.open(f"s3://{bucket}").fs
    size = os.path.getsize(shard)
    times = []
    for i in range(rounds):
        t0 = time.perf_counter()
        pafs.copy_files(shard, f"{bucket}/bare/{i}.arrow", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
        times.append(time.perf_counter() - t0)
    return size / MIB / statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transitions", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", default="benchmarks/.work/s3")
    args = ap.parse_args(argv)
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.environ.update(ENV)
    os.environ["TRAJFORGE_STATE_DIR"] = str(work / "state")
    print(f"making {args.transitions:,} synthetic transitions ...", file=sys.stderr)
    gen = Synthesizer(0)
    transitions = list(gen.transitions(args.transitions))
    options = WriterOptions(rows_per_shard=2_000)  # several shards per domain: several uploads and manifest commits
    results: dict[str, list[tuple[float, int]]] = {"local": [], "s3": []}
    with moto_server(work / "moto.log") as endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        for r in range(args.rounds):  # alternate, so drift in machine load falls on both sides
            local = str(work / f"local-{r}")
            results["local"].append(write_run(local, transitions, gen.run_id, options))
            results["s3"].append(write_run(f"s3://{new_bucket(endpoint)}/store", transitions, gen.run_id, options))
            print(f"round {r + 1}: local {results['local'][-1][0]:.2f} s, s3 {results['s3'][-1][0]:.2f} s", file=sys.stderr)
        biggest = max((s.path for s in Store(str(work / "local-0")).shards()), key=os.path.getsize)
        bare_s3 = bare_upload(biggest, endpoint, args.rounds)
    t0 = time.perf_counter()
    for i in range(args.rounds):
        shutil.copyfile(biggest, work / f"bare-{i}.arrow")
    bare_local = os.path.getsize(biggest) / MIB / ((time.perf_counter() - t0) / args.rounds)

    def rates(side: str) -> tuple[float, float, float]:
        seconds = statistics.median(s for s, _ in results[side])
        size = results[side][0][1]
        return seconds, args.transitions / seconds, size / MIB / seconds

    (ls, lt, lm), (ss, st, sm) = rates("local"), rates("s3")
    print(f"\n### Upload to a local S3 server ({datetime.now(UTC):%Y-%m-%d}, `make bench-s3`)\n")
    print(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; moto {_version('moto')}, "
        f"pyarrow {_version('pyarrow')}. {args.transitions:,} synthetic transitions "
        f"({results['local'][0][1] / MIB:.1f} MiB of zstd shards, 2,000 rows a shard), median of {args.rounds}.\n"
    )
    print("| what | local disk | S3 (moto, 127.0.0.1) | S3 / local |")
    print("|---|---:|---:|---:|")
    print(f"| `StoreWriter` seconds | {ls:.2f} | {ss:.2f} | {ls / ss:.2f}x speed |")
    print(f"| transitions/s | {lt:,.0f} | {st:,.0f} | {st / lt:.2f}x |")
    print(f"| MiB/s of shards | {lm:.1f} | {sm:.1f} | {sm / lm:.2f}x |")
    print(f"| bare copy of one shard, MiB/s | {bare_local:.0f} | {bare_s3:.1f} | {bare_s3 / bare_local:.3f}x |")
    shutil.rmtree(work, ignore_errors=True)


def _version(pkg: str) -> str:
    from importlib import metadata

    return metadata.version(pkg)


if __name__ == "__main__":
    main()
