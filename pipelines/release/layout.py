"""The data files of a release: one Arrow schema per stage, and what the written files hold.

Every sample file (the builder's work files and the release's
``data/<stage>/<split>-NNNNN-of-NNNNN.parquet``) has its stage's schema; the manifest
records each schema's hash, and readers (``inspect``, the card, the report) count rows and
tokens from the files themselves.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
_META = [
    ("domain", pa.string()),
    ("env_id", pa.string()),
    ("task_id", pa.string()),
    ("trajectory_id", pa.string()),
    ("curation_id", pa.string()),
    ("split", pa.string()),
]
SCHEMAS = {
    "cpt": pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            ("tokens", pa.int64()),
            ("part", pa.int32()),
            ("parts", pa.int32()),
            ("first_turn", pa.int32()),
            ("last_turn", pa.int32()),
            *_META,
        ]
    ),
    "sft": pa.schema(
        [
            ("id", pa.string()),
            ("prompt", MESSAGES),
            ("completion", MESSAGES),
            ("tokens", pa.int64()),
            ("prompt_tokens", pa.int64()),
            ("completion_tokens", pa.int64()),
            ("history_turns", pa.int32()),
            ("dropped_turns", pa.int32()),
            ("has_reasoning", pa.bool_()),
            ("step", pa.int32()),
            ("total_turns", pa.int32()),
            ("transition_id", pa.string()),
            *_META,
        ]
    ),
    "rl": pa.schema(
        [
            ("id", pa.string()),
            ("prompt", MESSAGES),
            ("ground_truth", pa.string()),
            ("format", pa.string()),
            ("volatile_spans", pa.list_(pa.struct([("start", pa.int32()), ("end", pa.int32()), ("kind", pa.string())]))),
            ("tokens", pa.int64()),
            ("history_turns", pa.int32()),
            ("dropped_turns", pa.int32()),
            ("step", pa.int32()),
            ("total_turns", pa.int32()),
            ("transition_id", pa.string()),
            *_META,
        ]
    ),
}
ROWS_PER_FILE = 100_000  # release files hold whole input shards, about this many rows


def schema_hash(schema: pa.Schema) -> str:
    return hashlib.sha256(schema.to_string(show_schema_metadata=False).encode()).hexdigest()[:16]


def data_files(root: Path) -> list[dict[str, Any]]:
    """Every data file of a release: stage, split, rows, tokens."""
    out = []
    for path in sorted(root.glob("data/*/*.parquet")):
        table = pq.read_table(path, columns=["tokens"])
        out.append(
            {
                "path": str(path.relative_to(root)),
                "stage": path.parent.name,
                "split": path.name.split("-")[0],
                "rows": table.num_rows,
                "tokens": int(pc.sum(table.column("tokens")).as_py() or 0),
            }
        )
    return out


def token_lengths(root: Path) -> dict[str, Any]:
    """Tokens per sample of each stage (numpy arrays), over the release's files: every split,
    train samples as often as the mixture takes them."""
    import numpy as np

    parts: dict[str, list] = {}
    for path in sorted(root.glob("data/*/*.parquet")):
        parts.setdefault(path.parent.name, []).append(pq.read_table(path, columns=["tokens"]).column("tokens").to_numpy())
    return {stage: np.concatenate(chunks) for stage, chunks in parts.items()}


def length_summary(tokens) -> dict[str, int]:
    """Samples, p50, p90, p99 and max tokens per sample (nearest rank, so each is a real length)."""
    import numpy as np

    if not len(tokens):
        return {"samples": 0}
    q = {f"p{p}": int(np.percentile(tokens, p, method="higher")) for p in (50, 90, 99)}
    return {"samples": len(tokens), **q, "max": int(tokens.max())}
