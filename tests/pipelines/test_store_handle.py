"""The store handle: ``Store.open`` once at the edge, one layout naming every path of a
store, ``trajectory_ids`` without the query views, and ``publish_tree`` (files, then the
manifest as the commit) on local disk and on a real S3 server."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from pipelines.query import connect
from pipelines.store import Layout, Store, StoreFS, StoreWriter, WriterOptions, publish_tree
from pipelines.store.layout import run_dir
from pipelines.store.manifest import RunManifest
from schemas.errors import StoreError
from tests.conftest import make_transitions


def test_open_returns_the_same_handle_and_checks_existence(store, tmp_path):
    handle = Store.open(str(store))
    assert Store.open(handle) is handle
    assert handle.uri == str(store) and handle.sfs.root == str(store) and handle.layout == Layout(str(store))
    with pytest.raises(StoreError, match="no such store"):
        Store.open(str(tmp_path / "missing"))
    new = Store.open(str(tmp_path / "new"), must_exist=False)
    assert not new.exists() and new.trajectory_ids() == set()
    with pytest.raises(StoreError, match="no such store"):
        Store.open(new)  # a handle is checked like a path when the store must exist


def test_layout_names_every_tree():
    lay = Layout("/s")
    assert lay.run_dir("raw", "web", "r1") == "/s/raw/web/r1"
    assert lay.run_dir("curated", "web", "c1") == "/s/curated/c1/web"
    assert lay.run_dir("rejected", "os", "c1") == "/s/rejected/c1/os"
    assert Layout.manifest("/s/raw/web/r1") == "/s/raw/web/r1/manifest.json"
    assert Layout.run_lock("/s/raw/web/r1") == "/s/raw/web/r1/.lock"
    assert lay.curation_attributes("c1", "rejected") == "/s/rejected/c1/attributes.parquet"
    assert lay.curation_report("c1") == "/s/curated/c1/report.json"
    assert lay.index_root() == "/s/curated/_index"
    assert (lay.index_dir("c1"), lay.index_marker("c1")) == ("/s/curated/_index/c1", "/s/curated/_index/c1.json")
    assert lay.job_dir("j") == "/s/jobs/j"
    assert (lay.job_lock("j"), lay.job_lock("j", (1, 4))) == ("/s/jobs/j/.lock", "/s/jobs/j/.lock-s1of4")
    assert (lay.job_ledger("j"), lay.job_ledger("j", "r1")) == ("/s/jobs/j/ledger.jsonl", "/s/jobs/j/ledger/r1.jsonl")
    assert lay.job_ledger_dir("j") == "/s/jobs/j/ledger"
    assert lay.job_run_summary("j", "r1") == "/s/jobs/j/runs/r1.json" and lay.job_runs_dir("j") == "/s/jobs/j/runs"
    assert lay.job_staging("j") == "/s/jobs/j/staging"
    assert (lay.releases_root(), lay.release_dir("demo")) == ("/s/releases", "/s/releases/demo")
    assert lay.release_dir("demo", "v1") == "/s/releases/demo/v1"
    assert lay.training_run("sft") == "/s/runs/sft"


def test_layout_of_an_object_store_is_rooted_at_its_bucket_prefix():
    sfs = StoreFS(pafs.S3FileSystem(anonymous=True, region="us-east-1"), "bucket/store")
    lay = Layout(sfs.root)
    assert lay.run_dir("raw", "os", "r1") == run_dir(sfs, "raw", "os", "r1") == "bucket/store/raw/os/r1"
    assert sfs.uri(lay.release_dir("demo", "v1")) == "s3://bucket/store/releases/demo/v1"
    assert sfs.uri(lay.job_ledger("j", "r1")) == "s3://bucket/store/jobs/j/ledger/r1.jsonl"


def _old_done(store: Store, job_id: str) -> set[str]:
    """What ``done_trajectories`` answered before ``Store.trajectory_ids``: a query of the views."""
    con = connect(store, release_stages=())
    rows = con.execute("SELECT DISTINCT trajectory_id FROM transitions WHERE provenance.job_id = ?", [job_id]).fetchall()
    return {r[0] for r in rows}


def test_trajectory_ids_answer_what_the_query_views_answer(tmp_path):
    path = tmp_path / "store"
    options = WriterOptions(rows_per_batch=8, rows_per_shard=20)
    for seed in (1, 2):  # two runs of two jobs (synth-1, synth-2)
        with StoreWriter(str(path), f"synth-s{seed}", options) as w:
            w.write_many(make_transitions(150, seed=seed))
    store = Store.open(str(path))
    everything = {r[0] for r in connect(store).execute("SELECT DISTINCT trajectory_id FROM transitions").fetchall()}
    assert store.trajectory_ids() == everything and len(everything) > 10
    for job_id in ("synth-1", "synth-2", "nothing"):
        assert store.trajectory_ids(job_id=job_id) == _old_done(store, job_id)
    one, two = store.trajectory_ids(job_id="synth-1"), store.trajectory_ids(job_id="synth-2")
    assert one and two and one.isdisjoint(two)
    sql = "SELECT DISTINCT trajectory_id FROM transitions WHERE domain = 'web'"
    web = {r[0] for r in connect(store).execute(sql).fetchall()}
    assert store.trajectory_ids(domain="web") == web
    assert store.trajectory_ids(run_id="synth-s2") == store.trajectory_ids(job_id="synth-2")


def _staged_run(tmp_path, name: str = "stage") -> tuple[str, list[str]]:
    """A finished run folder written by the store's writer in a local stage."""
    stage = tmp_path / name
    with StoreWriter(str(stage), "synth-s4", WriterOptions(rows_per_batch=4, rows_per_shard=8)) as w:
        for t in make_transitions(120, seed=4):
            if t.domain == "web":
                w.write(t)
    folder = stage / "raw" / "web" / "synth-s4"
    return str(folder), sorted(p.name for p in folder.iterdir() if p.name.startswith("part-"))


