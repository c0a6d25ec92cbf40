"""Search benchmark: index build time and size, queries per second and p95 latency.

    python benchmarks/search.py [--repeats 5] [--queries 200]

Over the builtin pydoc corpus (Python's own documentation): the corpus extraction time,
the index build time (median of ``--repeats`` builds into a temporary folder) and its
size on disk; then the queries of ``--queries`` generated tasks run one after another
through ``SearchIndex.search`` (top 5 with snippets) and through the environment's
``search`` action (with the observation), ``--repeats`` times: queries/s and p50/p95
latency, the median over repeats. Prints a markdown table.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.timing import options, rate  # noqa: E402 (needs ROOT on the path)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> None:
    args = options(__doc__, argv, repeats=5, queries=200)
    from collectors.search.corpus import pydoc_corpus
    from collectors.search.env import SearchEnv
    from collectors.search.index import SearchIndex
    from collectors.search.tasks import make_tasks

    t0 = time.perf_counter()
    docs = pydoc_corpus()
    extract_s = time.perf_counter() - t0
    queries = [t["extra"]["query"] for t in make_tasks(docs, n=args.queries, seed=0)]
    with tempfile.TemporaryDirectory() as tmp:
        builds = []
        for i in range(args.repeats):
            t0 = time.perf_counter()
            index = SearchIndex.build(docs, Path(tmp) / f"i{i}", source="pydoc")
            builds.append(time.perf_counter() - t0)
        size = _size(index.path)
        raw = rate(lambda q: index.search(q, 5), queries, args.repeats)
        with SearchEnv(options={"index_dir": str(index.path)}) as env:
            env.reset()
            stepped = rate(lambda q: env.step({"action": "search", "query": q}), queries, args.repeats)
    chars = sum(len(d.text) for d in docs)
    print(
        f"pydoc corpus: {len(docs)} documents, {chars / 1e6:.2f} M characters, {len(queries)} queries, "
        f"median of {args.repeats} repeats, index {index.version}\n"
    )
    print("| measure | value |\n|---|---|")
    print(f"| corpus extraction (import + inspect) | {extract_s:.2f} s |")
    print(f"| index build | {statistics.median(builds):.2f} s |")
    print(f"| index size on disk | {size / 1e6:.2f} MB |")
    for name, (qps, p50, p95) in (("SearchIndex.search (top 5 + snippets)", raw), ("env.step search (+ observation)", stepped)):
        print(f"| {name}: queries/s | {qps:.0f} |")
        print(f"| {name}: p50 / p95 latency | {p50:.2f} / {p95:.2f} ms |")


if __name__ == "__main__":
    main()
