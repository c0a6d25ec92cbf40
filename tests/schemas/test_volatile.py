"""Volatile-span detection: the cheap pre-checks that skip a pattern never change what is found."""

from __future__ import annotations

import random

from schemas import volatile

PIECES = [
    "started 2026-03-04T05:06:07.123Z",
    "2026-03-04 05:06",
    "Tue Mar  4 05:06:07 UTC 2026",
    "Mar  4 05:06",
    "commit 0123456789abcdef0123456789abcdef01234567 done",
    "d41d8cd9-8f00-b204-e980-0998ecf8427e",
    "D41D8CD9-8F00-B204-E980-0998ECF8427E",
    "/tmp/tmpa1b2c3d4/x",
    "/tmp/pytest-of-root/pytest-3/t0",
    "took 12.5 s,",
    "took 3ms ",
    "took 4\x1cs)",
    "pid=4242 ",
    "PID: 99 ",
    "process 1234 exited",
    "pİd 777 ",
    "12\u00a0s ",
    "٣٤ s ",
    "deadbeef" * 5,
    "a-b-c",
    "10:",
    "no noise here",
    "x" * 3,
    "é",
    "\n",
    "in 5 seconds\n",
    "7 sec,",
    "ran 9s",
    "12 ms)",
    "3 minutes ",
    "x9s ",
    "5 S ",
    "10\ts ",
    "PID:: 77 ",
    "Process 555 ",
    "process\t99 ",
]


def reference(text: str):
    """detect_spans without the pre-checks."""
    taken = []
    for kind, pattern in volatile._PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span()
            if start < end and all(end <= s or start >= e for s, e, _ in taken):
                taken.append((start, end, kind))
    return tuple(volatile.VolatileSpan(s, e, k) for s, e, k in sorted(taken))


def test_pre_checks_find_what_every_pattern_finds():
    rng = random.Random(7)
    found = set()
    for _ in range(3000):
        text = " ".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))
        spans = volatile.detect_spans(text)
        assert spans == reference(text), text
        found.update(s.kind for s in spans)
    assert found == {kind for kind, _ in volatile._PATTERNS}  # every pattern was exercised
