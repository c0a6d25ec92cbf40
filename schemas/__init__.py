"""Record types of trajforge: the ``Transition`` dataclass, its Arrow schema and versions, and the
registry of domains (``schemas.domains``)."""

from __future__ import annotations

from schemas.arrow import TRANSITION_SCHEMA, TRANSITION_SCHEMA_V1, TRANSITION_SCHEMA_V2, from_record_batch, to_record_batch
from schemas.domains import DomainSpec, domain, register
from schemas.errors import ConfigError, QueryError, SchemaError, ShardError, StoreError, TrajforgeError
from schemas.transition import (
    DOMAINS,
    EXECUTED,
    FORMATS,
    ORIGINS,
    VOLATILE_KINDS,
    Action,
    Observation,
    Provenance,
    Transition,
    VolatileSpan,
    canonical_json,
    content_hash,
    mask_volatile,
    normalise_text,
    transition_id,
)
from schemas.validate import batch_problems, transition_problems, validate_transition
from schemas.versions import current_version, migrate, schema_for, version_of

__all__ = [
    "DOMAINS",
    "EXECUTED",
    "FORMATS",
    "ORIGINS",
    "TRANSITION_SCHEMA",
    "TRANSITION_SCHEMA_V1",
    "TRANSITION_SCHEMA_V2",
    "VOLATILE_KINDS",
    "Action",
    "ConfigError",
    "DomainSpec",
    "Observation",
    "Provenance",
    "QueryError",
    "SchemaError",
    "ShardError",
    "StoreError",
    "TrajforgeError",
    "Transition",
    "VolatileSpan",
    "batch_problems",
    "canonical_json",
    "content_hash",
    "current_version",
    "domain",
    "from_record_batch",
    "mask_volatile",
    "migrate",
    "normalise_text",
    "register",
    "schema_for",
    "to_record_batch",
    "transition_id",
    "transition_problems",
    "validate_transition",
    "version_of",
]
