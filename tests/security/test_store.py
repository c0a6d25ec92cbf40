"""Hostile stores (issue 21): manifests naming files outside their run folder, garbage
manifests, corrupt, truncated and foreign shard files, lost manifests.

Readers (``run_query``, ``trajforge query``, ``stats``) leave out the bad run or shard
with one warning line naming it and answer for the rest; ``shards validate`` names every
problem and exits 2; ``shards repair`` re-lists shards only after verifying them. A valid
shard of another run ("planted") sits outside the store: the manifests point at it with its
true size and sha256, so only confinement keeps its rows out of the answers.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from pipelines.query import run_query
from pipelines.store import ShardWriter, Store, StoreWriter, WriterOptions, repair
from pipelines.store import reader as store_reader
from pipelines.store import verified as store_verified
from pipelines.store.check import check_path
from pipelines.store.fs import LOCAL, StoreFS
from pipelines.store.manifest import RunManifest, ShardEntry
from schemas.errors import StoreError
from tests.conftest import cli, make_transitions

COUNT = "SELECT count(*) AS n, count(*) FILTER (WHERE provenance.run_id = 'planted') AS planted FROM transitions"


TOTAL = 300


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    """A fresh verified-shard record per test (CLI subprocesses inherit it)."""
    monkeypatch.setenv("TRAJFORGE_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A store of one run over every domain (a run folder each, several shards), and outside
    it a valid shard of run 'planted'; written once, copied by each test."""
    root = tmp_path_factory.mktemp("sec-store")
    with StoreWriter(str(root / "store"), "synth-s0", WriterOptions(rows_per_batch=8, rows_per_shard=20)) as w:
        w.write_many(make_transitions(TOTAL))
    with ShardWriter(str(root / "outside"), "os", "planted") as w:
        w.write_many(make_transitions(12, seed=9, domains=("os",), run_id="planted"))
    return root


@pytest.fixture
def store(built, tmp_path) -> Path:
    shutil.copytree(built / "store", tmp_path / "store")
    return tmp_path / "store"


@pytest.fixture
def planted(built) -> tuple[Path, ShardEntry]:
    """The planted shard outside the store, and its true manifest entry."""
    run_dir = built / "outside" / "raw" / "os" / "planted"
    (entry,) = RunManifest.load(LOCAL, str(run_dir)).shards
    return run_dir / entry.path, entry


# -- attacks: each damages one run folder, returns (the file to be named, rows lost) ------------
Attack = Callable[[Path, tuple[Path, ShardEntry]], tuple[Path, int]]


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _save(run_dir: Path, body: dict) -> None:
    (run_dir / "manifest.json").write_text(json.dumps(body))


def _run_rows(run_dir: Path) -> int:
    return sum(s["rows"] for s in _manifest(run_dir)["shards"])


def _entry_pointing_at(planted: tuple[Path, ShardEntry], name: str) -> dict:
    return {**asdict(planted[1]), "path": name}


def listing_outside(how: str) -> Attack:
    """The manifest lists the planted shard by a path leading out, with its true size and hash."""

    def attack(run_dir: Path, planted: tuple[Path, ShardEntry]) -> tuple[Path, int]:
        lost = _run_rows(run_dir)
        body = _manifest(run_dir)
        name = os.path.relpath(planted[0], run_dir) if how == "dotdot" else str(planted[0])
        body["shards"].append(_entry_pointing_at(planted, name))
        body.pop("rows"), body.pop("bytes")
        _save(run_dir, body)
        return run_dir / "manifest.json", lost

    return attack


def symlinked_shard(run_dir: Path, planted: tuple[Path, ShardEntry]) -> tuple[Path, int]:
    """A listed shard is a symbolic link to the planted shard; its entry matches the link's target."""
    body = _manifest(run_dir)
    lost = body["shards"][0]["rows"]
    target = run_dir / body["shards"][0]["path"]
    target.unlink()
    target.symlink_to(planted[0])
    body["shards"][0] = _entry_pointing_at(planted, target.name)
    body.pop("rows"), body.pop("bytes")
    _save(run_dir, body)
    return target, lost


def symlinked_manifest(run_dir: Path, planted: tuple[Path, ShardEntry]) -> tuple[Path, int]:
    lost = _run_rows(run_dir)
    (run_dir / "manifest.json").unlink()
    (run_dir / "manifest.json").symlink_to(planted[0].parent / "manifest.json")
    return run_dir / "manifest.json", lost


