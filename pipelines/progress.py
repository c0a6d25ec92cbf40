"""Progress for long work: a rich bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Progress(Protocol):
    def __call__(self, done: int, info: str = "") -> None: ...


@contextmanager
def progress(description: str, total: int | None, *, every_s: float = 5.0) -> Iterator[Progress]:
    """Yield ``update(done, info="")``; draws a bar when stderr is a TTY, else logs every
    ``every_s``. ``info`` is a short text shown beside the count (e.g. loss and tokens/s)."""
    if sys.stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        with RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=total, info="")
            yield lambda done, info="": bar.update(task, completed=done, info=info)
        return
    start = last = time.monotonic()

    def update(done: int, info: str = "") -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            rate = done / max(now - start, 1e-9)
            of = f"/{total}" if total else ""
            print(f"{description}: {done}{of} ({rate:,.1f}/s){' ' + info if info else ''}", file=sys.stderr, flush=True)

    yield update
