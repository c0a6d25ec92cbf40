"""The explicit Arrow schema of ``Transition`` (v1) and columnar conversion both ways.

Conversion is column-wise (one Python list per leaf, then ``pa.array``), which is what
keeps writing fast; reading back builds the frozen dataclasses from the columns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from schemas.transition import Action, Observation, Provenance, Transition, VolatileSpan

SPAN_TYPE = pa.struct(
    [pa.field("start", pa.int32(), False), pa.field("end", pa.int32(), False), pa.field("kind", pa.string(), False)]
)

OBSERVATION_TYPE = pa.struct(
    [
        pa.field("text", pa.string(), False),
        pa.field("format", pa.string(), False),
        pa.field("screenshot_png", pa.binary(), True),
        pa.field("extra", pa.string(), False),
        pa.field("truncated", pa.bool_(), False),
        pa.field("volatile_spans", pa.list_(pa.field("item", SPAN_TYPE, False)), False),
    ]
)

ACTION_TYPE = pa.struct(
    [
        pa.field("kind", pa.string(), False),
        pa.field("canonical", pa.string(), False),
        pa.field("raw", pa.string(), False),
    ]
)

PROVENANCE_TYPE = pa.struct(
    [
        pa.field("run_id", pa.string(), False),
        pa.field("collector", pa.string(), False),
        pa.field("collector_version", pa.string(), False),
        pa.field("sandbox_backend", pa.string(), False),
        pa.field("image_digest", pa.string(), True),
        pa.field("seed", pa.int64(), True),
        pa.field("policy", pa.string(), False),
        pa.field("model", pa.string(), True),
        pa.field("job_id", pa.string(), False),
        pa.field("collected_at", pa.timestamp("us", tz="UTC"), False),
        pa.field("simulated", pa.bool_(), False),
        pa.field("extra", pa.string(), False),
    ]
)

TRANSITION_SCHEMA_V1 = pa.schema(
    [
        pa.field("transition_id", pa.string(), False),
        pa.field("trajectory_id", pa.string(), False),
        pa.field("step", pa.int32(), False),
        pa.field("domain", pa.string(), False),
        pa.field("env_id", pa.string(), False),
        pa.field("task_id", pa.string(), False),
        pa.field("instruction", pa.string(), True),
        pa.field("state", OBSERVATION_TYPE, False),
        pa.field("action", ACTION_TYPE, False),
        pa.field("next_state", OBSERVATION_TYPE, False),
        pa.field("reward", pa.float64(), True),
        pa.field("terminated", pa.bool_(), False),
        pa.field("truncated", pa.bool_(), False),
        pa.field("action_error", pa.string(), True),
        pa.field("action_ms", pa.float64(), False),
        pa.field("observe_ms", pa.float64(), False),
        pa.field("settle_ms", pa.float64(), False),
        pa.field("provenance", PROVENANCE_TYPE, False),
        pa.field("content_hash", pa.string(), False),
    ]
)

_SCALARS = [f.name for f in TRANSITION_SCHEMA_V1 if not pa.types.is_struct(f.type)]
_OBS_SCALARS = ["text", "format", "screenshot_png", "extra", "truncated"]
_PROV_FIELDS = [f.name for f in PROVENANCE_TYPE]


def _struct(values: dict[str, list[Any]], type_: pa.StructType) -> pa.StructArray:
    arrays = [pa.array(values[f.name], type=f.type) for f in type_]
    return pa.StructArray.from_arrays(arrays, fields=list(type_))


def _observations(observations: Sequence[Observation]) -> pa.StructArray:
    cols: dict[str, list[Any]] = {name: [getattr(o, name) for o in observations] for name in _OBS_SCALARS}
    offsets, starts, ends, kinds = [0], [], [], []
    for o in observations:
        for s in o.volatile_spans:
            starts.append(s.start)
            ends.append(s.end)
            kinds.append(s.kind)
        offsets.append(len(starts))
    spans = pa.StructArray.from_arrays(
        [pa.array(starts, pa.int32()), pa.array(ends, pa.int32()), pa.array(kinds, pa.string())],
        fields=list(SPAN_TYPE),
    )
    list_type = OBSERVATION_TYPE.field("volatile_spans").type
    arrays = [pa.array(cols[n], type=OBSERVATION_TYPE.field(n).type) for n in _OBS_SCALARS]
    arrays.append(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), spans, type=list_type))
    return pa.StructArray.from_arrays(arrays, fields=list(OBSERVATION_TYPE))


def to_record_batch(transitions: Sequence[Transition]) -> pa.RecordBatch:
    """Transitions to one record batch of ``TRANSITION_SCHEMA_V1`` (without metadata)."""
    columns: dict[str, pa.Array] = {}
    for name in _SCALARS:
        columns[name] = pa.array([getattr(t, name) for t in transitions], type=TRANSITION_SCHEMA_V1.field(name).type)
    columns["state"] = _observations([t.state for t in transitions])
    columns["next_state"] = _observations([t.next_state for t in transitions])
    actions = [t.action for t in transitions]
    columns["action"] = _struct(
        {n: [getattr(a, n) for a in actions] for n in ("kind", "canonical", "raw")}, ACTION_TYPE
    )
    provs = [t.provenance for t in transitions]
    columns["provenance"] = _struct({n: [getattr(p, n) for p in provs] for n in _PROV_FIELDS}, PROVENANCE_TYPE)
    return pa.RecordBatch.from_arrays([columns[f.name] for f in TRANSITION_SCHEMA_V1], schema=TRANSITION_SCHEMA_V1)


def _observation(d: dict[str, Any]) -> Observation:
    spans = tuple(VolatileSpan(s["start"], s["end"], s["kind"]) for s in d["volatile_spans"])
    return Observation(d["text"], d["format"], d["screenshot_png"], d["extra"], d["truncated"], spans)


def from_record_batch(batch: pa.RecordBatch | pa.Table) -> Iterator[Transition]:
    """Record batch (current schema) back to frozen transitions."""
    for row in batch.to_pylist():
        yield Transition(
            transition_id=row["transition_id"],
            trajectory_id=row["trajectory_id"],
            step=row["step"],
            domain=row["domain"],
            env_id=row["env_id"],
            task_id=row["task_id"],
            instruction=row["instruction"],
            state=_observation(row["state"]),
            action=Action(**row["action"]),
            next_state=_observation(row["next_state"]),
            reward=row["reward"],
            terminated=row["terminated"],
            truncated=row["truncated"],
            action_error=row["action_error"],
            action_ms=row["action_ms"],
            observe_ms=row["observe_ms"],
            settle_ms=row["settle_ms"],
            provenance=Provenance(**row["provenance"]),
            content_hash=row["content_hash"],
        )


# -- shard layout ------------------------------------------------------------------------------
# On disk, the two observations of a transition keep their small fields in the ``state`` /
# ``next_state`` structs, but their texts and screenshots move into two-element list columns
# ``observation_texts`` / ``observation_pngs`` = [state, next_state]. A trajectory's state at
# step k is its next_state at step k-1, so the bytes zstd sees are adjacent copies and are
# stored about once (about 40% fewer bytes than one column per side), while each row stays
# self-contained. ``to_shard`` / ``from_shard`` convert any logical schema version that has
# the two observation structs; readers only ever see the logical layout.

_SIDES = ("state", "next_state")
_MOVED = {"text": "observation_texts", "screenshot_png": "observation_pngs"}


def shard_schema_of(logical: pa.Schema) -> pa.Schema:
    """The on-disk schema of a logical transition schema."""
    fields = []
    for f in logical:
        if f.name in _SIDES:
            kept = [c for c in f.type if c.name not in _MOVED]
            fields.append(pa.field(f.name, pa.struct(kept), f.nullable))
        else:
            fields.append(f)
    obs = logical.field("state").type
    for child, column in _MOVED.items():
        item = obs.field(child)
        fields.append(pa.field(column, pa.list_(pa.field("item", item.type, item.nullable)), False))
    return pa.schema(fields, metadata=logical.metadata)


def _pairs(first: pa.Array, second: pa.Array, type_: pa.DataType) -> pa.ListArray:
    n = len(first)
    interleaved = pa.concat_arrays([first, second]).take(
        pa.array([i + half * n for i in range(n) for half in (0, 1)], pa.int64())
    )
    return pa.ListArray.from_arrays(pa.array(range(0, 2 * n + 1, 2), pa.int32()), interleaved, type=type_)


def to_shard(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A logical record batch in the on-disk layout."""
    target = shard_schema_of(batch.schema)
    sides = {s: batch.column(s) for s in _SIDES}
    columns = []
    for f in target:
        if f.name in _SIDES:
            col = sides[f.name]  # never null: both observations always exist
            columns.append(pa.StructArray.from_arrays([col.field(c.name) for c in f.type], fields=list(f.type)))
        elif f.name in _MOVED.values():
            child = next(k for k, v in _MOVED.items() if v == f.name)
            columns.append(_pairs(sides["state"].field(child), sides["next_state"].field(child), f.type))
        else:
            columns.append(batch.column(f.name))
    return pa.RecordBatch.from_arrays(columns, schema=target)


