"""Import and export throughput: transitions per second on one core, and peak memory.

    python benchmarks/import.py [--sizes 50000 200000] [--formats atif swe-agent openhands]
    python benchmarks/import.py --sizes 200000 --repeat 3 --baseline /tmp/base   # same-run A/B
    python benchmarks/import.py --input jsonl parquet  # the same records as Parquet too (as the Hub serves them)
    python benchmarks/import.py --floor  # where a transition's time goes, in one process
    python benchmarks/import.py --startup 9  # a command's start, with and without bytecode


For each format, the fixtures in ``../shared/fixtures/agent-data`` are replicated with
fresh ids into one JSONL file of about N transitions (ATIF: Terminus's golden, 4
transitions a record; SWE-agent: the 0.x pydicom run, 12; OpenHands: the event list, 2),
then ``trajforge import`` runs on it in a fresh interpreter (one process: one core) and
its wall time, CPU time and peak RSS are read from the child's rusage. The 200,000 store
is then exported to ATIF and to ADP the same way. Goals (issue 25): at least 20,000
transitions a second per core, and peak memory flat from 50k to 200k transitions.

``--input jsonl parquet`` also writes the records to Parquet, in row groups of 1,000 records
as ``datasets`` writes them (an object no record gives a field is made null: Parquet cannot
hold a struct without fields). A Parquet file's footer, which a reader holds whole, grows
with its row groups: at 100 records a group, the 200,000 OpenHands file's is 34 MiB.

``--floor`` measures, in this process on 20,000 transitions of each format, the time a
transition takes in each phase of an import (parse, conversion, transitions, Arrow, the
shard's zstd), and the part of it spent inside the libraries alone on the same bytes
(orjson's parse, blake2b over the content hashes' bytes, RE2's scan of each observation,
Arrow's zstd IPC write): what no Python above them can save. The goal is 50 us a
transition.

Both checkouts are compiled first (``compile_checkout``), as ``make install`` leaves this one:
where PYTHONDONTWRITEBYTECODE is set, a checkout without bytecode compiles its modules at
every start. ``--startup N`` measures what that costs a command.

``--repeat N`` runs each import N times (medians reported); ``--baseline DIR`` also runs
every import with another checkout's ``trajforge.py`` (``git worktree add DIR REV``), in
turn with this one on the same file, and reports both medians and their ratio (this
machine is shared: only figures of the same run compare).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.formats.conftest import agent_data_dir  # noqa: E402  (the one place that finds the fixtures)

DATA = agent_data_dir()
SOURCES = {  # format -> (fixture, transitions per record, how to give a record a fresh id)
    "atif": ("atif/hello-world-invalid-json.trajectory.json", 4, lambda r, i: r | {"session_id": f"bench-{i}"}),
    "swe-agent": ("swe-agent/pydicom__pydicom-1458.traj", 12, lambda r, i: r | {"instance_id": f"bench-{i}"}),
    "openhands": ("openhands/basic.json", 2, lambda r, i: {"instance_id": f"bench-{i}", "history": r}),
}


def make_file(fmt: str, transitions: int, path: Path, kind: str = "jsonl") -> int:
    fixture, per, fresh = SOURCES[fmt]
    record = json.loads((DATA / fixture).read_text())
    n = -(-transitions // per)
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        record = _no_empty_objects(record)
        writer = None
        for start in range(0, n, 1000):
            table = pa.Table.from_pylist([fresh(record, i) for i in range(start, min(n, start + 1000))])
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
        writer.close()
        return n * per
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps(fresh(record, i)) + "\n")
    return n * per


def _no_empty_objects(value):
    if isinstance(value, dict):
        return {k: _no_empty_objects(v) for k, v in value.items()} or None
    if isinstance(value, list):
        return [_no_empty_objects(v) for v in value]
    return value


def project_packages(root: Path) -> list[Path]:
    """A checkout's packages (its top-level folders with an ``__init__.py``), tests aside."""
    return sorted(p for p in root.iterdir() if (p / "__init__.py").is_file() and p.name != "tests")


