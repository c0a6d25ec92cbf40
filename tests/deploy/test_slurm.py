"""deploy/slurm/collect-array.sh on a real Slurm (Debian's 22.05, one node on this host,
tests/deploy/slurm_cluster.py): a 2-task array collects what one unsharded run collects,
and a task cancelled mid-run and resubmitted alone completes the job with nothing twice.

The job is a small terminal suite in the local sandbox with scripted actions, so every
episode is the same wherever it runs; one task sleeps, so a shard is slow enough to cancel."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from collectors.jobrun import plan, shard_of
from collectors.jobs import load_job
from pipelines.query import run_query
from tests.deploy.slurm_cluster import slurm_cluster

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "slurm" / "collect-array.sh"
JOB_ID = "slurm-array"
TASKS = [
    {
        "id": "slurm/count",
        "domain": "terminal",
        "env_id": "bash",
        "instruction": "Write the number of lines of notes.txt to count.txt.",
        "files": {"/work/notes.txt": "a\nb\nc\n"},
        "check": 'test "$(cat /work/count.txt)" = 3',
        "actions": [{"action": "run", "command": "wc -l < notes.txt > count.txt && cat count.txt"}],
    },
    {
        "id": "slurm/slow",
        "domain": "terminal",
        "env_id": "bash",
        "instruction": "Wait, then leave done.txt.",
        "check": "test -f /work/done.txt",
        "actions": [
            {"action": "run", "command": "sleep 1 && echo one"},
            {"action": "run", "command": "sleep 1 && echo two > done.txt && ls"},
        ],
    },
    {
        "id": "slurm/squares",
        "domain": "terminal",
        "env_id": "bash",
        "instruction": "Print the squares of 1..4 with Python.",
        "check": "python3 /work/sq.py | tail -n 1 | grep -qx 16",
        "actions": [
            {"action": "write_file", "path": "sq.py", "content": "for i in range(1, 5):\n    print(i * i)\n"},
            {"action": "run", "command": "python3 sq.py"},
        ],
    },
]
EPISODES_PER_TASK = 3
#: what differs between two runs of the same episode: timings, and which run wrote it when
PER_RUN = ("action_ms", "observe_ms", "settle_ms")
PER_RUN_PROVENANCE = ("run_id", "collected_at")


def write_job(folder: Path) -> Path:
    suite = folder / "suite.yaml"
    suite.write_text(yaml.safe_dump({"tasks": TASKS}))
    job = folder / "job.yaml"
    body = {
        "job_id": JOB_ID,
        "tasks": [str(suite)],
        "policy": {"kind": "scripted"},
        "episodes_per_task": EPISODES_PER_TASK,
        "max_steps": 6,
        "workers": 1,
        "retries": 1,
        "sandbox": {"backend": "local"},
    }
    job.write_text(yaml.safe_dump(body))
    return job


def trajforge_cmd() -> str:
    """The CLI of this checkout, as the script's TRAJFORGE runs it on the node."""
    return f"{sys.executable} {ROOT / 'trajforge.py'}"


def transitions(store: Path) -> list[dict]:
    """Every transition, minus what legitimately differs between runs."""
    rows = run_query("SELECT * FROM transitions ORDER BY trajectory_id, step", str(store)).to_pylist()
    for row in rows:
        for key in PER_RUN:
            row.pop(key)
        for key in PER_RUN_PROVENANCE:
            row["provenance"].pop(key)
    return rows


