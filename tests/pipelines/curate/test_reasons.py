"""Curation drops: ``reason`` from a fixed vocabulary, ``detail`` with the ids; old attribute files still read."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pyarrow.parquet as pq
import pytest

from pipelines.curate.config import CurationConfig, Decontaminate
from pipelines.curate.logic import StepSummary, trajectory_problem
from pipelines.curate.reasons import REASONS, validation_reason
from pipelines.curate.run import curate
from pipelines.query import run_query
from pipelines.release.inputs import excluded_ids
from pipelines.store import StoreWriter
from schemas.validate import transition_problems
from tests.conftest import make_transitions
from tests.pipelines.curate.test_pipeline import IN_MEMORY, synth_store


def test_the_vocabulary_is_short_snake_case_names_each_described():
    assert all(name.isidentifier() and name == name.lower() and len(name) <= 24 for name in REASONS)
    assert all(len(text) > 10 for text in REASONS.values())


def test_every_validation_problem_has_a_reason_named_by_its_field():
    t = make_transitions(1)[0]
    broken = [
        replace(t, transition_id="nope"),
        replace(t, env_id=""),
        replace(t, reward=float("nan")),
        replace(t, action_ms=-1.0),
        replace(t, content_hash="0" * 64),
        replace(t, state=replace(t.state, extra="[1]")),
    ]
    names = [validation_reason(p) for b in broken for p in transition_problems(b)]
    assert set(names) >= {"bad_transition_id", "missing_id", "bad_reward", "bad_timing", "content_hash_mismatch", "bad_extra"}
    assert set(names) <= set(REASONS)
    assert validation_reason("next_state.volatile_spans[3]: end 9 beyond text length 2") == "bad_volatile_span"
    assert validation_reason("something new: odd") == "invalid_record"


@pytest.mark.parametrize(
    "steps",
    [
        [],
        [StepSummary("a", "x", True, False)],
        [StepSummary("a", str(i), False, False) for i in range(9)],
        [StepSummary(str(i), "x", False, False) for i in range(9)],
        [StepSummary(str(i), str(i), False, True) for i in range(3)],
    ],
)
def test_every_quality_rule_names_a_reason_of_the_vocabulary(steps):
    reason, detail = trajectory_problem(steps, CurationConfig().quality)
    assert reason in REASONS and detail


def test_a_store_with_duplicates_has_few_distinct_reasons_and_details_carry_the_ids(tmp_path):
    store = tmp_path / "s"
    synth_store(store, n=400, duplicates=0.3)
    t = make_transitions(3, seed=9)
    with StoreWriter(str(store), "bad-run") as w:
        w.write_many([replace(t[0], content_hash="0" * 64, provenance=replace(t[0].provenance, run_id="bad-run"))])
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"id": t[0].task_id}) + "\n")
    cfg = CurationConfig(decontaminate=Decontaminate(eval_sets=[str(evals)], ngram=13))
    report = curate(cfg, str(store), beam_args=IN_MEMORY, log=lambda m: None)
    (cid,) = [p.name for p in (store / "rejected").iterdir() if p.is_dir()]
    attrs = pq.read_table(store / "rejected" / cid / "attributes.parquet").to_pylist()
    reasons = {r["reason"] for r in attrs}
    assert reasons <= set(REASONS) and {"exact_duplicate", "content_hash_mismatch"} <= reasons
    assert len(reasons) <= 6 < len({r["detail"] for r in attrs})  # ids live in detail, not in reason
    assert all(r["detail"].startswith("exact duplicate of ") for r in attrs if r["reason"] == "exact_duplicate")
    assert set(report.by_reason) == reasons and sum(report.by_reason.values()) == report.rejected
    kept = pq.read_table(store / "curated" / cid / "attributes.parquet")
    assert set(kept.column("reason").to_pylist()) == {None} and set(kept.column("detail").to_pylist()) == {None}
    rows = run_query("SELECT reason, count(*) AS n FROM rejected GROUP BY reason ORDER BY reason", str(store)).to_pylist()
    assert {r["reason"] for r in rows} == reasons


def test_attribute_files_from_before_detail_still_read(tmp_path):
    """A curation written before ``detail`` existed: the views take its columns by name
    (``UNION ALL BY NAME`` gives its rows a NULL detail beside newer curations) and the
    release builder reads only transition_id, status and exclude_as_target."""
    store = tmp_path / "s"
    synth_store(store, n=200, duplicates=0.3)
    old = curate(CurationConfig(), str(store), beam_args=IN_MEMORY, log=lambda m: None).curation_id
    before = excluded_ids(str(store), old)
    for tree in ("curated", "rejected"):
        path = store / tree / old / "attributes.parquet"
        pq.write_table(pq.read_table(path).drop_columns(["detail"]), path)
    assert excluded_ids(str(store), old) == before
    shutil.copytree(store / "raw", tmp_path / "raw2")
    n = run_query("SELECT count(*) AS n FROM rejected WHERE reason = 'exact_duplicate'", str(store)).to_pylist()[0]["n"]
    assert n > 0
    with StoreWriter(str(store), "later") as w:  # a newer curation beside the old one
        w.write_many(
            [
                t.evolve(trajectory_id=f"again-{t.trajectory_id}", provenance=replace(t.provenance, run_id="later"))
                for t in make_transitions(40, seed=5)
            ]
        )
    new = curate(CurationConfig(), str(store), beam_args=IN_MEMORY, log=lambda m: None).curation_id
    rows = run_query(
        "SELECT curation_id, count(detail) AS with_detail, count(*) AS n FROM rejected GROUP BY curation_id", str(store)
    ).to_pylist()
    by_cid = {r["curation_id"]: r for r in rows}
    assert by_cid[old]["with_detail"] == 0 < by_cid[old]["n"]
    assert new not in by_cid or by_cid[new]["with_detail"] == by_cid[new]["n"]