def compile_checkout(root: Path) -> None:
    """A checkout's modules compiled, as ``make install`` leaves them: where
    PYTHONDONTWRITEBYTECODE is set, a checkout without bytecode (a baseline's worktree)
    compiles them at every start (0.2 s a command), and the comparison would be unfair."""
    cmd = [sys.executable, "-m", "compileall", "-q", "-j0", "trajforge.py", *(p.name for p in project_packages(root))]
    subprocess.run(cmd, cwd=root, check=True, capture_output=True)


def timed(cmd: list[str], root: Path = ROOT) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds and peak RSS (KiB) of a command run by ``_CHILD`` (which
    reports its one child's rusage: a parent's children maximum would mix the runs), and
    the command's output. ``root``: the checkout whose ``trajforge.py`` runs."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, *cmd], cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    usage = json.loads(proc.stderr.strip().splitlines()[-1])
    return wall, usage["cpu"], usage["maxrss"], proc.stdout.strip()


def _import_runs(
    fmt: str, n: int, files: dict[str, Path], store: Path, repeat: int, baseline: Path | None
) -> dict[tuple[str, str], list[tuple[float, float, int]]]:
    """Each file imported ``repeat`` times by this checkout (and the baseline's, JSONL only:
    older checkouts read no Parquet), the kinds and checkouts in turn so that each sees the
    same machine: (kind, "this" / "baseline") -> [(wall, CPU, peak RSS)]."""
    runs: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for _ in range(repeat):
        for kind, src in files.items():
            for name, root in [("baseline", baseline), ("this", ROOT)]:
                if root is None or (name == "baseline" and kind != "jsonl"):
                    continue
                shutil.rmtree(store, ignore_errors=True)
                wall, cpu, rss, _out = timed(["import", fmt, str(src), "--store", str(store), "--source", "bench"], root)
                runs.setdefault((kind, name), []).append((wall, cpu, rss))
                print(f"  {name}: {fmt} {kind} {n} transitions: {wall:.1f} s wall, {cpu:.1f} s CPU, peak {rss / 1024:.0f} MiB")
    return runs


def floor(fmt: str, path: Path) -> tuple[int, dict[str, float], dict[str, float]]:
    """Per transition (us of CPU time), on the records of ``path``: each phase of an import
    done as the importer does it, and the libraries' share (see the module's doc)."""
    import hashlib

    import orjson
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from formats import fewer_collections, format_module
    from formats.episode import Origin, to_transitions
    from schemas.arrow import to_shard_batch
    from schemas.record_files import parse
    from schemas.transition import _hashed_form
    from schemas.volatile import _NATIVE

    module, origin = format_module(fmt), Origin("bench", fmt, path.name, None, "import-bench")
    lines = path.read_bytes().splitlines()
    clock, phases, libs = time.process_time, dict.fromkeys(["parse", "convert", "transitions", "arrow", "zstd"], 0.0), {}
    sink = pa.BufferOutputStream()
    writer, transitions, batch = None, [], []
    with fewer_collections():
        for line in lines:
            t0 = clock()
            value = parse(line)
            t1 = clock()
            episodes = list(module.episodes(value, path.name))
            t2 = clock()
            for k, ep in enumerate(episodes):
                batch.extend(to_transitions(ep, origin, trajectory_key=(str(k),)))
            t3 = clock()
            phases["parse"] += t1 - t0
            phases["convert"] += t2 - t1
            phases["transitions"] += t3 - t2
            if len(batch) >= 2048 or line is lines[-1]:
                t4 = clock()
                record_batch = to_shard_batch(batch)
                t5 = clock()
                writer = writer or ipc.new_stream(sink, record_batch.schema, options=ipc.IpcWriteOptions(compression="zstd"))
                writer.write_batch(record_batch)
                phases["arrow"] += t5 - t4
                phases["zstd"] += clock() - t5
                transitions += batch
                batch = []
        forms = [(_hashed_form(t.state), t.action.canonical.encode(), _hashed_form(t.next_state)) for t in transitions]
        texts = [o.text.encode() for t in transitions for o in (t.state, t.next_state)]
        t0 = clock()
        for line in lines:
            orjson.loads(line)
        t1 = clock()
        for parts in forms:
            h = hashlib.blake2b(digest_size=16)
            for part in parts:
                h.update(part)
            h.hexdigest()
        t2 = clock()
        for text in texts[::2] + texts[-1:]:  # each observation once: a state is the step before's next state
            _NATIVE[0].Match(text)
        t3 = clock()
        libs = {"orjson parse": t1 - t0, "blake2b": t2 - t1, "RE2 scan": t3 - t2, "zstd": phases["zstd"]}
    n = len(transitions)
    return n, {k: v / n * 1e6 for k, v in phases.items()}, {k: v / n * 1e6 for k, v in libs.items()}


