"""What the interactive benchmarks share: percentiles, a rate with its latencies, and a
command line of integer options.

    args = options(__doc__, argv, calls=500, repeats=5)     # --calls N --repeats N
    per_s, p50_ms, p95_ms = rate(lambda q: index.search(q, 5), queries, args.repeats)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs``, nearest rank."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def rate(call: Callable[[object], object], items: Iterable[object], repeats: int) -> tuple[float, float, float]:
    """Call ``call(item)`` for every item: (calls/s, p50 ms, p95 ms), each the median over repeats."""
    items = list(items)
    rates, p50, p95 = [], [], []
    for _ in range(repeats):
        lat = []
        t0 = time.perf_counter()
        for item in items:
            t = time.perf_counter()
            call(item)
            lat.append((time.perf_counter() - t) * 1000)
        rates.append(len(items) / (time.perf_counter() - t0))
        p50.append(pct(lat, 0.5))
        p95.append(pct(lat, 0.95))
    return statistics.median(rates), statistics.median(p50), statistics.median(p95)


def options(doc: str, argv: list[str] | None, **defaults: int) -> argparse.Namespace:
    """A parser described by the first line of the benchmark's docstring, one integer
    ``--name`` option per keyword (underscores become dashes)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in defaults.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    return ap.parse_args(argv)
