"""Beam collection mode (`trajforge collect JOB --store S --runner R`): episodes as elements of
a Beam pipeline on Beam's local multi-process runner, the same trajectories as the local
runner, each unit committed whole and once (duplicate attempts, injected faults, reruns), and
bad runners or options refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collectors import beam_collect
from collectors.beam_collect import collect_unit, make_units, run_beam_job
from collectors.jobrun import plan
from collectors.jobs import load_job
from pipelines.query import run_query
from tests.conftest import cli

ROOT = Path(__file__).resolve().parents[2]
ROWS = (
    "SELECT trajectory_id, step, domain, action.canonical AS action, next_state.text AS next_state, reward, terminated,"
    " truncated, action_error, provenance.seed AS seed FROM transitions ORDER BY trajectory_id, step"
)


SEARCH = str(ROOT / "examples" / "tasks" / "search.yaml")
TERMINAL = str(ROOT / "examples" / "tasks" / "terminal.yaml")


def _job(tmp_path: Path, **over) -> Path:
    """Search episodes: no sandbox, and the same observations in every run (terminal ones
    carry timings, and their output has been seen to differ under load), so runs compare
    exactly; 16 episodes, 6 units of 3."""
    body = {
        "job_id": "beamed",
        "seed": 3,
        "tasks": [SEARCH],
        "policy": {"kind": "scripted"},
        "episodes_per_task": 2,
        "max_steps": 10,
        "workers": 2,
        "retries": 1,
        "sandbox": {"backend": "local", "memory_mb": 512},
    } | over
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _rows(store: Path) -> list[dict]:
    """Every step of every trajectory, with what is the same in two runs of one job."""
    return run_query(ROWS, str(store)).to_pylist()


def _beam(job_file: Path, store: Path, *extra: str, env: dict | None = None, check: bool = True):
    args = [sys.executable, "-m", "trajforge", "collect", str(job_file), "--store", str(store)]
    args += ["--runner", "DirectRunner", "--unit-size", "3", "--direct_num_workers=2", *extra]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"beam collect failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def local_store(tmp_path_factory) -> tuple[Path, Path]:
    """The job collected by the local runner: what Beam mode must reproduce."""
    tmp = tmp_path_factory.mktemp("local")
    job_file = _job(tmp)
    store = tmp / "store"
    cli("collect", str(job_file), "--store", str(store))
    return job_file, store


def test_units_group_one_domain_each_with_their_own_run_ids(tmp_path):
    job, tasks = load_job(_job(tmp_path, tasks=[SEARCH, TERMINAL]))
    specs = plan(job, tasks, "r")
    units = make_units(specs, "r", 4)
    assert sorted(s.key for u in units for s in u.specs) == sorted(s.key for s in specs)
    assert all({s.task.domain for s in u.specs} == {u.domain} and len(u.specs) <= 4 for u in units)
    assert all(s.run_id == u.run_id for u in units for s in u.specs) and len({u.run_id for u in units}) == len(units)
    assert sorted(u.domain for u in units) == ["search"] * 4 + ["terminal"] * 2


def test_beam_collects_the_trajectories_of_the_local_runner(local_store, tmp_path):
    job_file, expected_store = local_store
    store = tmp_path / "store"
    proc = _beam(job_file, store)
    expected = _rows(expected_store)
    assert len({r["trajectory_id"] for r in expected}) == 16
    assert _rows(store) == expected  # same episodes, seeds, actions, observations and rewards, none twice
    assert "16 episodes collected" in proc.stdout and "in 6 Beam units on DirectRunner" in proc.stderr
    runs = sorted(p.name for d in (store / "raw").iterdir() for p in d.iterdir())
    assert len(runs) == 6 and all("-beam-" in r and r.rsplit("-u", 1)[1].isdigit() for r in runs)
    assert not any((store / "jobs" / "beamed" / "staging").iterdir())  # nothing staged is left
    again = _beam(job_file, store)  # a rerun finds everything done
    assert " 0 episodes collected" in again.stdout and "16 already done" in again.stdout
    assert _rows(store) == expected
    check = cli("shards", "validate", str(store))
    assert "0 problems" in check.stdout or "ok" in check.stdout.lower(), check.stdout


def test_duplicate_attempts_of_units_commit_each_once(local_store, tmp_path):
    job_file, expected_store = local_store
    job, tasks = load_job(job_file)
    store = tmp_path / "store"
    # every unit is an element three times: duplicate attempts, run side by side by two workers
    summary = run_beam_job(
        job,
        tasks,
        str(store),
        runner="DirectRunner",
        beam_args=["--direct_num_workers=2"],
        unit_size=3,
        units_hook=lambda units: units * 3,
    )
    assert _rows(store) == _rows(expected_store)  # each step once
    assert summary.collected == 16 and summary.failed == 0


def test_an_attempt_that_loses_the_commit_race_leaves_no_duplicate(tmp_path, monkeypatch):
    job, tasks = load_job(_job(tmp_path, domains=["search"], job_id="race"))
    unit = make_units(plan(job, tasks, "race-r1"), "race-r1", 3)[0]
    store = tmp_path / "store"
    first = collect_unit(unit, str(store), 0)
    assert first["status"] == "committed" and first["episodes"] == 3
    rows = _rows(store)
    assert collect_unit(unit, str(store), 0)["status"] == "already committed"  # a retry after the commit
    monkeypatch.setattr(beam_collect, "committed", lambda sfs, u: False)  # both attempts passed the check
    assert collect_unit(unit, str(store), 0)["status"] == "lost to another attempt"
    assert _rows(store) == rows and len({r["trajectory_id"] for r in rows}) == 3
    assert not any((store / "jobs" / "race" / "staging").iterdir())


@pytest.mark.parametrize("point", ["staged", "committed"])
def test_a_fault_in_a_unit_loses_nothing_finished_and_a_rerun_completes(local_store, tmp_path, point):
    job_file, expected_store = local_store
    store = tmp_path / "store"
    marker = tmp_path / "fault-fired"
    # one worker: the unit that fails is the only one in flight, so nothing runs on after the failure
    failed = _beam(job_file, store, "--direct_num_workers=1", env={beam_collect.FAULT_ENV: f"{point}:{marker}"}, check=False)
    assert failed.returncode == 2 and marker.exists(), failed.stderr[-2000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("error: job beamed: Beam pipeline on DirectRunner failed:") and "injected fault" in last
    expected = _rows(expected_store)
    by_trajectory = {}
    for r in expected:
        by_trajectory.setdefault(r["trajectory_id"], []).append(r)
    partial = _rows(store) if (store / "raw").exists() else []
    seen = {r["trajectory_id"] for r in partial}
    assert len(seen) < 16 or point == "committed"
    for tid in seen:  # what a failed pipeline left is whole episodes, each once
        assert [r for r in partial if r["trajectory_id"] == tid] == by_trajectory[tid]
    again = _beam(job_file, store)
    assert _rows(store) == expected
    assert f"{16 - len(seen)} episodes collected" in again.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--runner", "NoSuchRunner"], "error: --runner NoSuchRunner: not a Beam runner"),
        (["--runner", "DirectRunner", "--no_such_option=1"], "error: Beam options: unknown option --no_such_option"),
        (["--runner", "DirectRunner", "--direct_num_workers=many"], "error: Beam options: argument --direct_num_workers"),
        (["--direct_num_workers=2"], "error: unexpected arguments --direct_num_workers=2 (Beam options need --runner)"),
        (["--runner", "DirectRunner", "--num-shards", "2"], "error: --runner and --num-shards"),
    ],
)
def test_bad_runners_and_options_are_one_line_errors(tmp_path, extra, message):
    job_file = _job(tmp_path, domains=["search"])
    proc = cli("collect", str(job_file), "--store", str(tmp_path / "s"), *extra, check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), proc.stderr
    assert not (tmp_path / "s" / "raw").exists()


def test_both_runners_run_a_job_through_one_jobrun(tmp_path, monkeypatch):
    """Local and Beam runs of a job share ``JobRun``: the run id, the plan less what the store
    has (``Store.trajectory_ids``), the lock and the run's summary under ``jobs/<job>/runs/``."""
    import json

    from collectors import jobrun
    from collectors.runner import run_job
    from pipelines.store import Store

    planned = []
    todo = jobrun.JobRun.todo

    def spied(self):
        out = todo(self)
        planned.append((self.run_id, len(out)))
        return out

    monkeypatch.setattr(jobrun.JobRun, "todo", spied)
    job, tasks = load_job(_job(tmp_path, job_id="shared", workers=0))
    store = Store.open(str(tmp_path / "store"), must_exist=False)
    local = run_job(job, tasks, store, log=lambda m: None)
    beamed = run_beam_job(job, tasks, store, runner="DirectRunner")  # all done: no unit to run
    assert (local.collected, local.already_done) == (16, 0) and (beamed.collected, beamed.already_done) == (0, 16)
    assert [n for _, n in planned] == [16, 0] and "-beam-" in planned[1][0]
    assert store.trajectory_ids(job_id="shared") == {s.trajectory_id for s in plan(job, tasks, "x")}
    for summary in (local, beamed):
        written = json.loads(Path(store.layout.job_run_summary("shared", summary.run_id)).read_text())
        assert written == json.loads(json.dumps(summary.to_json()))


def test_job_summaries_count_ledger_lines_and_merge_as_tallies():
    from collectors.jobrun import JobSummary, tally

    one, two = JobSummary("j", "r1"), JobSummary("j", "r2")
    tally({"episode": "t#0", "status": "done", "steps": 3, "attempts": 2}, one)
    one.count({"episode": "t#1", "status": "failed", "reason": "dead", "attempts": 1})
    two.count({"episode": "t#2", "status": "done", "steps": 4, "attempts": 1})
    assert (one.collected, one.failed, one.retried, one.transitions, one.failures) == (1, 1, 1, 3, {"t#1": "dead"})
    one.merge(two.to_json())
    assert (one.job_id, one.run_id, one.collected, one.transitions) == ("j", "r1", 2, 7)
