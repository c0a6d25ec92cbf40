"""Find run-time noise in an observation's text: timestamps, PIDs, temp paths, UUIDs,
durations. Collectors record these spans so curation and evaluation can mask them."""

from __future__ import annotations

import re

from schemas.transition import VolatileSpan

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("uuid", re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)),
    ("timestamp", re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")),
    (
        "timestamp",
        re.compile(
            r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} "
            r"\d{2}:\d{2}:\d{2}(?: [A-Z]{2,5})? \d{4}\b"
        ),
    ),
    ("timestamp", re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} +\d{2}:\d{2}\b")),
    ("hex_id", re.compile(r"\b[0-9a-f]{40}\b")),  # git commit ids: they change with commit times
    ("temp_path", re.compile(r"/tmp/(?:tmp|pytest-of-[\w-]+/|\.?[\w-]*?)[\w.-]{6,}")),
    ("duration", re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds)\b(?= |\)|$|\n|,)")),
    ("pid", re.compile(r"(?i)\b(?:pid[ =:]+|process )\d{2,7}\b")),
]


def detect_spans(text: str) -> tuple[VolatileSpan, ...]:
    """Non-overlapping spans, earliest first; the first pattern to claim a range wins."""
    taken: list[tuple[int, int, str]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span()
            if start < end and all(end <= s or start >= e for s, e, _ in taken):
                taken.append((start, end, kind))
    return tuple(VolatileSpan(s, e, k) for s, e, k in sorted(taken))
