"""``trajforge export FORMAT --store S [--where SQL] --out DIR``: a selection of a store's
trajectories (collected, imported or simulated) in one of the field's formats.

``--where`` is a condition over the ``transitions`` view, run through the same read-only
query engine as ``trajforge query``; every trajectory with a matching row is written
whole. Rows stream in trajectory order; each trajectory is written as its own file
(``<trajectory_id>.json``, for formats of one object per trajectory) or as one line of
``<format>.jsonl``, each file first written beside its final name and then renamed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from formats import format_module
from pipelines.query import execute
from pipelines.store.reader import Store
from schemas.arrow import from_record_batch
from schemas.transition import Transition


@dataclass
class ExportSummary:
    trajectories: int = 0
    transitions: int = 0
    files: int = 0


def selection_sql(where: str | None) -> str:
    if not where or not where.strip():
        return "SELECT * FROM transitions ORDER BY trajectory_id, step"
    return (
        "SELECT * FROM transitions WHERE trajectory_id IN "
        f"(SELECT trajectory_id FROM transitions WHERE ({where})) ORDER BY trajectory_id, step"
    )


def trajectories(store: Store | str, where: str | None = None) -> Iterator[list[Transition]]:
    """The selected trajectories, whole, one at a time (rows stream in trajectory order)."""
    current: list[Transition] = []
    for batch in execute(selection_sql(where), store):
        for t in from_record_batch(batch):
            if current and t.trajectory_id != current[0].trajectory_id:
                yield current
                current = []
            current.append(t)
    if current:
        yield current


def export_store(
    fmt: str, store: str | os.PathLike[str], out: str | os.PathLike[str], *, where: str | None = None
) -> ExportSummary:
    module = format_module(fmt, export=True)
    handle = Store.open(os.fspath(store))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    summary = ExportSummary()
    one_file_each = getattr(module, "ONE_FILE_PER_TRAJECTORY", True)
    partial, final = folder / f".{module.NAME}.jsonl.partial", folder / f"{module.NAME}.jsonl"
    with contextlib.ExitStack() as stack:
        lines = None if one_file_each else stack.enter_context(open(partial, "w", encoding="utf-8"))
        for trajectory in trajectories(handle, where):
            value = module.export(trajectory)
            summary.trajectories += 1
            summary.transitions += len(trajectory)
            if lines is None:
                _write_atomic(folder / f"{trajectory[0].trajectory_id}.json", json.dumps(value, ensure_ascii=False, indent=2))
                summary.files += 1
            else:
                lines.write(json.dumps(value, ensure_ascii=False) + "\n")
    if not one_file_each:
        os.replace(partial, final)
        summary.files += 1
    return summary


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
