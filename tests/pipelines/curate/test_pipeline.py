"""The curation pipeline: Beam wiring with TestPipeline, and end to end on real stores."""

from __future__ import annotations

import filecmp
import itertools
import json
import random
import string
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that

from collectors.synth import Synthesizer
from pipelines.curate.config import CurationConfig, Decontaminate
from pipelines.curate.run import curate
from pipelines.query import run_query
from pipelines.store import Store, StoreWriter
from schemas import Action, Observation, Provenance, Transition
from tests.conftest import SMALL, cli

IN_MEMORY = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def synth_store(path: Path, n: int = 400, seed: int = 3, duplicates: float = 0.3):
    gen = Synthesizer(seed, duplicates=duplicates, **SMALL)
    with StoreWriter(str(path), gen.run_id) as w:
        w.write_many(gen.transitions(n))
    return gen.summary


def test_beam_wiring_decides_every_transition_once_and_finds_the_planted_duplicates(tmp_path):
    from pipelines.curate.beam import build

    summary = synth_store(tmp_path / "s")
    paths = [s.path for s in Store(tmp_path / "s").shards()]
    cfg = CurationConfig()

    def check(decisions):
        ids = [d.transition_id for d in decisions]
        assert len(ids) == len(set(ids)) == summary.transitions
        rejected = {d.trajectory: d.stage for d in decisions if d.status == "rejected"}
        stages = sorted(rejected.values())
        assert stages.count("exact_dedup") == summary.exact_duplicate_trajectories
        assert stages.count("near_dedup") == summary.near_duplicate_trajectories

    from pipelines.beam_options import beam_options

    # (TestPipeline reads its argv's --test-pipeline-options only: the options go in whole)
    with BeamTestPipeline(options=beam_options(IN_MEMORY)) as p:
        decisions, _kept = build(p, paths, str(tmp_path / "s"), cfg)
        assert_that(decisions | beam.combiners.ToList(), lambda lists: check(lists[0]))


def test_curation_end_to_end_views_report_and_noop_rerun(tmp_path):
    summary = synth_store(tmp_path / "s")
    report = curate(CurationConfig(), str(tmp_path / "s"), beam_args=IN_MEMORY, log=lambda m: None)
    assert report.transitions_in == summary.transitions == report.kept + report.rejected
    assert report.by_stage["exact_dedup"] > 0 and report.by_stage["near_dedup"] > 0
    assert sum(report.cluster_sizes.values()) >= 1
    got = run_query("SELECT count(DISTINCT trajectory_id) AS n FROM rejected WHERE stage LIKE '%dedup'", str(tmp_path / "s"))
    planted = summary.exact_duplicate_trajectories + summary.near_duplicate_trajectories
    assert got.to_pylist() == [{"n": planted}]
    kept = run_query("SELECT count(*) AS n, count(DISTINCT curation_id) AS c FROM curated", str(tmp_path / "s"))
    assert kept.to_pylist() == [{"n": report.kept, "c": 1}]
    again = curate(CurationConfig(), str(tmp_path / "s"), beam_args=IN_MEMORY, log=lambda m: None)
    assert again.noop


def test_same_input_and_config_give_byte_identical_output(tmp_path):
    for name in ("a", "b"):
        synth_store(tmp_path / name)
        curate(CurationConfig(), str(tmp_path / name), beam_args=IN_MEMORY, log=lambda m: None)
    (cid,) = [p.name for p in (tmp_path / "a" / "curated").iterdir() if not p.name.startswith("_")]
    for tree in ("curated", "rejected"):
        left, right = tmp_path / "a" / tree / cid, tmp_path / "b" / tree / cid
        files = sorted(
            str(p.relative_to(left)) for p in left.rglob("*") if p.is_file() and p.name not in ("report.json", ".lock")
        )
        assert files and files == sorted(
            str(p.relative_to(right)) for p in right.rglob("*") if p.is_file() and p.name not in ("report.json", ".lock")
        )
        _match, mismatch, errors = filecmp.cmpfiles(left, right, files, shallow=False)
        assert not mismatch and not errors


