from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from pipelines.store import ShardWriter, Store, StoreWriter, WriterOptions, read_shard, repair
from pipelines.store.check import check_path
from pipelines.store.manifest import RunManifest
from schemas import StoreError, from_record_batch, to_record_batch
from schemas.arrow import to_shard
from schemas.versions import schema_for, shard_schema_for
from tests.conftest import cli, make_transitions


def shard_files(run_dir):
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith("part-"))


def test_write_and_read_back_everything(store, transitions):
    s = Store(store)
    back = list(s.iter_transitions())
    assert sorted(back, key=lambda t: t.transition_id) == sorted(transitions, key=lambda t: t.transition_id)
    runs = s.runs()
    assert {r.domain for r in runs} == {t.domain for t in transitions}
    for run in runs:
        assert run.manifest.closed
        assert run.manifest.rows == sum(t.domain == run.domain for t in transitions)
        assert all(e.rows <= 20 for e in run.manifest.shards)  # rolled at rows_per_shard
        assert shard_files(store / "raw" / run.domain / "synth-s0") == [e.path for e in run.manifest.shards]
        with open(f"{run.dir}/{run.manifest.shards[0].path}", "rb") as f:
            reader = ipc.open_file(f)
            assert reader.schema.metadata[b"trajforge.schema_version"] == b"2"
            assert reader.get_batch(0).num_rows <= 8  # batches of rows_per_batch
    assert check_path(str(store), deep=True).ok


def test_rolls_by_bytes_and_compresses(tmp_path):
    ts = make_transitions(200, min_obs_bytes=2000, max_obs_bytes=4000)
    with StoreWriter(str(tmp_path / "s"), "synth-s0", WriterOptions(rows_per_batch=10, bytes_per_shard=15_000)) as w:
        w.write_many(ts)
    for run in Store(tmp_path / "s").runs():
        assert len(run.manifest.shards) > 1
        assert all(e.bytes >= 15_000 for e in run.manifest.shards[:-1])  # rolled once over the cap
        raw = sum(len(t.state.text) + len(t.next_state.text) for t in ts if t.domain == run.domain)
        assert run.manifest.bytes < raw / 2  # zstd, with each state stored beside its previous next_state


def test_writer_refuses_wrong_domain_run_and_options(tmp_path, transitions):
    with ShardWriter(str(tmp_path / "s"), "terminal", "r") as w:
        with pytest.raises(Exception, match="domain"):
            w.write(next(t for t in transitions if t.domain != "terminal"))
    with pytest.raises(Exception, match="run_id"):
        ShardWriter(str(tmp_path / "s"), "terminal", "../escape")
    with pytest.raises(Exception, match="rows_per_batch"):
        WriterOptions(rows_per_batch=0)


def test_second_writer_on_the_same_run_is_refused(tmp_path):
    with ShardWriter(str(tmp_path / "s"), "terminal", "r"):
        with pytest.raises(StoreError, match="in use by pid"):
            ShardWriter(str(tmp_path / "s"), "terminal", "r")


def test_reopening_a_run_appends_without_rewriting(store, transitions):
    run_dir = store / "raw" / "web" / "synth-s0"
    before = {p.name: p.read_bytes() for p in run_dir.glob("part-*")}
    more = make_transitions(100, seed=5, domains=("web",), run_id="synth-s0")
    with ShardWriter(str(store), "web", "synth-s0", WriterOptions(rows_per_shard=50)) as w:
        w.write_many(more)
    after = {p.name: p.read_bytes() for p in run_dir.glob("part-*")}
    assert all(after[name] == data for name, data in before.items())
    assert len(after) > len(before)
    ids = [t.transition_id for t in Store(store).iter_transitions()]
    assert len(ids) == len(set(ids)) == 400


WRITER = textwrap.dedent(
    """
    import sys
    from collectors.synth import Synthesizer
    from pipelines.store import StoreWriter, WriterOptions
    gen = Synthesizer(7, min_obs_bytes=300, max_obs_bytes=900, pool_size=200, domains=("terminal",))
    opts = WriterOptions(rows_per_batch=10, rows_per_shard=50)
    with StoreWriter(sys.argv[1], "synth-s7", opts) as w:
        for i, t in enumerate(gen.transitions(100_000), 1):
            w.write(t)
            if i % 10 == 0:
                print(i, flush=True)
    """
)


