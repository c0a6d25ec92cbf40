"""Stores on object storage, against a real local S3 server (moto in server mode).

Collection, repair, validate, queries, curation and releases run in a bucket and give
what they give on local disk; a writer killed while writing, mid-upload (a multipart
upload never completed) or after its upload but before the manifest commit leaves
nothing partial visible, and the next writer of the run completes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.query import run_query
from pipelines.store import ShardWriter, Store, StoreFS, StoreWriter, WriterOptions, repair
from pipelines.store.check import check_path
from pipelines.store.ledger import Ledger
from tests.conftest import cli, make_transitions

ROOT = Path(__file__).resolve().parents[2]
IN_MEMORY = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
OPTIONS = WriterOptions(rows_per_batch=8, rows_per_shard=50)
COUNTS = (
    "SELECT domain, count(*) AS n, count(DISTINCT trajectory_id) AS trajs, sum(reward) AS r "
    "FROM transitions GROUP BY 1 ORDER BY 1"
)


def objects(uri: str) -> list[str]:
    sfs = StoreFS.open(uri)
    return [sfs.rel(p) for p in sfs.files(sfs.root)]


def write(store: str, transitions, run_id: str = "synth-s0") -> None:
    with StoreWriter(store, run_id, OPTIONS) as w:
        w.write_many(transitions)


def test_writes_reads_validates_repairs_and_queries_like_local_disk(s3_store, tmp_path):
    transitions = make_transitions(300)
    local = str(tmp_path / "local")
    write(local, transitions)
    write(s3_store, transitions)
    assert StoreFS.open(s3_store).scheme == "s3" and not StoreFS.open(s3_store).local
    names = objects(s3_store)
    assert names and not [n for n in names if n.endswith(".partial") or ".tmp-" in n or n.endswith(".lock")]
    assert sorted(n for n in names if n.endswith(".arrow")) == sorted(
        str(p.relative_to(local)) for p in Path(local).rglob("*.arrow")
    )
    ids = [t.transition_id for t in Store(s3_store).iter_transitions()]
    assert sorted(ids) == sorted(t.transition_id for t in transitions)
    assert run_query(COUNTS, s3_store).to_pylist() == run_query(COUNTS, local).to_pylist()
    report = check_path(s3_store, deep=True)
    assert report.ok, report.problems
    assert report.rows == 300 and report.shards_ok == check_path(local).shards_ok
    assert all(not r.changed for r in repair(s3_store))
    # the front door takes the URI as it takes a path
    assert cli("shards", "validate", s3_store).stdout.strip() == f"{report.shards_ok} shards ok (300 rows), 0 problems"
    out = cli("query", "SELECT count(*) AS n FROM transitions", "--store", s3_store, "--format", "json").stdout
    assert json.loads(out.splitlines()[0]) == {"n": 300}


# -- a writer killed at each point of a shard's life ------------------------------------------
CHILD = r"""
import sys, threading
from pathlib import Path
from pipelines.store import StoreFS, StoreWriter
from tests.conftest import make_transitions
from tests.pipelines.test_s3 import episodes

store, mode, marker = sys.argv[1:4]
eps = episodes()
calls = []
original = StoreFS.publish

def hang():
    Path(marker).write_text("ready")
    threading.Event().wait()

def publish(self, local_file, path):
    calls.append(path)
    if len(calls) < 2:
        return original(self, local_file, path)
    if mode == "uploading":  # a multipart upload with a part sent, never completed
        data = Path(local_file).read_bytes()
        out = self.fs.open_output_stream(path)
        sent = 0
        while sent < 11 << 20:
            out.write(data)
            sent += len(data)
        out.flush()
        hang()
    original(self, local_file, path)
    hang()  # "uploaded": the object is there, the manifest commit is not

StoreFS.publish = publish
run = eps[0][0].provenance.run_id
with StoreWriter(store, run) as first:  # shard 0: uploaded and committed
    for ep in eps[:2]:
        first.writer("terminal").write_episode(ep)
w = StoreWriter(store, run)  # the same run again: shard 1, killed on its way
for i, ep in enumerate(eps[2:], start=2):
    if mode == "writing" and i == 4:
        hang()  # episodes 2 and 3 are in the open (staged) shard
    w.writer("terminal").write_episode(ep)