def test_publish_tree_renames_a_local_folder_once(tmp_path):
    staged, parts = _staged_run(tmp_path)
    store = Store.open(str(tmp_path / "store"), must_exist=False)
    dest = store.layout.run_dir("raw", "web", "synth-s4")
    assert publish_tree(store.sfs, staged, dest)
    assert [r.run_id for r in store.runs()] == ["synth-s4"] and RunManifest.load(store.sfs, dest).shards
    again, _ = _staged_run(tmp_path, "stage2")
    assert not publish_tree(store.sfs, again, dest)  # an earlier attempt won: nothing replaced
    assert store.trajectory_ids() and len(parts) > 1


def test_a_publish_killed_before_its_manifest_leaves_no_visible_tree(tmp_path, s3_store, monkeypatch):
    staged, parts = _staged_run(tmp_path)
    store = Store.open(s3_store, must_exist=False, on_warning=lambda m: None)
    dest = store.layout.run_dir("raw", "web", "synth-s4")
    publish = StoreFS.publish

    def killed_at_the_manifest(self, local_file, path):
        if path.endswith("/manifest.json"):
            raise KeyboardInterrupt("killed")
        publish(self, local_file, path)

    monkeypatch.setattr(StoreFS, "publish", killed_at_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        publish_tree(store.sfs, staged, dest)
    monkeypatch.setattr(StoreFS, "publish", publish)
    assert sorted(p.rsplit("/", 1)[1] for p in store.sfs.files(dest)) == parts  # the files went up, no manifest
    assert store.runs() == [] and store.trajectory_ids() == set()  # so readers see no run
    assert publish_tree(store.sfs, staged, dest, clear=True)  # the local folder was kept: the rerun commits it
    assert [r.run_id for r in store.runs()] == ["synth-s4"] and store.trajectory_ids()
    assert not publish_tree(store.sfs, _staged_run(tmp_path, "stage2")[0], dest)  # committed: refused