def test_a_later_curation_dedupes_against_earlier_ones(tmp_path):
    store = tmp_path / "s"
    gen = Synthesizer(5, duplicates=0.0, **SMALL)
    first = list(gen.transitions(150))
    with StoreWriter(str(store), "day1") as w:
        w.write_many([replace(t, provenance=replace(t.provenance, run_id="day1")) for t in first])
    r1 = curate(CurationConfig(), str(store), beam_args=IN_MEMORY, log=lambda m: None)
    assert r1.rejected == 0
    # day 2: fresh trajectories plus copies of day-1 trajectories under new ids
    fresh = list(Synthesizer(6, duplicates=0.0, **SMALL).transitions(60))
    copied_traj = first[0].trajectory_id
    copies = [
        t.evolve(trajectory_id="day2-copy", provenance=replace(t.provenance, run_id="day2"))
        for t in first
        if t.trajectory_id == copied_traj
    ]
    with StoreWriter(str(store), "day2") as w:
        w.write_many([replace(t, provenance=replace(t.provenance, run_id="day2")) for t in fresh] + copies)
    r2 = curate(CurationConfig(), str(store), beam_args=IN_MEMORY, log=lambda m: None)
    assert r2.curation_id != r1.curation_id and r2.transitions_in == len(fresh) + len(copies)
    rows = run_query(f"SELECT DISTINCT stage, reason, detail FROM rejected WHERE curation_id = '{r2.curation_id}'", str(store))
    expected = {"stage": "exact_dedup", "reason": "exact_duplicate", "detail": f"exact duplicate of {copied_traj}"}
    assert rows.to_pylist() == [expected]


def test_bad_records_are_quarantined_secrets_scrubbed_and_eval_tasks_removed(tmp_path):
    store = tmp_path / "s"
    ts = list(Synthesizer(7, duplicates=0.0, **SMALL).transitions(120))
    secret = "sk-proj-" + "a1b2c3d4" * 4
    leaky = ts[0].evolve(next_state=replace(ts[0].next_state, text=f"export KEY={secret}\n", volatile_spans=()))
    broken = replace(ts[5], content_hash="0" * 32)  # fails validation
    evals = tmp_path / "eval.jsonl"
    target = next(t for t in ts if t.step == 0 and t.trajectory_id != ts[0].trajectory_id)
    evals.write_text(json.dumps({"task_id": "bench/1", "instruction": target.instruction * 3}) + "\n")
    with StoreWriter(str(store), "synth-s7") as w:
        w.write_many([leaky, *ts[1:5], broken, *ts[6:]])
    cfg = CurationConfig(quality={"enabled": False}, decontaminate=Decontaminate(eval_sets=[str(evals)], ngram=5))
    report = curate(cfg, str(store), beam_args=IN_MEMORY, log=lambda m: None)
    assert report.scrubbed == {"openai_key": 1}
    q = run_query(f"SELECT stage, reason, detail FROM rejected WHERE transition_id = '{broken.transition_id}'", str(store))
    assert q.to_pylist() == [
        {
            "stage": "validate",
            "reason": "content_hash_mismatch",
            "detail": "content_hash: does not match state, action and next_state",
        }
    ]
    text = run_query(f"SELECT next_state.text AS t FROM curated WHERE transition_id = '{leaky.transition_id}'", str(store))
    assert secret not in text.to_pylist()[0]["t"] and "<openai_key>" in text.to_pylist()[0]["t"]
    dec = run_query("SELECT DISTINCT trajectory_id, reason, detail FROM rejected WHERE stage = 'decontaminate'", str(store))
    assert {r["trajectory_id"] for r in dec.to_pylist()} >= {target.trajectory_id}
    assert all((r["reason"], r["detail"]) == ("contaminated_text", "5-gram overlap with eval.jsonl") for r in dec.to_pylist())


