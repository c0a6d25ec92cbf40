"""Task suites in the field's layouts, turned into trajforge tasks that jobs run as usual:
``harbor`` (Harbor / Terminal-Bench task folders) and ``swebench`` (SWE-bench-style rows).
Each importer returns task bodies (``collectors.env.task_from_dict`` checks them) that keep
their source ids (``extra.source``, ``extra.source_id``), so decontamination can exclude an
evaluation suite by id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collectors.env import task_from_dict
from schemas.record_files import dumps, out_folder, written


def write_suite(bodies: list[dict[str, Any]], out: str | Path) -> Path:
    """Check every task and write the suite as JSONL (one task a line), atomically."""
    for i, body in enumerate(bodies):
        task_from_dict(body, f"task {i} ({body.get('id')})")
    out = Path(out)
    out_folder(out.parent)
    with written(out) as f:
        f.writelines(dumps(b) + "\n" for b in bodies)
    return out