@pytest.mark.parametrize("kill_after", [35, 120, 260])
def test_kill_9_mid_run_then_repair_loses_only_the_open_batch(tmp_path, kill_after):
    store = tmp_path / "s"
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(store)], stdout=subprocess.PIPE, text=True)
    for line in child.stdout:
        if int(line) >= kill_after:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    run_dir = store / "raw" / "terminal" / "synth-s7"
    manifest = RunManifest.load(Store(store).sfs, str(run_dir))
    finished = {e.path: (run_dir / e.path).read_bytes() for e in manifest.shards}
    assert any(name.endswith(".partial") for name in os.listdir(run_dir))

    report = check_path(str(store))
    assert any(".partial: unfinished shard" in p for p in report.problems)

    reports = repair(str(store))
    assert reports[0].changed
    assert check_path(str(store), deep=True).ok
    for name, data in finished.items():  # nothing finished is rewritten
        assert (run_dir / name).read_bytes() == data
    got = [t.transition_id for t in Store(store).iter_transitions()]
    assert len(got) == len(set(got))  # no duplicate rows
    expected = [
        t.transition_id
        for t in make_transitions(
            len(got) + 200, seed=7, min_obs_bytes=300, max_obs_bytes=900, pool_size=200, domains=("terminal",)
        )
    ]
    assert got == expected[: len(got)]  # a prefix of what was written, in order
    assert len(got) >= kill_after - 10  # at most the open batch (10 rows) lost
    assert not repair(str(store))[0].changed  # a second repair finds nothing to do


def test_repair_lists_a_shard_renamed_before_its_manifest_entry(store):
    run_dir = store / "raw" / "swe" / "synth-s0"
    sfs = Store(store).sfs
    manifest = RunManifest.load(sfs, str(run_dir))
    dropped = manifest.shards.pop()
    manifest.save(sfs, str(run_dir))
    problems = check_path(str(store)).problems
    assert any("not in the manifest" in p for p in problems)
    repair(str(store))
    restored = RunManifest.load(sfs, str(run_dir)).entry(dropped.path)
    assert restored == dropped
    assert check_path(str(store)).ok


def test_repair_keeps_whole_batches_of_a_torn_partial(tmp_path, transitions):
    run_dir = tmp_path / "s" / "raw" / "terminal" / "r"
    run_dir.mkdir(parents=True)
    rows = [t for t in make_transitions(60, domains=("terminal",), run_id="r")]
    path = run_dir / "part-00000.arrow.partial"
    with open(path, "wb") as f:
        w = ipc.new_file(f, shard_schema_for(), options=ipc.IpcWriteOptions(compression="zstd"))
        for i in range(0, 60, 20):
            w.write_batch(to_shard(to_record_batch(rows[i : i + 20])))
        f.flush()
        size = f.tell()
    with open(path, "r+b") as f:
        f.truncate(size - 100)  # the third batch is torn
    (report,) = repair(str(tmp_path / "s"))
    assert report.recovered == [("part-00000.arrow", 40)]
    assert [t.transition_id for t in Store(tmp_path / "s").iter_transitions()] == [t.transition_id for t in rows[:40]]


def test_repair_refuses_a_run_in_use_and_non_stores(store, tmp_path):
    with ShardWriter(str(store), "web", "synth-s0"):
        with pytest.raises(StoreError, match="in use"):
            repair(str(store))
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="not a store"):
        repair(str(tmp_path / "empty"))