def test_cli_runs_on_the_embedded_multiprocess_runner_and_refuses_bad_configs(tmp_path):
    synth_store(tmp_path / "s", n=120)
    out = cli("curate", "examples/curation/default.yaml", "--store", str(tmp_path / "s"), "--json").stdout
    report = json.loads(out)
    assert report["transitions_in"] == 120 and report["kept"] + report["rejected"] == 120
    bad = tmp_path / "bad.yaml"
    bad.write_text("near_dedup: {num_perm: 100, bands: 30, rows: 4}\n")
    proc = cli("curate", str(bad), "--store", str(tmp_path / "s"), check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        f"error: {bad}: near_dedup: bands x rows must equal num_perm: 30 x 4 != 100"
    )


@pytest.mark.parametrize("runner_flag", ["--runner=DataflowRunner"])
def test_beam_options_pass_through(runner_flag):
    from pipelines.beam_options import beam_options

    opts = beam_options([runner_flag, "--project=p"]).get_all_options()
    assert opts["runner"] == "DataflowRunner" and opts["project"] == "p"
    local = beam_options([]).get_all_options()
    assert local["runner"] == "pipelines.beam_local.LocalRunner" and local["direct_running_mode"] == "multi_processing"


def test_passes_over_groups_of_runs_decide_like_one_pass(tmp_path):
    from pipelines.curate.run import Piece, pass_groups

    pieces = [Piece(0, 0, 60, None, "2026-02"), Piece(1, 0, 60, None, "2026-03"), Piece(2, 0, 50, None, "2026-01")]
    assert pass_groups(pieces, 100) == [[2], [0], [1]]  # earliest first
    pieces[1] = replace(pieces[1], joins=True)
    assert pass_groups(pieces, 100) == [[2], [0, 1]]  # p1 continues p0's last trajectory: one pass
    results = {}
    for name, limit in (("one", 100_000), ("many", 100)):
        synth_store(tmp_path / name)
        # a second run with copies of the first run's trajectories: found across passes
        first = list(Store(tmp_path / name).iter_transitions())
        trajs = sorted({t.trajectory_id for t in first})[:5]
        later = {"run_id": "later"}
        copies = [
            t.evolve(
                trajectory_id=f"copy-{t.trajectory_id}",
                provenance=replace(t.provenance, collected_at=t.provenance.collected_at + timedelta(days=1), **later),
            )
            for t in first
            if t.trajectory_id in trajs
        ]
        with StoreWriter(str(tmp_path / name), "later") as w:
            w.write_many(copies)
        curate(CurationConfig(max_transitions_per_pass=limit), str(tmp_path / name), beam_args=IN_MEMORY, log=lambda m: None)
        rows = run_query("SELECT trajectory_id, stage FROM rejected ORDER BY 1", str(tmp_path / name)).to_pylist()
        results[name] = {(r["trajectory_id"], r["stage"]) for r in rows}
    assert results["one"] == results["many"]
    assert {f"copy-{t}" for t in trajs} <= {t for t, stage in results["many"] if stage == "exact_dedup"}


def _episode(traj: str, steps: list[tuple[str, str]], run: str, seed: int) -> list[Transition]:
    """A hand-made terminal trajectory: (action, next screen) per step, chained states."""
    rng = random.Random(seed)
    out, state = [], "$ "
    for i, (command, screen) in enumerate(steps):
        screen = screen or " ".join(rng.choice(string.ascii_lowercase) * rng.randint(1, 6) for _ in range(300))
        out.append(
            Transition.create(
                trajectory_id=traj,
                step=i,
                domain="terminal",
                env_id="bash",
                task_id=f"task-{traj}",
                state=Observation.make(state, "terminal"),
                action=Action.make("run", command=command),
                next_state=Observation.make(screen, "terminal"),
                provenance=Provenance(run_id=run),
                instruction="look around",
            )
        )
        state = screen
    return out


