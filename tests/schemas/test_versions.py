"""An older store stays readable after the schema moves on; newer files refuse older code.
(A simulated bump from the current v2 to a v3 with one more column.)"""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.query import run_query
from pipelines.store import ShardWriter, Store
from pipelines.store.check import check_path
from schemas import SchemaError, to_record_batch
from schemas.arrow import TRANSITION_SCHEMA_V2
from schemas.versions import current_version, migrate, register_version, schema_for, unregister_version

V3 = TRANSITION_SCHEMA_V2.append(pa.field("reasoning", pa.string(), True))


def v2_to_v3(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([*batch.columns, pa.nulls(batch.num_rows, pa.string())], schema=V3)


@pytest.fixture
def bumped():
    register_version(3, V3, v2_to_v3)
    yield
    unregister_version(3)


def test_v2_files_read_as_v3_after_a_bump(store, bumped):
    assert current_version() == 3
    s = Store(store)
    batches = list(s.iter_batches())
    assert batches and all(b.schema.names[-1] == "reasoning" for b in batches)
    assert sum(b.num_rows for b in batches) == 300
    assert all(b.column("reasoning").null_count == b.num_rows for b in batches)
    # v2 shards still validate against v2, and queries see them through the migration
    report = check_path(str(store))
    assert report.ok, report.problems
    got = run_query("SELECT count(*) AS n, count(reasoning) AS r FROM transitions", str(store)).to_pylist()
    assert got == [{"n": 300, "r": 0}]


def test_v2_and_v3_shards_query_together(store, bumped, transitions):
    v3_batch = v2_to_v3(to_record_batch(transitions[:10]))
    v3_batch = pa.RecordBatch.from_arrays([*v3_batch.columns[:-1], pa.array(["because"] * 10)], schema=V3)
    with ShardWriter(str(store), transitions[0].domain, "run-v3") as w:
        w.write_batch(v3_batch.replace_schema_metadata(schema_for(3).metadata))
    got = run_query("SELECT count(*) AS n, count(reasoning) AS r FROM transitions", str(store)).to_pylist()
    assert got == [{"n": 310, "r": 10}]
    assert check_path(str(store)).ok


def test_v3_file_gives_a_clear_error_to_v2_code(store, transitions, capsys):
    register_version(3, V3, v2_to_v3)
    try:
        with ShardWriter(str(store), "web", "run-v3") as w:
            w.write_batch(v2_to_v3(to_record_batch([t for t in transitions if t.domain == "web"][:5])))
    finally:
        unregister_version(3)
    report = check_path(str(store))
    assert any("v3 is newer than this trajforge" in p for p in report.problems), report.problems
    assert report.shards_ok >= 7  # the v2 shards are still fine
    assert run_query("SELECT count(*) AS n FROM transitions", str(store)).to_pylist() == [{"n": 300}]
    assert "v3 is newer" in capsys.readouterr().err
    with pytest.raises(SchemaError, match="newer"):
        migrate(to_record_batch(transitions[:1]), 4)


def test_register_refuses_gaps():
    with pytest.raises(SchemaError):
        register_version(5, V3, v2_to_v3)


def _as_v1(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch as v1 code wrote it: the provenance without v2's fields."""
    from schemas.arrow import PROVENANCE_TYPE, TRANSITION_SCHEMA_V1

    prov = batch.column("provenance")
    old = pa.StructArray.from_arrays([prov.field(f.name) for f in PROVENANCE_TYPE], fields=list(PROVENANCE_TYPE))
    columns = [old if n == "provenance" else batch.column(n) for n in batch.schema.names]
    return pa.RecordBatch.from_arrays(columns, schema=TRANSITION_SCHEMA_V1)


def test_v1_rows_migrate_to_v2_collected_and_executed_or_simulated(transitions):
    from dataclasses import replace

    from schemas import from_record_batch

    rows = [transitions[0], replace(transitions[1], provenance=replace(transitions[1].provenance, simulated=True))]
    v1 = _as_v1(to_record_batch(rows))
    assert "origin" not in v1.schema.field("provenance").type.names
    got = [t.provenance for t in from_record_batch(migrate(v1, 1))]
    assert [(p.origin, p.executed, p.simulated, p.source) for p in got] == [
        ("collected", "executed", False, None),
        ("simulated", "not_executed", True, None),
    ]


def test_a_store_written_at_v1_reads_and_queries_at_v2(tmp_path, transitions, monkeypatch):
    from pipelines.store import writer

    web = [t for t in transitions if t.domain == "web"][:6]
    monkeypatch.setattr(writer, "current_version", lambda: 1)  # the writer as v1 code was
    with ShardWriter(str(tmp_path), "web", "run-v1") as w:
        w.write_batch(_as_v1(to_record_batch(web)).replace_schema_metadata(schema_for(1).metadata))
    monkeypatch.undo()
    from dataclasses import replace

    with ShardWriter(str(tmp_path), "web", "run-v2") as w:
        w.write_many([replace(t, provenance=replace(t.provenance, run_id="run-v2")) for t in web[:2]])
    assert sorted(shard.entry.schema_version for shard in Store(str(tmp_path)).shards()) == [1, 2]
    assert check_path(str(tmp_path)).ok
    got = run_query(
        "SELECT provenance.origin AS o, provenance.executed AS e, count(*) AS n FROM transitions GROUP BY ALL",
        str(tmp_path),
    ).to_pylist()
    assert got == [{"o": "collected", "e": "executed", "n": 8}]
