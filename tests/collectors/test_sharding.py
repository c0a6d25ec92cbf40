"""Sharded collection (`trajforge collect --shard I --num-shards N`): N shards partition a
job's episodes, run in parallel they collect exactly the trajectories of the whole job,
none twice, in any order of completion, reruns are no-ops; the Slurm array script and the
Kubernetes manifests call it the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collectors.jobrun import plan
from collectors.jobs import load_job
from pipelines.query import run_query
from tests.conftest import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def job_file(tmp_path_factory) -> Path:
    """The search example job, three episodes per task: 24 fast episodes, no sandbox."""
    body = yaml.safe_load((ROOT / "examples" / "jobs" / "search.yaml").read_text())
    body.update(job_id="sharded", episodes_per_task=3, tasks=[str(ROOT / "examples" / "tasks" / "search.yaml")], workers=0)
    path = tmp_path_factory.mktemp("job") / "job.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _trajectories(store: Path) -> list[str]:
    rows = run_query("SELECT trajectory_id, count(*) AS n FROM transitions GROUP BY 1 ORDER BY 1", str(store)).to_pylist()
    return [r["trajectory_id"] for r in rows]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_shards_partition_the_episodes(job_file, n):
    job, tasks = load_job(job_file)
    whole = [s.key for s in plan(job, tasks, "r")]
    parts = [[s.key for s in plan(job, tasks, "r", (i, n))] for i in range(n)]
    assert sorted(k for p in parts for k in p) == sorted(whole) and len(whole) == 24
    assert all(parts) or n > len(whole)
    # the split depends on the episode, not on the task list's order
    again = [[s.key for s in plan(job, list(reversed(tasks)), "r", (i, n))] for i in range(n)]
    assert [sorted(p) for p in again] == [sorted(p) for p in parts]


def test_four_shards_in_parallel_collect_exactly_the_whole_job(job_file, tmp_path):
    whole = tmp_path / "whole"
    cli("collect", str(job_file), "--store", str(whole))
    sharded = tmp_path / "sharded"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trajforge",
                "collect",
                str(job_file),
                "--store",
                str(sharded),
                "--shard",
                str(i),
                "--num-shards",
                "4",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (3, 1, 0, 2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    expected = _trajectories(whole)
    assert len(expected) == 24 and _trajectories(sharded) == expected  # the same set, none twice
    steps = "SELECT trajectory_id, count(*) AS n FROM transitions GROUP BY 1 ORDER BY 1"
    assert run_query(steps, str(sharded)).to_pylist() == run_query(steps, str(whole)).to_pylist()
    runs = sorted(p.name for p in (sharded / "raw" / "search").iterdir())
    assert len(runs) == 4 and all(r.startswith(f"sharded-s{r.split('-s')[1][0]}of4-") for r in runs)
    # a rerun of any shard is a no-op: its episodes are in the store
    again = cli("collect", str(job_file), "--store", str(sharded), "--shard", "1", "--num-shards", "4")
    assert " 0 episodes collected" in again.stdout and "already done" in again.stdout
    assert _trajectories(sharded) == expected


def test_a_shard_out_of_range_is_a_one_line_error(job_file, tmp_path):
    proc = cli("collect", str(job_file), "--store", str(tmp_path / "s"), "--shard", "4", "--num-shards", "4", check=False)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --shard 4 --num-shards 4: need 0 <= shard < num-shards"


def test_the_slurm_array_script_runs_its_task_as_a_shard(job_file, tmp_path):
    store = tmp_path / "store"
    for task in (0, 1):
        env = {
            **os.environ,
            "SLURM_ARRAY_TASK_ID": str(task),
            "SLURM_ARRAY_TASK_COUNT": "2",  # what Slurm sets for --array=0-1
            "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_MAX": "1",
            "JOB": str(job_file),
            "STORE": str(store),
            "TRAJFORGE": f"{sys.executable} -m trajforge",
        }
        proc = subprocess.run(
            ["bash", str(ROOT / "deploy" / "slurm" / "collect-array.sh")],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert f"(shard {task} of 2)" in proc.stderr
    assert len(_trajectories(store)) == 24


@pytest.mark.parametrize("name", ["collect-indexed-job.yaml", "collect-cronjob.yaml"])
def test_the_kubernetes_manifests_run_one_shard_per_completion_index(name):
    doc = yaml.safe_load((ROOT / "deploy" / "kubernetes" / name).read_text())
    job = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    assert job["completionMode"] == "Indexed"
    command = " ".join(job["template"]["spec"]["containers"][0]["args"])
    assert '--shard "$JOB_COMPLETION_INDEX"' in command and f"--num-shards {job['completions']}" in command
    job_path = command.split("collect ", 1)[1].split()[0]
    assert (ROOT / job_path).is_file() and json.dumps(doc).count("--store") == 1
