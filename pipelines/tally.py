"""One way to count work done in parallel and add the parts up.

Curation reports, release statistics and collection summaries are each filled by many
workers and merged by the driver. ``Tally`` is a dataclass base whose fields say how they
merge by their type: numbers add, ``Counter`` and nested ``dict`` counts add key by key,
``set`` fields unite, and a plain ``dict`` of strings keeps the first value seen per key.

    @dataclass
    class Seen(Tally):
        rows: int = 0
        by_domain: Counter = field(default_factory=Counter)

    total = Seen()
    total.merge(part.to_json())   # or total.merge(part)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Self


def _merged(mine: Any, theirs: Any) -> Any:
    if isinstance(mine, bool) or mine is None:
        return mine if theirs is None else theirs
    if isinstance(mine, int | float):
        return mine + theirs
    if isinstance(mine, set):
        return mine | {tuple(v) if isinstance(v, list) else v for v in theirs}
    if isinstance(mine, Counter):
        mine.update(theirs)
        return mine
    if isinstance(mine, dict):
        for key, value in theirs.items():
            if key not in mine:
                mine[key] = _fresh(value)
            elif isinstance(mine[key], int | float | dict | set):
                mine[key] = _merged(mine[key], value)
        return mine
    raise TypeError(f"cannot merge a {type(mine).__name__} field")


def _fresh(value: Any) -> Any:
    """A copy of ``value`` that later merges can add into without touching the original."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list | set):
        return type(value)(value)
    return value


class Tally:
    """A dataclass of counts that merges with another of its kind, or with its JSON form."""

    def merge(self, other: Self | dict[str, Any]) -> None:
        theirs = other if isinstance(other, dict) else other.to_json()
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name in theirs and f.metadata.get("merge", True):
                setattr(self, f.name, _merged(getattr(self, f.name), theirs[f.name]))

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = sorted(value) if isinstance(value, set) else value
        return out


__all__ = ["Tally"]