def _corrupt(store, how):
    run_dir = store / "raw" / "os" / "synth-s0"
    target = run_dir / "part-00000.arrow"
    if how == "csv":
        target.write_text("a,b\n1,2\n")
    elif how == "parquet":
        pq.write_table(pa.table({"a": [1]}), target)
    elif how == "foreign-arrow":
        feather.write_feather(pa.table({"a": [1]}), target)
    elif how == "wrong-schema":
        schema = pa.schema([("a", pa.int64())], metadata={b"trajforge.schema_version": b"1"})
        with ipc.new_file(str(target), schema) as w:
            w.write_batch(pa.record_batch([pa.array([1])], schema=schema))
    elif how == "truncated":
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    elif how == "missing":
        target.unlink()
    elif how == "manifest":
        (run_dir / "manifest.json").write_text("{not json")
    return target


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("csv", "not an Arrow IPC file"),
        ("parquet", "not an Arrow IPC file"),
        ("foreign-arrow", "foreign Arrow file"),
        ("wrong-schema", "schema does not match"),
        ("truncated", "truncated or corrupt"),
        ("flipped", "part-00000.arrow"),
        ("missing", "listed in the manifest but missing"),
        ("manifest", "unreadable run manifest"),
    ],
)
def test_bad_files_are_named_in_one_line_and_do_not_stop_the_rest(store, how, message):
    target = _corrupt(store, how)
    report = check_path(str(store))
    assert any(message in p for p in report.problems), report.problems
    assert all(str(target.parent) in p for p in report.problems)
    good_shards = len(list(store.glob("raw/*/*/part-*.arrow"))) - (0 if how == "missing" else 1)
    assert report.shards_ok >= good_shards - (len(list(target.parent.glob("part-*"))) if how == "manifest" else 0)

    proc = cli("shards", "validate", str(store), check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr
    assert all(line.startswith(str(store)) for line in proc.stderr.strip().splitlines())


@pytest.mark.parametrize("how", ["csv", "foreign-arrow", "truncated", "wrong-schema"])
def test_single_shard_validation_and_queries_skip_bad_shards(store, how, transitions):
    target = _corrupt(store, how)
    proc = cli("shards", "validate", str(target), check=False)
    assert proc.returncode == 2 and str(target) in proc.stderr and "Traceback" not in proc.stderr
    good = cli("shards", "validate", str(store / "raw" / "web" / "synth-s0" / "part-00000.arrow"))
    assert "1 shards ok" in good.stdout
    q = cli("query", "SELECT count(*) AS n FROM transitions", "--store", str(store), "--format", "json")
    lost = RunManifest.load(Store(store).sfs, str(target.parent)).entry(target.name).rows
    assert json.loads(q.stdout) == {"n": len(transitions) - lost}
    assert f"skipped {target}" in q.stderr


def test_validate_deep_finds_bad_records(tmp_path, transitions):
    from dataclasses import replace

    bad = [replace(transitions[0], content_hash="f" * 32)]
    with ShardWriter(str(tmp_path / "s"), bad[0].domain, "synth-s0") as w:
        w.write_many(bad)
    assert check_path(str(tmp_path / "s")).ok  # the file is fine
    problems = check_path(str(tmp_path / "s"), deep=True).problems
    assert len(problems) == 1 and "row 0: content_hash" in problems[0]


def test_read_batches_are_current_schema(store):
    for batch in Store(store).iter_batches():
        assert batch.schema.equals(schema_for(), check_metadata=False)
        assert len(list(from_record_batch(batch))) == batch.num_rows


def test_old_open_shards_are_finished_so_long_runs_become_visible(tmp_path):
    import time

    ts = make_transitions(40, domains=("terminal",))
    with ShardWriter(str(tmp_path / "s"), "terminal", "synth-s0", WriterOptions(rows_per_batch=10, seconds_per_shard=0.2)) as w:
        w.write_many(ts[:20])
        time.sleep(0.3)
        w.write_many(ts[20:])
        assert len(Store(tmp_path / "s").runs()[0].manifest.shards) >= 1  # visible while still writing
    assert len(Store(tmp_path / "s").runs()[0].manifest.shards) >= 2


def test_an_episode_is_one_batch_never_split(tmp_path):
    ts = make_transitions(30, domains=("terminal",))
    with ShardWriter(str(tmp_path / "s"), "terminal", "synth-s0", WriterOptions(rows_per_shard=5)) as w:
        w.write_episode(ts[:12])
    (entry,) = Store(tmp_path / "s").runs()[0].manifest.shards
    assert entry.rows == 12


def test_shards_roll_at_trajectory_boundaries_where_they_can(tmp_path):
    ts = make_transitions(400)
    with StoreWriter(str(tmp_path / "s"), "synth-s0", WriterOptions(rows_per_batch=64, rows_per_shard=40)) as w:
        w.write_many(ts)
    for run in Store(tmp_path / "s").runs():
        assert len(run.manifest.shards) > 1 and all(e.rows <= 40 for e in run.manifest.shards)
        firsts = [next(read_shard(Store(tmp_path / "s").sfs, p)).column("step")[0].as_py() for p in run.shard_paths()]
        assert firsts == [0] * len(firsts)  # every shard starts a trajectory: no trajectory spans two shards
    assert sum(1 for _ in Store(tmp_path / "s").iter_transitions()) == 400
