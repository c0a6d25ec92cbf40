"""A local sandbox is ready only once bwrap has made ``/work`` its working folder: every
exec enters with the sandbox's cwd (``nsenter -w``), and one that came between the mounts
and bwrap's ``--chdir`` ran in ``/``. Under load that was about one first exec in twenty
(60 of 1,266 sandboxes started six at a time beside four busy processes)."""

from __future__ import annotations

import multiprocessing
import threading

from sandboxes import SandboxConfig, make_sandbox


def _busy(stop) -> None:
    while not stop.is_set():
        pass


def test_the_first_exec_of_every_sandbox_runs_in_work_even_under_load():
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_busy, args=(stop,)) for _ in range(4)]
    for h in hogs:
        h.start()
    seen: list[str] = []

    def one() -> None:
        sb = make_sandbox(SandboxConfig(backend="local", run_id="start-race")).start()
        try:
            seen.append(sb.exec("pwd", timeout=60).stdout.strip())
        finally:
            sb.close()

    try:
        for _ in range(20):  # 120 sandboxes: with the race, all in /work about 0.3% of the time
            threads = [threading.Thread(target=one) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        stop.set()
        for h in hogs:
            h.join()
    assert len(seen) == 120 and set(seen) == {"/work"}, sorted(set(seen))