w.close()
"""


def episodes() -> list[list]:
    """Terminal trajectories of the synthetic set, each whole and in step order."""
    by_traj: dict[str, list] = {}
    for t in make_transitions(600):
        if t.domain == "terminal":
            by_traj.setdefault(t.trajectory_id, []).append(t)
    eps = [sorted(steps, key=lambda t: t.step) for steps in by_traj.values()]
    assert len(eps) >= 6
    return eps[:6]


def _kill_child_at(store: str, mode: str, tmp_path: Path) -> None:
    marker = tmp_path / f"{mode}.ready"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "child.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(script), store, mode, str(marker)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 240
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"writer exited before the kill point: {log.read_text()[-3000:]}")
        assert time.monotonic() < deadline, "writer never reached the kill point"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def _multipart_uploads(store: str) -> list[str]:
    import boto3

    bucket = store.removeprefix("s3://").split("/")[0]
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    return [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


@pytest.mark.parametrize("mode", ["writing", "uploading", "uploaded"])
def test_a_writer_killed_leaves_nothing_partial_visible_and_a_rerun_completes(s3_store, tmp_path, mode):
    eps = episodes()
    ids = lambda steps: sorted(t.transition_id for ep in steps for t in ep)  # noqa: E731
    _kill_child_at(s3_store, mode, tmp_path)
    visible = sorted(t.transition_id for t in Store(s3_store).iter_transitions())
    assert visible == ids(eps[:2])  # the committed first shard, nothing of the one being written or uploaded
    shard = f"store/raw/terminal/{eps[0][0].provenance.run_id}/part-00001.arrow"
    names = objects(s3_store)
    if mode == "uploading":
        assert shard.removeprefix("store/") not in names
        assert shard in _multipart_uploads(s3_store)  # killed with its multipart upload open
    if mode == "uploaded":
        assert shard.removeprefix("store/") in names  # uploaded, not committed: readers do not see it
    # the next writer of the run (or shards repair) repairs it: what the killed one had finished comes back, once
    if mode == "uploaded":
        assert "1 repaired" in cli("shards", "repair", s3_store).stdout
    else:
        ShardWriter(s3_store, "terminal", eps[0][0].provenance.run_id).close()
    expected = ids(eps[:4]) if mode == "writing" else ids(eps)
    assert sorted(t.transition_id for t in Store(s3_store).iter_transitions()) == expected
    report = check_path(s3_store, deep=True)
    assert report.ok and report.rows == len(expected), report.problems
    staged = list((tmp_path / "state").rglob("*.partial"))
    assert staged == []


LEDGER_CHILD = r"""
import sys, threading
from pathlib import Path
from pipelines.store import StoreFS
from pipelines.store.ledger import Ledger