def assert_complete_and_valid(store: Path, reference: list[dict]) -> None:
    (counts,) = run_query(
        "SELECT count(*) AS n, count(DISTINCT (trajectory_id, step)) AS distinct_steps FROM transitions", str(store)
    ).to_pylist()
    assert counts["n"] == counts["distinct_steps"] == len(reference)  # no duplicated step
    assert transitions(store) == reference
    check = subprocess.run([*trajforge_cmd().split(), "shards", "validate", "--deep", str(store)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    from sandboxes.images import build_root

    build_root(log=lambda m: print(m, file=sys.stderr))  # the local sandbox's root (cached; make sandboxes)
    return write_job(tmp_path_factory.mktemp("job"))


@pytest.fixture(scope="module")
def reference(job: Path, tmp_path_factory) -> list[dict]:
    """The same job, unsharded, outside Slurm."""
    store = tmp_path_factory.mktemp("unsharded") / "store"
    proc = subprocess.run([*trajforge_cmd().split(), "collect", str(job), "--store", str(store)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = transitions(store)
    assert {r["trajectory_id"] for r in rows} == {s.trajectory_id for s in plan(*load_job(job), "")}
    assert {r["reward"] for r in rows if r["terminated"] or r["truncated"]} == {1.0}  # every episode solved its task
    return rows


def submit(cluster, job: Path, store: Path, logs: Path, *args: str, **env: str) -> str:
    """The script as a user submits it, from a folder that is not the checkout; the node
    has 2 CPUs, so each task asks for 1 (the job runs 1 worker) to let both run at once."""
    variables = {"JOB": str(job), "STORE": str(store), "TRAJFORGE": trajforge_cmd(), **env}
    logs.mkdir(exist_ok=True)
    return cluster.sbatch(
        *args, "--cpus-per-task=1", "--mem=1G", f"--output={logs}/%A-%a.log", str(SCRIPT), env=variables, cwd=logs
    )


def test_a_two_task_array_collects_what_one_unsharded_run_does(cluster, job, reference, tmp_path):
    store = tmp_path / "store"
    array = submit(cluster, job, store, tmp_path / "logs", "--array=0-1")
    assert cluster.wait(array) == {f"{array}_0": "COMPLETED", f"{array}_1": "COMPLETED"}
    assert_complete_and_valid(store, reference)
    runs = run_query("SELECT DISTINCT provenance.run_id AS r FROM transitions", str(store)).to_pylist()
    assert sorted(re.sub(r"-\d{8}T.*", "", r["r"]) for r in runs) == [f"{JOB_ID}-s0of2", f"{JOB_ID}-s1of2"]  # one run per task


def test_a_task_cancelled_mid_run_and_resubmitted_alone_completes_the_job(cluster, job, reference, tmp_path):
    shards = [shard_of(s.key, 2) for s in plan(*load_job(job), "")]
    victim = max((0, 1), key=shards.count)  # the longer shard
    planned = shards.count(victim)
    assert planned >= 3, shards
    store, logs = tmp_path / "store", tmp_path / "logs"
    array = submit(cluster, job, store, logs, "--array=0-1")
    log = logs / f"{array}-{victim}.log"
    deadline = time.monotonic() + 120
    while not re.search(r"collect \S+: [1-9]\d*/\d+ episodes", log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and cluster.queued(array), f"no episode finished: {cluster.logs()}"
        time.sleep(0.05)
    cluster.scancel(f"{array}_{victim}")
    states = cluster.wait(array)
    assert states[f"{array}_{victim}"] == "CANCELLED" and states[f"{array}_{1 - victim}"] == "COMPLETED", states

    # resubmitted alone, the array is 1 task: without NUM_SHARDS the script refuses to guess the split
    again = submit(cluster, job, store, logs, f"--array={victim}")
    assert cluster.wait(again) == {f"{again}_{victim}": "FAILED"}
    assert "set NUM_SHARDS" in (logs / f"{again}-{victim}.log").read_text()

    again = submit(cluster, job, store, logs, f"--array={victim}", NUM_SHARDS="2")
    assert cluster.wait(again) == {f"{again}_{victim}": "COMPLETED"}
    out = (logs / f"{again}-{victim}.log").read_text()
    m = re.search(rf"\(shard {victim} of 2\): {planned} episodes planned, (\d+) already done", out)
    assert m and 0 < int(m.group(1)) < planned, out  # the cancel came mid-run: some done, some not
    assert_complete_and_valid(store, reference)