def test_repeated_steps_and_nondeterminism_are_marked_across_curations(tmp_path):
    store = str(tmp_path / "s")
    listing = "a.txt b.txt notes.md src tests\n"
    day1 = _episode("A", [("ls", listing), ("cat a.txt", "")], "day1", 1)
    with StoreWriter(store, "day1") as w:
        w.write_many(day1)
    curate(CurationConfig(), store, beam_args=IN_MEMORY, log=lambda m: None)
    # day 2: B repeats A's first step exactly; day 3: C's first step is A's (state, action) with another result
    b = _episode("B", [("ls", listing), ("cat b.txt", "")], "day2", 2)
    with StoreWriter(store, "day2") as w:
        w.write_many(b)
    r2 = curate(CurationConfig(), store, beam_args=IN_MEMORY, log=lambda m: None)
    assert r2.kept == 2 and r2.marked_duplicate_steps == 1
    c = _episode("C", [("ls", "permission denied: cannot open directory ."), ("id", "")], "day3", 3)
    with StoreWriter(store, "day3") as w:
        w.write_many(c)
    r3 = curate(CurationConfig(), store, beam_args=IN_MEMORY, log=lambda m: None)
    assert r3.kept == 2 and r3.marked_duplicate_steps == 0
    rows = run_query("SELECT transition_id, duplicate_of, exclude_as_target, flags FROM curated", store).to_pylist()
    by_id = {r["transition_id"]: r for r in rows}
    assert by_id[b[0].transition_id]["duplicate_of"] == day1[0].transition_id
    assert by_id[b[0].transition_id]["exclude_as_target"] and by_id[b[0].transition_id]["flags"] == []
    assert by_id[c[0].transition_id]["flags"] == ["nondeterministic"] and by_id[c[0].transition_id]["duplicate_of"] is None
    assert all(
        by_id[t.transition_id]["duplicate_of"] is None and not by_id[t.transition_id]["flags"]
        for t in (day1[0], day1[1], b[1], c[1])
    )


def test_an_unfinished_curation_is_not_deduped_against_and_reruns_from_scratch(tmp_path):
    store = tmp_path / "s"
    synth_store(store, n=150, duplicates=0.0)
    first = curate(CurationConfig(), str(store), beam_args=IN_MEMORY, log=lambda m: None)
    index = store / "curated" / "_index"
    # as if killed before its marker was written: the index files exist, the marker and the report do not
    (index / f"{first.curation_id}.json").unlink()
    (store / "curated" / first.curation_id / "report.json").unlink()
    other = curate(CurationConfig(name="other"), str(store), beam_args=IN_MEMORY, log=lambda m: None)
    assert other.kept == 150 and other.rejected == 0  # the unfinished one's kept trajectories are not "earlier copies"
    again = curate(CurationConfig(), str(store), beam_args=IN_MEMORY, log=lambda m: None)
    assert again.noop  # its inputs are curated (by "other") now


def test_cuts_fall_where_no_trajectory_crosses_even_when_episodes_interleave():
    from pipelines.curate.run import _cuts

    assert _cuts(["a", "b", "a", "c", "d", "d"], 1) == [3, 4]  # not 1 or 2 (a is open), not 5 (d is)
    assert _cuts(["a", "a", "b", "b", "c", "c", "d", "d", "e"], 3) == [4, 8]  # at least 3 rows, at the next trajectory end
    assert _cuts(["a", "b", "c", "a"], 1) == []  # one episode spans the shard: no cut