def garbage_manifest(content: bytes | Callable[[dict], dict]) -> Attack:
    def attack(run_dir: Path, planted: tuple[Path, ShardEntry]) -> tuple[Path, int]:
        lost = _run_rows(run_dir)
        data = content if isinstance(content, bytes) else json.dumps(content(_manifest(run_dir))).encode()
        (run_dir / "manifest.json").write_bytes(data)
        return run_dir / "manifest.json", lost

    return attack


def _edit_first_entry(**change) -> Callable[[dict], dict]:
    def edit(body: dict) -> dict:
        body["shards"][0] = {**body["shards"][0], **change}
        return body

    return edit


def special_file(which: str) -> Attack:
    """A listed shard, or the manifest, is a FIFO: opening it would hang a reader."""

    def attack(run_dir: Path, planted: tuple[Path, ShardEntry]) -> tuple[Path, int]:
        body = _manifest(run_dir)
        target = run_dir / ("manifest.json" if which == "manifest" else body["shards"][0]["path"])
        lost = _run_rows(run_dir) if which == "manifest" else body["shards"][0]["rows"]
        target.unlink()
        os.mkfifo(target)
        return target, lost

    return attack


def damaged_shard(how: str) -> Attack:
    def attack(run_dir: Path, planted: tuple[Path, ShardEntry]) -> tuple[Path, int]:
        entry = _manifest(run_dir)["shards"][0]
        target = run_dir / entry["path"]
        data = bytearray(target.read_bytes())
        if how == "truncated":
            data = data[: len(data) // 2]
        else:  # one byte flipped: in a compressed buffer, or in the footer
            data[len(data) // 2 if how == "flip-middle" else len(data) - 40] ^= 0xFF
        target.write_bytes(bytes(data))
        return target, entry["rows"]

    return attack


def deleted_manifest(run_dir: Path, planted: tuple[Path, ShardEntry]) -> tuple[Path, int]:
    lost = _run_rows(run_dir)
    (run_dir / "manifest.json").unlink()
    return run_dir / "part-00000.arrow", lost


ATTACKS: dict[str, Attack] = {
    "manifest-dotdot-path": listing_outside("dotdot"),
    "manifest-absolute-path": listing_outside("absolute"),
    "symlinked-shard": symlinked_shard,
    "symlinked-manifest": symlinked_manifest,
    "manifest-not-json": garbage_manifest(b"{not json"),
    "manifest-binary": garbage_manifest(bytes(range(256)) * 4),
    "manifest-empty": garbage_manifest(b""),
    "manifest-json-list": garbage_manifest(b"[1, 2, 3]"),
    "manifest-deep-nesting": garbage_manifest(b"[" * 100_000),
    "manifest-wrong-type": garbage_manifest(_edit_first_entry(rows="20")),
    "manifest-bool-for-int": garbage_manifest(_edit_first_entry(bytes=True)),
    "manifest-bad-sha": garbage_manifest(_edit_first_entry(sha256="x" * 64)),
    "manifest-shards-not-list": garbage_manifest(lambda b: {**b, "shards": {"a": 1}}),
    "manifest-missing-field": garbage_manifest(lambda b: {k: v for k, v in b.items() if k != "created_at"}),
    "manifest-unknown-field": garbage_manifest(lambda b: {**b, "evil\nkey": 1}),
    "manifest-listed-twice": garbage_manifest(lambda b: {**b, "shards": b["shards"] + b["shards"][:1], "rows": None}),
    "manifest-wrong-totals": garbage_manifest(lambda b: {**b, "rows": b["rows"] + 1}),
    "manifest-fifo": special_file("manifest"),
    "shard-fifo": special_file("shard"),
    "shard-flip-middle": damaged_shard("flip-middle"),
    "shard-flip-end": damaged_shard("flip-end"),
    "shard-truncated": damaged_shard("truncated"),
    "deleted-manifest": deleted_manifest,
}


def _warning_lines(err: str) -> list[str]:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert all(line.startswith("warning: ") for line in lines), err
    return lines


@pytest.mark.parametrize("attack", ATTACKS)
def test_readers_skip_the_bad_file_and_answer_for_the_rest(store, planted, capsys, attack):
    run_dir = store / "raw" / "os" / "synth-s0"
    bad, lost = ATTACKS[attack](run_dir, planted)
    assert lost > 0

    assert run_query(COUNT, str(store)).to_pylist() == [{"n": TOTAL - lost, "planted": 0}]
    lines = _warning_lines(capsys.readouterr().err)
    assert any(str(bad) in line for line in lines), lines

    s = Store(store, on_warning=lambda m: None)
    assert sum(sh.entry.rows for sh in s.readable_shards()) == TOTAL - lost
    assert any(str(bad) in w for w in s.warnings) and all("\n" not in w for w in s.warnings)

    report = check_path(str(store))
    assert not report.ok and any(str(bad) in p for p in report.problems), report.problems
    assert all("\n" not in p for p in report.problems)


def test_cli_query_stats_and_validate_name_every_bad_file(store, planted):
    """One store, a different attack in each run folder: the CLI answers for the rest."""
    plan = {
        "os": "manifest-dotdot-path",
        "web": "symlinked-shard",
        "swe": "manifest-binary",
        "search": "shard-flip-middle",
        "terminal": "shard-truncated",
        "mcp": "deleted-manifest",
        "android": "shard-flip-end",
    }
    bad, lost = {}, {}
    for domain, attack in plan.items():
        bad[domain], lost[domain] = ATTACKS[attack](store / "raw" / domain / "synth-s0", planted)
    left = TOTAL - sum(lost.values())

    q = cli("query", COUNT, "--store", str(store), "--format", "json")
    assert json.loads(q.stdout) == {"n": left, "planted": 0}
    lines = _warning_lines(q.stderr)
    assert all(any(str(path) in line for line in lines) for path in bad.values()), lines

    st = cli("stats", "--store", str(store), "--json")
    stats = json.loads(st.stdout)
    assert stats["transitions"] == left and sum(r[2] for r in stats["by_run"]) == left
    unlisted = [str(p) for d in ("os", "swe", "mcp") for p in (store / "raw" / d / "synth-s0").glob("part-*.arrow")]
    assert sorted(stats["unlisted"]) == sorted(unlisted)  # their manifest refused, or lost
    lines = _warning_lines(st.stderr)
    assert all(any(str(path) in line for line in lines) for path in bad.values()), lines

    v = cli("shards", "validate", str(store), check=False)
    assert v.returncode == 2 and "Traceback" not in v.stderr
    problems = v.stderr.strip().splitlines()
    assert all(line.startswith(str(store)) for line in problems), problems
    assert all(any(str(path) in line for line in problems) for path in bad.values()), problems
    assert f"{len(problems)} problems" in v.stdout

    # repair rebuilds the refused manifests (os, swe) and the lost one (mcp) from their
    # verified shards; the damaged shards stay out
    r = cli("shards", "repair", str(store))
    assert "Traceback" not in r.stderr and r.stdout.count("refused manifest.json kept as") == 2
    damaged = sum(lost[d] for d in ("web", "search", "terminal", "android"))
    assert run_query(COUNT, str(store)).to_pylist() == [{"n": TOTAL - damaged, "planted": 0}]


def _corrupt_a_text(path) -> None:
    """Flip a byte of an observation text in a shard (bit rot): a byte inside a compressed
    buffer that changes the texts or breaks the read. Padding between buffers, or a field
    no check covers, would change nothing a reader can see, so those bytes are passed over."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    data = bytearray(path.read_bytes())
    texts = ipc.open_file(pa.py_buffer(bytes(data))).read_all().column("observation_texts")
    pos = len(data) // 2
    while (pos := data.find(b"\x28\xb5\x2f\xfd", pos + 1)) > 0:  # each zstd frame after the middle
        trial = bytearray(data)
        trial[pos + 12] ^= 0xFF
        try:
            if not ipc.open_file(pa.py_buffer(bytes(trial))).read_all().column("observation_texts").equals(texts):
                break
        except (pa.ArrowException, OSError):
            break
    assert pos > 0, "no byte of the texts found"
    path.write_bytes(bytes(trial))


def test_repair_relists_the_shards_of_a_lost_manifest_after_verifying_them(store):
    run_dir = store / "raw" / "swe" / "synth-s0"
    before = RunManifest.load(LOCAL, str(run_dir))
    (run_dir / "manifest.json").unlink()
    _corrupt_a_text(run_dir / "part-00001.arrow")  # this one fails verification: reported, not listed
    (run_dir / "part-00009.arrow").symlink_to(store / "raw" / "web" / "synth-s0" / "part-00000.arrow")

    stats = Store(store, on_warning=lambda m: None)
    assert len(stats.unlisted()) == len(before.shards) + 1

    (report,) = [r for r in repair(str(store)) if r.run_dir == str(run_dir)]
    assert report.listed == [e.path for e in before.shards if e.path != "part-00001.arrow"]
    assert any("part-00001.arrow" in b for b in report.broken)
    assert any("part-00009.arrow" in b and "outside" in b for b in report.broken)
    after = RunManifest.load(LOCAL, str(run_dir))
    assert after.shards == [e for e in before.shards if e.path != "part-00001.arrow"]  # rows, bytes, sha, dates
    lost = before.entry("part-00001.arrow").rows
    assert run_query("SELECT count(*) AS n FROM transitions", str(store)).to_pylist() == [{"n": TOTAL - lost}]


def test_repair_rebuilds_a_garbage_manifest_and_keeps_it_aside(store):
    run_dir = store / "raw" / "web" / "synth-s0"
    before = RunManifest.load(LOCAL, str(run_dir))
    (run_dir / "manifest.json").write_bytes(b"\x00\x01garbage")
    (report,) = [r for r in repair(str(store)) if r.run_dir == str(run_dir)]
    assert report.replaced and report.listed == [e.path for e in before.shards]
    assert [p.read_bytes() for p in run_dir.glob("manifest.json.refused-*")] == [b"\x00\x01garbage"]
    assert RunManifest.load(LOCAL, str(run_dir)).shards == before.shards
    assert check_path(str(store)).ok
    assert run_query("SELECT count(*) AS n FROM transitions", str(store)).to_pylist() == [{"n": TOTAL}]


def test_a_writer_refuses_to_append_to_a_run_with_a_refused_manifest(store):
    run_dir = store / "raw" / "web" / "synth-s0"
    (run_dir / "manifest.json").write_text("[]")
    with pytest.raises(StoreError, match=r"manifest\.json: refused run manifest"):
        ShardWriter(str(store), "web", "synth-s0")


def test_a_run_folder_leading_outside_the_store_is_not_read(store, planted, capsys):
    (store / "raw" / "os" / "elsewhere").symlink_to(planted[0].parent)
    assert run_query(COUNT, str(store)).to_pylist() == [{"n": TOTAL, "planted": 0}]
    assert any("os/elsewhere" in line and "outside" in line for line in _warning_lines(capsys.readouterr().err))
    report = check_path(str(store))
    assert any("os/elsewhere" in p for p in report.problems) and report.rows == TOTAL
    lines = [line for r in repair(str(store)) for line in r.lines()]
    assert any("os/elsewhere" in line and "not read" in line for line in lines)
    assert not (planted[0].parent / "manifest.json.refused").exists() and len(list(planted[0].parent.iterdir())) == 3


def test_verified_shards_are_remembered_and_a_changed_file_is_verified_again(store, monkeypatch):
    monkeypatch.setattr(store_verified, "RACY_NS", 0)  # the fixture's files were written just now
    checked: list[str] = []
    real = store_reader.verify_shard
    monkeypatch.setattr(store_reader, "verify_shard", lambda sfs, path, entry: (checked.append(path), real(sfs, path, entry))[1])
    shards = len(Store(store).readable_shards())
    assert len(checked) == shards
    checked.clear()
    assert len(Store(store).readable_shards()) == shards and checked == []  # remembered: not read again

    target = store / "raw" / "os" / "synth-s0" / "part-00000.arrow"
    st = target.stat()
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime; the ctime still moves
    s = Store(store, on_warning=lambda m: None)
    assert len(s.readable_shards()) == shards - 1 and checked == [str(target)]
    assert any(str(target) in w for w in s.warnings)


def test_object_store_paths_are_confined_by_their_text():
    """s3:// and gs:// have no symbolic links: the check is on the path itself."""
    sfs = StoreFS(pafs.S3FileSystem(anonymous=True, region="us-east-1"), "bucket/store")
    run_dir = "bucket/store/raw/os/r1"
    assert sfs.confine(run_dir, "part-00000.arrow") == f"{run_dir}/part-00000.arrow"
    assert sfs.confine(sfs.root, "raw/os/r1") == run_dir
    for name in (
        "../r2/part-00000.arrow",
        "../../../../other/raw/os/r/part-00000.arrow",
        "/bucket/x.arrow",
        "a/../../x.arrow",
        "..",
        "part-00000.arrow/../../x",
    ):
        with pytest.raises(StoreError, match="lies outside"):
            sfs.confine(run_dir, name)


def test_curation_attribute_files_must_be_parquet_inside_their_folder(store, tmp_path):
    pq.write_table(pa.table({"a": [1]}), tmp_path / "outside.parquet")
    for cid in ("c1", "c2", "c3"):
        (store / "curated" / cid).mkdir(parents=True)
    pq.write_table(pa.table({"a": [1]}), store / "curated" / "c1" / "attributes.parquet")
    (store / "curated" / "c2" / "attributes.parquet").symlink_to(tmp_path / "outside.parquet")
    (store / "curated" / "c3" / "attributes.parquet").write_bytes(b"not parquet")
    s = Store(store, on_warning=lambda m: None)
    assert s.curation_attributes("curated") == [("c1", str(store / "curated" / "c1" / "attributes.parquet"))]
    assert [w.split("/curated/")[1][:2] for w in s.warnings] == ["c2", "c3"]
