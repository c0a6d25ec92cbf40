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
