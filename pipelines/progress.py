"""Progress for long work, and quiet library output.

``progress`` draws a rich bar on a terminal and logs plain lines otherwise; ``watch`` feeds
one from a function polled in a thread (Beam passes run in worker processes: the driver
counts the files they finish) and ends with a summary line. ``quiet`` hides what
libraries print (Beam's logging, its worker processes' stderr) unless ``--verbose``:
while it is on, file descriptor 2 goes to a temporary log and only our own ``warning:``
and ``error:`` lines are passed on; the log is kept, and named, when the work fails.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Protocol, TextIO

OURS = ("warning: ", "error: ")  # lines of ours that pass through ``quiet``
_state: dict[str, object] = {"verbose": False, "stderr": None, "console": None}


class Progress(Protocol):
    def __call__(self, done: int, info: str = "") -> None: ...


def set_verbose(on: bool = True) -> None:
    """Show libraries' logs as they come (``--verbose``): ``quiet`` then does nothing."""
    _state["verbose"] = bool(on)


def verbose() -> bool:
    return bool(_state["verbose"]) or os.environ.get("TRAJFORGE_VERBOSE", "") not in ("", "0")


def stderr() -> TextIO:
    """The user's stderr, also while ``quiet`` captures file descriptor 2."""
    return _state["stderr"] or sys.stderr  # type: ignore[return-value]


def say(message: str) -> None:
    """One line for the user on stderr (above a live bar, if one is drawn)."""
    console = _state["console"]
    if console is not None:
        console.print(message, markup=False, highlight=False, soft_wrap=True)  # type: ignore[attr-defined]
    else:
        print(message, file=stderr(), flush=True)