def _floor_table(formats: list[str], tmp: Path) -> None:
    print(f"### Where an import's time goes ({time.strftime('%Y-%m-%d')}, us of CPU a transition, one process)")
    print()
    print("| format | transitions | parse | convert | transitions | Arrow | zstd | all | libraries alone | Python above them |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for fmt in formats:
        src = tmp / f"{fmt}-floor.jsonl"
        make_file(fmt, 20_000, src)
        n, phases, libs = floor(fmt, src)
        total, lib = sum(phases.values()), sum(libs.values())
        cells = " | ".join(f"{v:.1f}" for v in phases.values())
        detail = ", ".join(f"{k} {v:.1f}" for k, v in libs.items())
        print(f"| {fmt} | {n:,} | {cells} | {total:.1f} | {lib:.1f} ({detail}) | {total - lib:.1f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50_000, 200_000])
    ap.add_argument("--formats", nargs="+", default=list(SOURCES), choices=list(SOURCES))
    ap.add_argument(
        "--input", nargs="+", choices=["jsonl", "parquet"], default=["jsonl"], help="the kinds of file imported, in turn"
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs of each import (medians reported)")
    ap.add_argument("--baseline", type=Path, help="another checkout, run in turn with this one")
    ap.add_argument("--floor", action="store_true", help="only where a transition's time goes (see above)")
    ap.add_argument(
        "--startup", type=int, metavar="N", help="only the start of an import, with and without bytecode, N times each"
    )
    args = ap.parse_args(argv)
    if args.startup:
        _startup_table(args.startup)
        return
    if args.floor:
        tmp = Path(tempfile.mkdtemp(prefix="trajforge-import-floor-"))
        try:
            _floor_table(args.formats, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    if args.baseline is not None and not (args.baseline / "trajforge.py").is_file():
        raise SystemExit(f"--baseline: {args.baseline} has no trajforge.py")
    for root in (ROOT, args.baseline):
        if root is not None:
            compile_checkout(root)
    tmp = Path(tempfile.mkdtemp(prefix="trajforge-import-bench-"))
    rows, exports, ab = [], [], []
    try:
        for fmt in args.formats:
            for size in args.sizes:
                files = {kind: tmp / f"{fmt}-{size}.{kind}" for kind in args.input}
                n = max(make_file(fmt, size, src, kind) for kind, src in files.items())
                store = tmp / f"store-{fmt}-{size}"
                runs = _import_runs(fmt, n, files, store, args.repeat, args.baseline)
                for kind, src in files.items():
                    this = runs[kind, "this"]
                    wall, cpu, rss = (statistics.median(r[i] for r in this) for i in range(3))
                    rows.append((fmt, kind, n, src.stat().st_size, wall, cpu, rss))
                    if (kind, "baseline") in runs:
                        before = statistics.median(c for _, c, _ in runs[kind, "baseline"])
                        ab.append((f"{fmt} ({kind})", n, before, cpu, [c for _, c, _ in this]))
                    src.unlink()
                if size == max(args.sizes) and fmt == args.formats[0]:
                    for out_fmt in ("atif", "adp"):
                        wall, cpu, rss, out = timed(
                            ["export", out_fmt, "--store", str(store), "--out", str(tmp / f"out-{out_fmt}")]
                        )
                        exports.append((out_fmt, n, wall, cpu, rss))
                        print(f"  export {out_fmt}: {wall:.1f} s wall, {cpu:.1f} s CPU | {out}")
                shutil.rmtree(store)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"### Import throughput ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, one process)")
    print()
    head = "wall s | CPU s | transitions/s (wall, 1 core) | per CPU s | MiB/s | peak RSS MiB"
    print(f"| format | input | transitions | file MiB | {head} |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for fmt, kind, n, nbytes, wall, cpu, rss in rows:
        mib = nbytes / 2**20
        rates = f"{n / wall:,.0f} | {n / cpu:,.0f} | {mib / wall:,.0f}"
        print(f"| {fmt} | {kind} | {n:,} | {mib:,.0f} | {wall:.1f} | {cpu:.1f} | {rates} | {rss / 1024:,.0f} |")
    if ab:
        print()
        head = f"baseline: per CPU s (median of {args.repeat}) | this: per CPU s | this / baseline | this, runs"
        print(f"| format | transitions | {head} |")
        print("|---|---|---|---|---|---|")
        for fmt, n, before, after, each in ab:
            runs_text = ", ".join(f"{n / c:,.0f}" for c in each)
            print(f"| {fmt} | {n:,} | {n / before:,.0f} | {n / after:,.0f} | {before / after:.2f}x | {runs_text} |")
    if exports:
        print()
        print("| export | transitions | wall s | CPU s | transitions/s (wall) | peak RSS MiB |")
        print("|---|---|---|---|---|---|")
        for fmt, n, wall, cpu, rss in exports:
            print(f"| {fmt} | {n:,} | {wall:.1f} | {cpu:.1f} | {n / wall:,.0f} | {rss / 1024:,.0f} |")


def _startup_table(times: int) -> None:
    """``trajforge import`` of an empty file, in turn with this checkout's bytecode (as
    ``make install`` leaves it) and without it (its ``__pycache__`` folders removed), under
    PYTHONDONTWRITEBYTECODE=1 as on CI machines and in containers: medians of ``times``."""
    packages = project_packages(ROOT)
    tmp = Path(tempfile.mkdtemp(prefix="trajforge-import-startup-"))
    (tmp / "empty.jsonl").write_bytes(b"")
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    runs: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
    try:
        for i in range(times):
            for name in runs:
                if name == "with":
                    compile_checkout(ROOT)
                else:
                    for cache in [c for p in packages for c in p.rglob("__pycache__")]:
                        shutil.rmtree(cache)
                store = tmp / f"store-{name}-{i}"
                wall, cpu, *_ = timed(["import", "swe-agent", str(tmp / "empty.jsonl"), "--store", str(store), "--source", "b"])
                runs[name].append((wall, cpu))
    finally:
        compile_checkout(ROOT)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"### Start of `trajforge import` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, median of {times})")
    print()
    print("| bytecode | wall s | CPU s | CPU s, runs |")
    print("|---|---|---|---|")
    medians = {}
    for name, each in runs.items():
        wall, cpu = (statistics.median(r[i] for r in each) for i in range(2))
        medians[name] = cpu
        print(f"| {name} | {wall:.3f} | {cpu:.3f} | {', '.join(f'{c:.2f}' for _, c in each)} |")
    saved = medians["without"] - medians["with"]
    print(f"\nCPU without / with: {medians['without'] / medians['with']:.2f}x ({saved:.3f} s a command)")


# Each measured command runs in its own wrapper process, whose rusage is the command's alone.
_CHILD = """
import json, resource, subprocess, sys
proc = subprocess.run([sys.executable, "trajforge.py", *sys.argv[1:]], capture_output=True, text=True)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stdout.write(proc.stdout); sys.stderr.write(proc.stderr)
sys.stderr.write(json.dumps({"cpu": u.ru_utime + u.ru_stime, "maxrss": u.ru_maxrss}) + "\\n")
sys.exit(proc.returncode)
"""

if __name__ == "__main__":
    main()