store, marker = sys.argv[1:3]
sfs = StoreFS.open(store)
ledger = Ledger(sfs, sfs.join("jobs", "j"), "killed")
ledger.write({"episode": "a#0", "status": "done"})
Path(marker).write_text("ready")
threading.Event().wait()
"""


def test_a_killed_runs_ledger_is_uploaded_by_the_next_run_and_a_live_one_is_left(s3_store, tmp_path):
    script, marker = tmp_path / "ledger_child.py", tmp_path / "ledger.ready"
    script.write_text(LEDGER_CHILD)
    proc = subprocess.Popen(
        [sys.executable, str(script), s3_store, str(marker)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "ledger writer never got ready"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    sfs = StoreFS.open(s3_store)
    job = sfs.join("jobs", "j")
    assert objects(s3_store) == []  # nothing in the bucket before the run ends
    with Ledger(sfs, job, "live") as live:
        live.write({"episode": "b#0", "status": "done"})
        with Ledger(sfs, job, "next") as nxt:  # uploads the killed run's staged lines, not the live run's
            nxt.write({"episode": "c#0", "status": "failed"})
            assert objects(s3_store) == ["jobs/j/ledger/killed.jsonl"]
        assert objects(s3_store) == ["jobs/j/ledger/killed.jsonl", "jobs/j/ledger/next.jsonl"]
    names = objects(s3_store)
    assert names == ["jobs/j/ledger/killed.jsonl", "jobs/j/ledger/live.jsonl", "jobs/j/ledger/next.jsonl"]
    lines = {n: [json.loads(x) for x in sfs.read_bytes(sfs.join(n)).decode().splitlines()] for n in names}
    assert [e["episode"] for n in names for e in lines[n]] == ["a#0", "b#0", "c#0"]
    assert not list((tmp_path / "state").rglob("*.jsonl"))


def test_curation_and_a_release_in_the_bucket_match_local_disk(s3_store, tmp_path):
    from collectors.synth import Synthesizer
    from pipelines.curate.config import CurationConfig
    from pipelines.curate.run import curate
    from pipelines.release.build import create_release
    from pipelines.release.config import load_mixture
    from pipelines.release.inspect import list_releases, load_manifest, verify
    from pipelines.release.tokens import train_tokenizer
    from tests.conftest import SMALL

    local = str(tmp_path / "local")
    gen = Synthesizer(3, duplicates=0.2, **SMALL)
    transitions = list(gen.transitions(250))
    for store in (local, s3_store):
        write(store, transitions, gen.run_id)
    reports = [curate(CurationConfig(), store, beam_args=IN_MEMORY, log=lambda m: None) for store in (local, s3_store)]
    for r in reports:
        r.seconds = {}
    assert reports[0] == reports[1] and reports[1].rejected > 0 and not reports[1].noop
    decided = "SELECT transition_id, status, stage, duplicate_of FROM {} ORDER BY transition_id"
    for view in ("curated", "rejected"):
        assert run_query(decided.format(view), s3_store) == run_query(decided.format(view), local)
    assert check_path(s3_store, deep=True).ok
    again = curate(CurationConfig(), s3_store, beam_args=IN_MEMORY, log=lambda m: None)
    assert again.noop  # the index and report in the bucket make the rerun a no-op
    assert not [n for n in objects(s3_store) if "_work" in n]

    tokenizer = tmp_path / "tokenizer.json"
    train_tokenizer([t.next_state.text for t in transitions], str(tokenizer), vocab_size=400)
    cfg = load_mixture(ROOT / "examples/mixtures/default.yaml")
    cfg.tokenizer = str(tokenizer)
    built = [create_release(cfg, store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None) for store in (local, s3_store)]
    assert built[1].path == f"{s3_store}/releases/wm/1" and built[0].samples == built[1].samples
    manifests = [load_manifest(f"{store}/releases/wm/1") for store in (local, s3_store)]
    data = [{f["path"]: f["sha256"] for f in m["files"] if f["path"].startswith("data/")} for m in manifests]
    assert data[0] == data[1] and data[1]  # byte-identical data files
    assert verify(f"{s3_store}/releases/wm/1") == []
    assert [r["samples"] for r in list_releases(s3_store)] == [r["samples"] for r in list_releases(local)]
    sql = "SELECT name, version, split, count(*) AS n FROM release_sft GROUP BY ALL ORDER BY ALL"
    assert run_query(sql, s3_store) == run_query(sql, local)
    assert create_release(cfg, s3_store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None).identical
    # a file changed in the bucket after the release: verify names it
    sfs = StoreFS.open(s3_store)
    readme = sfs.join("releases", "wm", "1", "README.md")
    sfs.write_bytes_atomic(readme, sfs.read_bytes(readme) + b"\nedited\n")
    assert verify(f"{s3_store}/releases/wm/1") == [
        f"{s3_store}/releases/wm/1/README.md: changed (sha256 differs from the manifest)"
    ]


def test_a_real_collection_job_into_the_bucket_and_its_rerun(s3_store, tmp_path):
    import yaml

    from collectors import runner
    from collectors.jobs import load_job
    from sandboxes.images import build_root

    build_root(log=lambda m: None)  # the local sandboxes' Debian root (cached)
    suite = yaml.safe_load((ROOT / "examples/tasks/terminal.yaml").read_text())
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump({"tasks": suite["tasks"][:2]}))
    body = {
        "job_id": "s3job",
        "tasks": [str(tmp_path / "tasks.yaml")],
        "policy": {"kind": "scripted"},
        "max_steps": 6,
        "workers": 0,
        "retries": 0,
        "sandbox": {"backend": "local", "memory_mb": 512},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(body))
    job, tasks = load_job(tmp_path / "job.yaml")
    summary = runner.run_job(job, tasks, s3_store, log=lambda m: None)
    assert (summary.collected, summary.failed) == (2, 0)
    rows = run_query("SELECT task_id, count(*) AS n, max(reward) AS r FROM transitions GROUP BY 1 ORDER BY 1", s3_store)
    assert [(r["task_id"], r["r"]) for r in rows.to_pylist()] == [
        (t["id"], 1.0) for t in sorted(suite["tasks"][:2], key=lambda t: t["id"])
    ]
    assert sum(r["n"] for r in rows.to_pylist()) == summary.transitions
    assert check_path(s3_store, deep=True).ok
    sfs = StoreFS.open(s3_store)
    ledger = sfs.read_bytes(sfs.join("jobs", "s3job", "ledger", f"{summary.run_id}.jsonl")).decode().splitlines()
    assert sorted(json.loads(x)["status"] for x in ledger) == ["done", "done"]
    assert json.loads(sfs.read_bytes(sfs.join("jobs", "s3job", "runs", f"{summary.run_id}.json")))["collected"] == 2
    again = runner.run_job(job, tasks, s3_store, log=lambda m: None)
    assert (again.already_done, again.collected) == (2, 0)