def from_shard(batch: pa.RecordBatch, logical: pa.Schema) -> pa.RecordBatch:
    """An on-disk record batch back in the logical layout ``logical``."""
    import pyarrow.compute as pc

    columns = []
    for f in logical:
        if f.name in _SIDES:
            index = _SIDES.index(f.name)
            stored = batch.column(f.name)
            children = [
                pc.list_element(batch.column(_MOVED[c.name]), index) if c.name in _MOVED else stored.field(c.name)
                for c in f.type
            ]
            columns.append(pa.StructArray.from_arrays(children, fields=list(f.type)))
        else:
            columns.append(batch.column(f.name))
    return pa.RecordBatch.from_arrays(columns, schema=logical)


def shard_view_sql(logical: pa.Schema, source: str) -> str:
    """DuckDB SELECT that presents an on-disk relation ``source`` in the logical layout."""
    select = []
    for f in logical:
        if f.name in _SIDES:
            index = _SIDES.index(f.name) + 1
            members = [
                f'"{c.name}" := "{_MOVED[c.name]}"[{index}]'
                if c.name in _MOVED
                else f'"{c.name}" := "{f.name}"."{c.name}"'
                for c in f.type
            ]
            select.append(f'struct_pack({", ".join(members)}) AS "{f.name}"')
        else:
            select.append(f'"{f.name}"')
    return f"SELECT {', '.join(select)} FROM {source}"
