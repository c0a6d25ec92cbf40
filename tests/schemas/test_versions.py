"""A v1 store stays readable after the schema moves to v2; v2 files refuse v1-only code."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.query import run_query
from pipelines.store import ShardWriter, Store
from pipelines.store.check import check_path
from schemas import SchemaError, to_record_batch
from schemas.arrow import TRANSITION_SCHEMA_V1
from schemas.versions import current_version, migrate, register_version, schema_for, unregister_version

V2 = TRANSITION_SCHEMA_V1.append(pa.field("reasoning", pa.string(), True))


def v1_to_v2(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([*batch.columns, pa.nulls(batch.num_rows, pa.string())], schema=V2)


@pytest.fixture
def bumped():
    register_version(2, V2, v1_to_v2)
    yield
    unregister_version(2)


def test_v1_files_read_as_v2_after_a_bump(store, bumped):
    assert current_version() == 2
    s = Store(store)
    batches = list(s.iter_batches())
    assert batches and all(b.schema.names[-1] == "reasoning" for b in batches)
    assert sum(b.num_rows for b in batches) == 300
    assert all(b.column("reasoning").null_count == b.num_rows for b in batches)
    # v1 shards still validate against v1, and queries see them through the migration
    report = check_path(str(store))
    assert report.ok, report.problems
    got = run_query("SELECT count(*) AS n, count(reasoning) AS r FROM transitions", str(store)).to_pylist()
    assert got == [{"n": 300, "r": 0}]


def test_v1_and_v2_shards_query_together(store, bumped, transitions):
    v2_batch = v1_to_v2(to_record_batch(transitions[:10]))
    v2_batch = pa.RecordBatch.from_arrays([*v2_batch.columns[:-1], pa.array(["because"] * 10)], schema=V2)
    with ShardWriter(str(store), transitions[0].domain, "run-v2") as w:
        w.write_batch(v2_batch.replace_schema_metadata(schema_for(2).metadata))
    got = run_query("SELECT count(*) AS n, count(reasoning) AS r FROM transitions", str(store)).to_pylist()
    assert got == [{"n": 310, "r": 10}]
    assert check_path(str(store)).ok


def test_v2_file_gives_a_clear_error_to_v1_code(store, transitions, capsys):
    register_version(2, V2, v1_to_v2)
    try:
        with ShardWriter(str(store), "web", "run-v2") as w:
            w.write_batch(v1_to_v2(to_record_batch([t for t in transitions if t.domain == "web"][:5])))
    finally:
        unregister_version(2)
    report = check_path(str(store))
    assert any("v2 is newer than this trajforge" in p for p in report.problems), report.problems
    assert report.shards_ok >= 7  # the v1 shards are still fine
    assert run_query("SELECT count(*) AS n FROM transitions", str(store)).to_pylist() == [{"n": 300}]
    assert "v2 is newer" in capsys.readouterr().err
    with pytest.raises(SchemaError, match="newer"):
        migrate(to_record_batch(transitions[:1]), 3)


def test_register_refuses_gaps():
    with pytest.raises(SchemaError):
        register_version(5, V2, v1_to_v2)