def test_reading_a_row_span_reads_those_rows_only(tmp_path):
    from pipelines.store import WriterOptions
    from pipelines.store.shards import RowSpan, read_column, read_shard

    gen = Synthesizer(5, duplicates=0.0, **SMALL)
    ts = [t for t in gen.transitions(1000) if t.domain == "terminal"][:50]
    with StoreWriter(str(tmp_path / "s"), gen.run_id, WriterOptions(rows_per_batch=7, rows_per_shard=10_000)) as w:
        w.write_many(ts)
    store = Store(tmp_path / "s")
    [path] = [s.path for s in store.readable_shards("raw")]
    batch_rows = tuple(len(c) for c in read_column(store.sfs, path, "transition_id").chunks)
    every = [t for b in read_shard(store.sfs, path) for t in b.column("transition_id").to_pylist()]
    assert len(every) == 50 and len(batch_rows) > 5
    for start, stop in ((0, 50), (3, 17), (14, 21), (49, 50), (20, 20)):
        got = [
            t
            for b in read_shard(store.sfs, path, span=RowSpan(start, stop, batch_rows))
            for t in b.column("transition_id").to_pylist()
        ]
        assert got == every[start:stop]


def test_a_large_run_is_cut_between_passes_where_no_trajectory_crosses(tmp_path):
    from pipelines.curate.run import pass_groups, plan_inputs, plan_pieces
    from pipelines.store import WriterOptions
    from pipelines.store.shards import read_shard

    results = {}
    for name, limit, shard_rows in (("one", 100_000, 60), ("many", 120, 60), ("big-shard", 100, 10_000)):
        gen = Synthesizer(3, duplicates=0.3, **SMALL)
        ts = [t for t in gen.transitions(3000) if t.domain == "terminal"][:400]  # one run: shards as large as asked
        for a, b in ((0, 101), (101, 203), (203, 333), (333, 400)):  # a writer closed mid-trajectory: a shard ends there
            with StoreWriter(str(tmp_path / name), gen.run_id, WriterOptions(rows_per_batch=7, rows_per_shard=shard_rows)) as w:
                w.write_many(ts[a:b])
        store = Store(tmp_path / name)
        inputs = plan_inputs(store, CurationConfig())
        pieces = plan_pieces(store, inputs, limit)
        groups = pass_groups(pieces, limit)
        assert sum(p.rows for p in pieces) == 400
        if name != "one":
            assert any(p.joins for p in pieces) and len(groups) > 2
            assert all(i - 1 in g for g in groups for i in g if pieces[i].joins)  # never cut inside a trajectory
            held = [
                {
                    t
                    for b in read_shard(store.sfs, store.sfs.join(inputs[p.input][0]), span=p.span())
                    for t in b.column("trajectory_id").to_pylist()
                }
                for p in pieces
            ]
            for i, j in itertools.combinations(range(len(pieces)), 2):  # a trajectory in two pieces: only a writer's roll
                assert not held[i] & held[j] or (j == i + 1 and pieces[j].joins), (pieces[i], pieces[j])
        if name == "big-shard":  # 4 shards of 101, 102, 130, 67 rows: cut into pieces, so no pass holds much more than 100
            assert len(pieces) > len(inputs)
            longest = max(len([t for t in ts if t.trajectory_id == x]) for x in {t.trajectory_id for t in ts})
            assert all(sum(pieces[i].rows for i in g) <= limit + longest for g in groups)
        r = curate(CurationConfig(max_transitions_per_pass=limit), str(tmp_path / name), beam_args=IN_MEMORY, log=lambda m: None)
        assert r.transitions_in == 400 and len(r.index_rows) == len(groups)
        if len(groups) > 1:  # each later pass read what the earlier ones kept (each pass in a process of its own)
            assert all(r.index_rows[str(g)].get("steps_read", 0) > 0 for g in range(2, len(groups) + 1))
        where = str(tmp_path / name)
        rows = run_query("SELECT transition_id, stage FROM rejected ORDER BY 1", where).to_pylist()
        rows += run_query("SELECT transition_id, duplicate_of, flags FROM curated ORDER BY 1", where).to_pylist()
        results[name] = rows
    assert results["one"] == results["many"] == results["big-shard"]
