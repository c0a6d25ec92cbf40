"""Batch jobs end to end: bad job files, both backends, kill -9 and rerun, retries, locks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from collectors import jobrun, runner
from collectors.jobs import load_job
from pipelines.query import run_query
from pipelines.store.check import check_path
from sandboxes import SandboxDied
from schemas.errors import ConfigError, StoreError
from tests.conftest import cli

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "examples" / "tasks"


def write_job(tmp_path: Path, **over) -> Path:
    body = {
        "job_id": "j",
        "seed": 0,
        "tasks": [str(TASKS / "terminal.yaml"), str(TASKS / "swe.yaml")],
        "policy": {"kind": "scripted"},
        "episodes_per_task": 1,
        "max_steps": 10,
        "workers": 2,
        "retries": 1,
        "sandbox": {"backend": "local", "memory_mb": 512},
    }
    body.update(over)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"episodes": 2}, "job.yaml: episodes: unknown key"),
        (
            {"workers": "many"},
            "job.yaml: workers: Input should be a valid integer, unable to parse string as an integer, got 'many'",
        ),
        ({"tasks": ["nowhere.yaml"]}, "job.yaml: tasks: task file nowhere.yaml not found"),
        ({"domains": ["desktop"]}, "job.yaml: domains: unknown domain 'desktop'"),
        ({"sandbox": {"backend": "vm"}}, "job.yaml: sandbox.backend: Input should be 'docker', 'local' or 'auto'"),
        ({"policy": {"kind": "scripted", "temprature": 1}}, "job.yaml: policy.temprature: unknown key"),
        ({"job_id": "bad id!"}, "job.yaml: job_id: String should match pattern"),
        ({"domains": ["web"]}, "job.yaml: no tasks selected"),
    ],
)
def test_bad_job_files_are_refused_before_anything_starts(tmp_path, over, message):
    path = write_job(tmp_path, **over)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_job(path)
    proc = cli("collect", str(path), "--store", str(tmp_path / "store"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: ") and message in proc.stderr
    assert not (tmp_path / "store").exists()


def test_bad_task_suite_names_the_file_and_key(tmp_path):
    suite = tmp_path / "tasks.yaml"
    suite.write_text(yaml.safe_dump({"tasks": [{"id": "a", "domain": "terminal", "instruction": "x", "cmd": "ls"}]}))
    with pytest.raises(ConfigError, match=r"tasks.yaml task 0: unknown task key 'cmd'"):
        load_job(write_job(tmp_path, tasks=[str(suite)]))


def test_job_on_both_backends_writes_valid_shards(tmp_path, backend, built):
    image = {"image": "localhost/trajforge-swe:latest"} if backend == "docker" else {}
    job, tasks = load_job(write_job(tmp_path, job_id=f"e2e-{backend}", sandbox={"backend": backend, **image}))
    summary = runner.run_job(job, tasks, str(tmp_path / "store"))
    assert (summary.collected, summary.failed) == (5, 0)
    if backend == "docker":  # the workers closed their sandboxes: no container outlives the run
        from sandboxes.engine import client

        left = client(built).containers.list(all=True, filters={"label": f"trajforge.run_id={summary.run_id}"})
        assert left == []
    else:
        from sandboxes.local import sandboxes_dir

        assert not [d for d in sandboxes_dir().iterdir() if d.name.startswith(summary.run_id)]
    report = check_path(str(tmp_path / "store"), deep=True)
    assert report.ok, report.problems
    rows = run_query(
        "SELECT task_id, max(step) + 1 AS steps, max(reward) AS reward, any_value(provenance.sandbox_backend) AS b,"
        " count(DISTINCT trajectory_id) AS n FROM transitions GROUP BY 1 ORDER BY 1",
        str(tmp_path / "store"),
    ).to_pylist()
    assert [r["task_id"] for r in rows] == sorted(t.id for t in tasks)
    assert all(r["reward"] == 1.0 and r["b"] == backend and r["n"] == 1 for r in rows), rows
    ledger = [json.loads(x) for x in (tmp_path / "store/jobs" / job.job_id / "ledger.jsonl").read_text().splitlines()]
    assert sorted(e["episode"] for e in ledger) == sorted(f"{t.id}#0" for t in tasks)
    assert all(e["status"] == "done" for e in ledger)
    # a rerun finds everything done and collects nothing
    again = runner.run_job(job, tasks, str(tmp_path / "store"))
    assert (again.already_done, again.collected) == (5, 0)


def test_exploration_episodes_are_valid_and_seeded(tmp_path):
    job, tasks = load_job(write_job(tmp_path, job_id="x", policy={"kind": "exploration", "max_steps": 6}, episodes_per_task=2))
    runner.run_job(job, tasks, str(tmp_path / "s1"))
    runner.run_job(job, tasks, str(tmp_path / "s2"))
    assert check_path(str(tmp_path / "s1"), deep=True).ok
    sql = "SELECT trajectory_id, step, action.canonical AS a FROM transitions ORDER BY 1, 2"
    one, two = run_query(sql, str(tmp_path / "s1")).to_pylist(), run_query(sql, str(tmp_path / "s2")).to_pylist()
    assert one == two and len(one) > 20  # same seed, same actions
    kinds = {r["a"].split('"kind":"')[1].split('"')[0] for r in one}
    assert {"run", "view"} <= kinds


KILL_JOB = dict(
    job_id="killme",
    policy={"kind": "exploration", "max_steps": 4},
    episodes_per_task=6,
    workers=2,
    tasks=[str(TASKS / "terminal.yaml")],
)


def test_kill_9_mid_job_then_rerun_collects_exactly_the_missing_episodes(tmp_path):
    path = write_job(tmp_path, **KILL_JOB)
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajforge", "collect", str(path), "--store", str(store)],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    for line in proc.stderr:
        m = re.search(r"(\d+)/18 episodes", line)
        if m and int(m.group(1)) >= 6:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(store.glob("raw/*/*/*.partial"))  # the open shard of the killed run
    from pipelines.store import repair

    repair(str(store))
    partial = run_query("SELECT count(DISTINCT trajectory_id) AS n FROM transitions", str(store)).to_pylist()[0]["n"]
    assert 0 < partial < 18
    out = cli("collect", str(path), "--store", str(store)).stdout
    assert f"{18 - partial} episodes collected" in out and f"{partial} already done" in out
    rows = run_query(
        "SELECT trajectory_id, count(*) AS n, max(step) + 1 AS steps FROM transitions GROUP BY 1", str(store)
    ).to_pylist()
    job, tasks = load_job(path)
    expected = {s.trajectory_id for s in jobrun.plan(job, tasks, "x")}
    assert {r["trajectory_id"] for r in rows} == expected  # exactly the planned set
    assert all(r["n"] == r["steps"] for r in rows)  # no duplicated or missing steps
    assert check_path(str(store), deep=True).ok


def test_sandbox_dying_mid_episode_is_retried_then_recorded(tmp_path, monkeypatch):
    from collectors.terminal import TerminalEnv

    real_step = TerminalEnv._step
    deaths = {"left": 1}

    def flaky(self, action):
        if deaths["left"] > 0:
            deaths["left"] -= 1
            os.kill(self.sandbox.init_pid, signal.SIGKILL)  # the sandbox dies under the episode
            time.sleep(0.2)
        return real_step(self, action)

    monkeypatch.setattr(TerminalEnv, "_step", flaky)
    job, tasks = load_job(write_job(tmp_path, job_id="flaky", workers=0, retries=1, domains=["terminal"]))
    summary = runner.run_job(job, tasks[:1], str(tmp_path / "store"))
    assert (summary.collected, summary.failed, summary.retried) == (1, 0, 1)
    ledger = [json.loads(x) for x in (tmp_path / "store/jobs/flaky/ledger.jsonl").read_text().splitlines()]
    assert ledger[0]["status"] == "done" and ledger[0]["attempts"] == 2

    deaths["left"] = 10**6  # now it always dies: failed after 1 + retries attempts, nothing written
    job2, _ = load_job(write_job(tmp_path, job_id="doomed", workers=0, retries=2, domains=["terminal"]))
    summary = runner.run_job(job2, tasks[:1], str(tmp_path / "store"))
    assert (summary.collected, summary.failed) == (0, 1)
    (failure,) = summary.failures.values()
    assert failure.startswith("SandboxDied")
    entry = json.loads((tmp_path / "store/jobs/doomed/ledger.jsonl").read_text().splitlines()[0])
    assert entry["status"] == "failed" and entry["attempts"] == 3 and "SandboxDied" in entry["reason"]
    n = run_query("SELECT count(*) AS n FROM transitions WHERE provenance.job_id = 'doomed'", str(tmp_path / "store"))
    assert n.to_pylist() == [{"n": 0}]
    assert issubclass(SandboxDied, Exception)


def test_overlapping_runs_of_one_job_do_not_both_collect(tmp_path):
    job, tasks = load_job(write_job(tmp_path, job_id="locked"))
    from pipelines.store.fs import StoreFS

    sfs = StoreFS.open(str(tmp_path / "store"))
    sfs.makedirs(sfs.join("jobs", "locked"))
    with sfs.lock(sfs.join("jobs", "locked", ".lock")):  # another run holds the job
        with pytest.raises(StoreError, match="in use by pid"):
            runner.run_job(job, tasks, str(tmp_path / "store"))
        proc = cli("collect", str(write_job(tmp_path, job_id="locked")), "--store", str(tmp_path / "store"), check=False)
        assert proc.returncode == 2 and "in use by pid" in proc.stderr
    assert not (tmp_path / "store" / "raw").exists()


def test_cron_line_runs_the_job(tmp_path):
    line = next(x for x in (ROOT / "deploy/crontab.example").read_text().splitlines() if x and not x.startswith("#"))
    command = line.split(None, 5)[5].split(">>")[0]
    command = command.replace("cd /opt/trajforge", f"cd {ROOT}").replace(".venv/bin/trajforge", f"{sys.executable} -m trajforge")
    command = command.replace("/data/trajforge-store", str(tmp_path / "store"))
    command = command.replace("examples/jobs/terminal-swe.yaml", str(write_job(tmp_path, job_id="cron")))
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "5 episodes collected" in proc.stdout
    unit = (ROOT / "deploy/trajforge-collect.service").read_text()
    assert "ExecStart=/opt/trajforge/.venv/bin/trajforge collect examples/jobs/terminal-swe.yaml" in unit


SANDBOX_JOBS = sorted(
    p for p in (ROOT / "examples" / "jobs").glob("terminal-*.yaml") if not p.name.endswith("-sim.yaml")
)  # the simulated job: tests/collectors/test_sim.py


# the web, mcp and search jobs: tests/collectors/test_web.py, test_mcp.py, test_search.py
@pytest.mark.parametrize("job_file", SANDBOX_JOBS, ids=lambda p: p.name)
def test_example_jobs_run(job_file, tmp_path, built):
    job, tasks = load_job(job_file)
    assert {t.domain for t in tasks} == {"terminal", "swe"}
    out = cli("collect", str(job_file), "--store", str(tmp_path / "store")).stdout
    expected = len(tasks) * job.episodes_per_task
    assert f"{expected} episodes collected" in out and "0 failed" in out
