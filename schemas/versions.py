"""Schema versions: every shard records the version it was written with, and readers
migrate older batches forward one version at a time.

v1 is the first record; v2 adds where a transition came from to its provenance (origin,
executed, and an imported record's source, file, record id, licence and agent). To bump
the schema again: define ``TRANSITION_SCHEMA_V3`` beside the others (never edit an old
one), write a function that turns a v2 record batch into a v3 one, and register both
here. Files written earlier are then read at the newest version everywhere (store reads,
queries); each keeps the schema it validates against.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from schemas.arrow import TRANSITION_SCHEMA_V1, TRANSITION_SCHEMA_V2, migrate_v1_to_v2, shard_schema_of
from schemas.errors import SchemaError

METADATA_KEY = b"trajforge.schema_version"
KIND_KEY = b"trajforge.kind"

Migration = Callable[[pa.RecordBatch], pa.RecordBatch]

# v2: provenance says origin (collected, imported, simulated), executed, and the source
_SCHEMAS: dict[int, pa.Schema] = {1: TRANSITION_SCHEMA_V1, 2: TRANSITION_SCHEMA_V2}
_MIGRATIONS: dict[int, Migration] = {2: migrate_v1_to_v2}  # version v -> function turning a v-1 batch into v
_BUILT_IN = max(_SCHEMAS)  # the versions this code defines (tests may simulate later ones)


def current_version() -> int:
    return max(_SCHEMAS)


def known_versions() -> list[int]:
    return sorted(_SCHEMAS)


def schema_for(version: int | None = None) -> pa.Schema:
    """The schema of ``version`` (default: current), carrying its version as metadata."""
    version = current_version() if version is None else version
    if version not in _SCHEMAS:
        if version > current_version():
            raise SchemaError(
                "schema_version",
                f"v{version} is newer than this trajforge (reads up to v{current_version()}): upgrade trajforge",
            )
        raise SchemaError("schema_version", f"unknown version {version}")
    return _SCHEMAS[version].with_metadata({METADATA_KEY: str(version).encode(), KIND_KEY: b"transitions"})


def shard_schema_for(version: int | None = None) -> pa.Schema:
    """The on-disk layout of ``version`` (see ``schemas.arrow.to_shard``)."""
    return shard_schema_of(schema_for(version))


def register_version(version: int, schema: pa.Schema, migrate_from_previous: Migration) -> None:
    """Add schema ``version`` with the function that lifts a ``version - 1`` batch to it."""
    if version != current_version() + 1:
        raise SchemaError("schema_version", f"next version must be {current_version() + 1}, got {version}")
    _SCHEMAS[version] = schema.remove_metadata()
    _MIGRATIONS[version] = migrate_from_previous


def unregister_version(version: int) -> None:
    """Drop the newest version again (for tests that simulate a bump)."""
    if version != current_version() or version <= _BUILT_IN:
        raise SchemaError("schema_version", f"can only drop the newest version a test added, not {version}")
    del _SCHEMAS[version], _MIGRATIONS[version]


def version_of(schema: pa.Schema) -> int | None:
    """The version recorded in a schema's metadata, or None for a foreign Arrow file."""
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise SchemaError("schema_version", f"metadata value {raw!r} is not an integer") from None


def schema_problem(schema: pa.Schema, version: int, *, shard: bool = False) -> str | None:
    """Why ``schema`` is not the (logical, or with ``shard`` on-disk) schema of ``version``."""
    expected = shard_schema_for(version) if shard else schema_for(version)
    if schema.equals(expected, check_metadata=False):
        return None
    got = {f.name: f for f in schema}
    for f in expected:
        if f.name not in got:
            return f"missing field {f.name!r}"
        if not got[f.name].type.equals(f.type):
            return f"field {f.name!r} is {got[f.name].type}, expected {f.type}"
        if got[f.name].nullable != f.nullable:
            return f"field {f.name!r} nullability differs"
    extra = [n for n in got if expected.get_field_index(n) < 0]
    if extra:
        return f"unexpected field {extra[0]!r}"
    return "fields out of order"


def migrate(batch: pa.RecordBatch, from_version: int, to_version: int | None = None) -> pa.RecordBatch:
    """Lift a batch written at ``from_version`` to ``to_version`` (default: current)."""
    to_version = current_version() if to_version is None else to_version
    schema_for(from_version)  # raises a clear error for versions newer than this code
    for v in range(from_version + 1, to_version + 1):
        batch = _MIGRATIONS[v](batch)
        problem = schema_problem(batch.schema, v)
        if problem:
            raise SchemaError("schema_version", f"migration to v{v} produced a bad batch: {problem}")
    return batch.replace_schema_metadata(schema_for(to_version).metadata)