@contextmanager
def quiet(on: bool = True) -> Iterator[None]:
    """Hide what libraries and child processes write to stderr while the block runs, except
    lines starting with ``warning: `` or ``error: ``. Nested or verbose: does nothing."""
    if not on or verbose() or _state["stderr"] is not None:
        yield
        return
    sys.stderr.flush()
    fd, log = tempfile.mkstemp(prefix="trajforge-", suffix=".log")
    os.close(fd)
    sink = os.open(log, os.O_WRONLY | os.O_APPEND)  # children inherit it: appends never overwrite each other
    saved = os.dup(2)
    user = open(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115 -- closed below
    os.dup2(sink, 2)
    os.close(sink)
    _state["stderr"] = user
    python_stderr = sys.stderr  # also swapped: it may not write to descriptor 2 (pytest, IDEs)
    sys.stderr = open(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115 -- closed below
    stop = threading.Event()
    thread = threading.Thread(target=_pass_ours, args=(log, stop), daemon=True, name="trajforge-quiet")
    thread.start()
    failed: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        failed = exc
        raise
    finally:
        with suppress(Exception):
            sys.stderr.close()
        sys.stderr = python_stderr
        os.dup2(saved, 2)
        os.close(saved)
        stop.set()
        thread.join(5)
        _state["stderr"] = None
        user.close()
        if _worth_keeping(failed, log):
            print(f"note: the libraries' log of this run is in {log} (--verbose shows it as it comes)", file=sys.stderr)
        else:
            with suppress(OSError):
                os.unlink(log)


def _worth_keeping(failed: BaseException | None, log: str) -> bool:
    """Keep the captured log of a crash (not of a clean error line such as bad input)."""
    from schemas.errors import TrajforgeError

    if failed is None or isinstance(failed, TrajforgeError | KeyboardInterrupt | SystemExit):
        return False
    return os.path.getsize(log) > 0


def _pass_ours(log: str, stop: threading.Event) -> None:
    """Follow the captured log; pass on our own lines, drop the rest."""
    with open(log, "rb") as f:
        rest = b""
        while True:
            last = stop.is_set()
            chunk = f.read()
            if chunk:
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    text = line.decode("utf-8", "replace").rstrip("\r")
                    if text.startswith(OURS):
                        say(text)
            if last:
                if rest.decode("utf-8", "replace").startswith(OURS):
                    say(rest.decode("utf-8", "replace"))
                return
            stop.wait(0.2)


@contextmanager
def progress(description: str, total: int | None, *, every_s: float = 5.0, unit: str = "") -> Iterator[Progress]:
    """Yield ``update(done, info="")``; draws a bar when stderr is a TTY, else logs every
    ``every_s``. ``info`` is a short text shown beside the count (e.g. loss and tokens/s);
    with ``unit``, the count is followed by it and the rate is shown in ``unit``/s."""
    out = stderr()
    start = last = time.monotonic()
    per = f" {unit}/s" if unit else "/s"
    if out.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        capturing = _state["stderr"] is not None  # then stray writes must reach the capture, not the screen
        with RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("{task.fields[info]}"),
            transient=True,
            console=Console(file=out) if capturing else None,
            redirect_stdout=not capturing,
            redirect_stderr=not capturing,
        ) as bar:
            task = bar.add_task(description, total=total, info="", rate="")

            def draw(done: int, info: str = "") -> None:
                shown = rate(done, time.monotonic() - start, unit) if unit else ""
                bar.update(task, completed=done, info=info, rate=shown)

            _state["console"] = bar.console
            try:
                yield draw
            finally:
                _state["console"] = None
        return

    def update(done: int, info: str = "") -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            speed = done / max(now - start, 1e-9)
            of = f"/{total}" if total else ""
            print(
                f"{description}: {done}{of}{' ' + unit if unit else ''} ({speed:,.1f}{per}){' ' + info if info else ''}",
                file=out,
                flush=True,
            )

    yield update


def rate(n: float, seconds: float, unit: str) -> str:
    """``12.5 transitions/s``."""
    return f"{n / max(seconds, 1e-9):,.1f} {unit}/s"


@contextmanager
def watch(
    description: str,
    total: int,
    done: Callable[[], int],
    *,
    unit: str = "items",
    info: Callable[[int, float], str] | None = None,
    every_s: float = 0.5,
) -> Iterator[None]:
    """Show the progress of work done elsewhere (Beam workers): ``done()`` is polled from a
    thread and counted against ``total``; the block's end prints one summary line
    ``<description>: N/TOTAL <unit> in S s (R <unit>/s)[, info]``. ``info(done, seconds)``
    adds a short text (another count or rate)."""
    start = time.monotonic()
    stop = threading.Event()

    def extra(n: int) -> str:
        return info(n, time.monotonic() - start) if info else ""

    def poll(update: Progress) -> None:
        while not stop.wait(every_s):
            with suppress(Exception):  # a half-written file: counted on the next poll
                n = done()
                update(n, extra(n))

    with progress(description, total, every_s=5.0, unit=unit) as update:
        thread = threading.Thread(target=poll, args=(update,), daemon=True, name="trajforge-progress")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)
    n = total
    with suppress(Exception):
        n = done()
    seconds = time.monotonic() - start
    more = extra(n)
    say(f"{description}: {n:,}/{total:,} {unit} in {seconds:.1f} s ({rate(n, seconds, unit)}{', ' + more if more else ''})")


def files_done(pattern: str) -> Callable[[], int]:
    """A ``done`` for ``watch``: how many files match a glob pattern (each a finished piece)."""
    import glob

    return lambda: len(glob.glob(pattern))


def parquet_done(pattern: str) -> Callable[[], int]:
    """A ``done`` for ``watch``: how many Parquet files matching ``pattern`` are closed
    (end with the footer's magic), so files still being written do not count."""
    import glob

    def done() -> int:
        n = 0
        for path in glob.glob(pattern):
            with suppress(OSError), open(path, "rb") as f:
                f.seek(-4, os.SEEK_END)
                n += f.read(4) == b"PAR1"
        return n

    return done
