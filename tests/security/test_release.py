"""Releases and training inputs (issue 21): every reader of a release hashes the files it
reads against the manifest and refuses a changed, missing or extra file, a manifest that
is garbage or points outside the release, and a store or release that is not there, with
one line naming it (exit 2 on the CLI, a typed error in Python), never a traceback."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.query import run_query
from pipelines.release.build import create_release
from pipelines.release.config import MixtureConfig, load_mixture
from pipelines.release.inspect import diff, export_agentworldbench, list_releases, verify
from pipelines.release.manifest import load, open_release
from pipelines.store import Store
from schemas.errors import QueryError, ShardError, StoreError, TrajforgeError
from tests.conftest import cli
from tests.pipelines.release.test_release import IN_MEMORY, curated_store
from training import assets
from training.evaluate import _load_records

CHANGED = "changed (sha256 differs from the manifest)"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A small store with release wm/1 (every stage, several files), built once."""
    root = tmp_path_factory.mktemp("sec-release")
    store = curated_store(root / "s", n=200)
    cfg = load_mixture("examples/mixtures/default.yaml", store)
    cfg = MixtureConfig.model_validate({**cfg.model_dump(), "splits": {"validation": 0.15, "test": 0.3}})
    create_release(cfg, store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    return Path(store)


@pytest.fixture
def store(built, tmp_path) -> Path:
    """A copy of the built store's releases, to damage."""
    shutil.copytree(built / "releases", tmp_path / "s" / "releases")
    return tmp_path / "s"


def release(store: Path) -> Path:
    return store / "releases" / "wm" / "1"


def first(store: Path, pattern: str) -> Path:
    return sorted(release(store).glob(pattern))[0]


def flip(path: Path) -> Path:
    """One bit flipped in the middle of the file: same size, other content."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    return path


def one_line_error(proc, *names: str) -> str:
    """The CLI refused with exit 2 and one line naming each of ``names``."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert all(n in lines[0] for n in names), (names, lines[0])
    return lines[0]


def refused(call: Callable[[], object], kind: type[TrajforgeError], *names: str) -> str:
    """The Python API refused with a typed one-line error naming each of ``names``."""
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and all(n in message for n in names), (names, message)
    return message


def rewrite_manifest(store: Path, change: Callable[[dict], object]) -> Path:
    path = release(store) / "manifest.json"
    body = json.loads(path.read_text())
    change(body)
    path.write_text(json.dumps(body, indent=1))
    return path


def rehash(store: Path, target: Path, rows: int | None = None) -> None:
    """Record ``target``'s new content in the manifest, as a forger would."""
    rel = str(target.relative_to(release(store)))

    def change(body: dict) -> None:
        (entry,) = [f for f in body["files"] if f["path"] == rel]
        entry.update(sha256=hashlib.sha256(target.read_bytes()).hexdigest(), bytes=target.stat().st_size)
        if rows is not None:
            entry["rows"] = rows

    rewrite_manifest(store, change)


def test_verify_names_a_flipped_bit_in_every_kind_of_file(store):
    kinds = ["data/cpt/*.parquet", "data/sft/*.parquet", "data/rl/*.parquet", "README.md", "lineage.json", "*.png"]
    flipped = [flip(first(store, k)) for k in kinds]
    proc = cli("release", "verify", str(release(store)), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert sorted(proc.stderr.strip().splitlines()) == sorted(f"{p}: {CHANGED}" for p in flipped)
    assert f"{len(flipped)} problems" in proc.stdout
    assert sorted(verify(release(store))) == sorted(f"{p}: {CHANGED}" for p in flipped)


@pytest.mark.parametrize("stage", ["cpt", "sft", "rl"])
def test_training_refuses_a_flipped_bit_in_the_files_it_reads(store, stage):
    target = flip(first(store, f"data/{stage}/train-*.parquet"))
    refused(lambda: assets.open_release(str(store), "wm/1", stage, "train"), ShardError, str(target), CHANGED)
    other = "sft" if stage != "sft" else "cpt"  # files it does not read are not hashed: the other stage still opens
    assert assets.open_release(str(store), "wm/1", other, "train").files(other, "train")


def test_eval_export_and_diff_refuse_a_flipped_test_file(store, tmp_path):
    rl, sft = flip(first(store, "data/rl/test-*.parquet")), flip(first(store, "data/sft/test-*.parquet"))
    refused(lambda: _load_records(str(store), "wm/1", "test"), ShardError, str(rl), CHANGED)
    out = tmp_path / "awb"
    one_line_error(cli("release", "export", str(release(store)), "--out", str(out), check=False), str(sft), CHANGED)
    assert not list(out.glob("*.jsonl"))  # checked before anything is written
    refused(lambda: export_agentworldbench(release(store), out), ShardError, str(sft))
    one_line_error(cli("release", "diff", str(release(store)), str(release(store)), check=False), "changed")
    refused(lambda: diff(release(store), release(store)), ShardError, CHANGED)


def test_export_checks_only_what_it_reads_and_prints_where_each_file_went(store, tmp_path):
    flip(release(store) / "README.md")  # the card: verify's business, not the exporter's
    out = tmp_path / "awb"
    proc = cli("release", "export", str(release(store)), "--out", str(out))
    written = sorted(out.glob("*.jsonl"))
    assert written and [line.split(":")[0] for line in proc.stdout.splitlines()] == [str(p) for p in written]


def test_missing_extra_and_truncated_files_are_refused_by_every_reader(store, tmp_path):
    sft_train = first(store, "data/sft/train-*.parquet")
    extra = sft_train.with_name("train-00099-of-00099.parquet")  # a glob over data/sft/train-* would have read it
    shutil.copy(sft_train, extra)
    refused(lambda: assets.open_release(str(store), "wm/1", "sft", "train"), ShardError, str(extra), "extra file")
    one_line_error(cli("release", "export", str(release(store)), "--out", str(tmp_path / "o"), check=False), str(extra))
    extra.unlink()
    lineage = release(store) / "lineage.json"
    lineage.unlink()
    refused(lambda: assets.open_release(str(store), "wm/1", "sft", "train"), ShardError, str(lineage), "missing")
    refused(lambda: open_release(release(store)), ShardError, str(lineage), "missing")
    cpt = first(store, "data/cpt/*.parquet")
    cpt.write_bytes(cpt.read_bytes()[:-100])  # a truncated file: refused from its size alone
    problems = verify(release(store))
    assert f"{lineage}: missing" in problems and f"{cpt}: {CHANGED}" in problems


def _entry(body: dict, stage: str) -> dict:
    return next(f for f in body["files"] if f.get("stage") == stage)


def _outside(store: Path) -> tuple[Path, str]:
    """A file beside the release (a secret), and its sha256 as a forger would record it."""
    secret = store / "secret.txt"
    secret.write_text("api-key=do-not-read\n")
    return secret, hashlib.sha256(secret.read_bytes()).hexdigest()


def _point(store: Path, path: str) -> None:
    secret, digest = _outside(store)

    def change(body: dict) -> None:
        body["files"].append({"path": path, "sha256": digest, "bytes": secret.stat().st_size})

    rewrite_manifest(store, change)


MANIFEST_ATTACKS: dict[str, Callable[[Path], object]] = {
    "garbage bytes": lambda s: (release(s) / "manifest.json").write_bytes(b"\x00\xff\xfe garbage \x9c" * 40),
    "empty": lambda s: (release(s) / "manifest.json").write_bytes(b""),
    "cut in half": lambda s: (release(s) / "manifest.json").write_bytes((release(s) / "manifest.json").read_bytes()[:900]),
    "a JSON list": lambda s: (release(s) / "manifest.json").write_text("[1, 2, 3]"),
    "nested 100,000 deep": lambda s: (release(s) / "manifest.json").write_text("[" * 100_000 + "]" * 100_000),
    "another format": lambda s: rewrite_manifest(s, lambda b: b.update(format="trajforge.release/9")),
    "files not a list": lambda s: rewrite_manifest(s, lambda b: b.update(files={"a": 1})),
    "a ../ path": lambda s: _point(s, "../../secret.txt"),
    "an absolute path": lambda s: _point(s, str(s / "secret.txt")),
    "a ../ inside a path": lambda s: _point(s, "data/../../../secret.txt"),
    "a newline in a path": lambda s: _point(s, "data/x\nerror: forged line"),
    "a backslash path": lambda s: _point(s, "..\\..\\secret.txt"),
    "sha256 not hex": lambda s: rewrite_manifest(s, lambda b: _entry(b, "sft").update(sha256="z" * 64)),
    "bytes as text": lambda s: rewrite_manifest(s, lambda b: _entry(b, "sft").update(bytes="12")),
    "negative bytes": lambda s: rewrite_manifest(s, lambda b: _entry(b, "sft").update(bytes=-1)),
    "an unknown key in a file": lambda s: rewrite_manifest(s, lambda b: _entry(b, "rl").update(url="http://x")),
    "a path listed twice": lambda s: rewrite_manifest(s, lambda b: b["files"].append(dict(_entry(b, "cpt")))),
    "the card passed off as SFT data": lambda s: rewrite_manifest(
        s, lambda b: next(f for f in b["files"] if f["path"] == "README.md").update(stage="sft", split="train", rows=1)
    ),
    "another release's manifest": lambda s: rewrite_manifest(s, lambda b: b.update(version="2")),
    "a name that is a path": lambda s: rewrite_manifest(s, lambda b: b.update(name="../wm")),
    "a directory": lambda s: ((release(s) / "manifest.json").unlink(), (release(s) / "manifest.json").mkdir()),
}


@pytest.mark.parametrize("attack", sorted(MANIFEST_ATTACKS))
def test_a_bad_manifest_is_refused_in_one_line(store, attack):
    MANIFEST_ATTACKS[attack](store)
    manifest = str(release(store) / "manifest.json")
    name = str(release(store)) if attack == "a directory" else manifest
    message = refused(lambda: load(release(store)), StoreError, name)
    refused(lambda: assets.open_release(str(store), "wm/1", "sft", "train"), StoreError, name)
    assert "do-not-read" not in message


def test_the_cli_refuses_bad_manifests_in_one_line(store, tmp_path):
    MANIFEST_ATTACKS["a ../ path"](store)
    manifest = str(release(store) / "manifest.json")
    line = one_line_error(cli("release", "verify", str(release(store)), check=False), manifest, "leaves the release folder")
    assert "do-not-read" not in line
    one_line_error(cli("release", "export", str(release(store)), "--out", str(tmp_path / "o"), check=False), manifest)
    assert not (tmp_path / "o").exists()
    MANIFEST_ATTACKS["garbage bytes"](store)
    one_line_error(cli("release", "verify", str(release(store)), check=False), manifest, "not JSON")
    proc = cli("release", "list", "--store", str(store), check=False)  # the bad release is named, not skipped silently
    one_line_error(proc, manifest)


def test_links_out_of_the_release_are_refused_even_with_a_matching_hash(store):
    secret, digest = _outside(store)
    target = first(store, "data/sft/train-*.parquet")
    target.unlink()
    target.symlink_to(secret)
    rel = str(target.relative_to(release(store)))
    rewrite_manifest(
        store, lambda b: next(f for f in b["files"] if f["path"] == rel).update(sha256=digest, bytes=secret.stat().st_size)
    )
    refused(lambda: assets.open_release(str(store), "wm/1", "sft", "train"), ShardError, str(target), "links outside")
    assert f"{target}: links outside the release folder" in verify(release(store))
    manifest = release(store) / "manifest.json"
    manifest.rename(store / "elsewhere.json")
    manifest.symlink_to(store / "elsewhere.json")
    refused(lambda: load(release(store)), StoreError, str(manifest), "links outside")


def test_a_forged_release_with_matching_hashes_still_gives_one_line(store, tmp_path):
    """Hashes only prove the files are the manifest's; content from a hostile builder must
    still give a one-line error, and a domain name must not steer where export writes."""
    target = first(store, "data/sft/test-*.parquet")
    table = pq.read_table(target)
    evil = table.set_column(table.schema.get_field_index("domain"), "domain", pa.array(["../../evil"] * table.num_rows))
    pq.write_table(evil, target)
    rehash(store, target)
    out = tmp_path / "out" / "awb"
    refused(lambda: export_agentworldbench(release(store), out), ShardError, str(target), "not an SFT sample")
    assert not list((tmp_path).rglob("evil*"))
    pq.write_table(pa.table({"id": ["x"], "text": ["y"]}), target)  # not an SFT file at all
    rehash(store, target, rows=1)
    refused(lambda: export_agentworldbench(release(store), out), ShardError, str(target), "columns")
    target.write_bytes(b"PAR1 not parquet PAR1")
    rehash(store, target)
    one_line_error(cli("release", "export", str(release(store)), "--out", str(out), check=False), str(target), "Parquet")


def test_a_missing_store_or_release_is_one_line_and_exit_2(store, tmp_path):
    missing = tmp_path / "nonexistent"
    one_line_error(cli("release", "list", "--store", str(missing), check=False), str(missing), "no such store")
    refused(lambda: list_releases(missing), StoreError, "no such store")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("release", "list", "--store", str(empty)).stdout.strip() == f"{empty}: no releases"
    gone = store / "releases" / "wm" / "9"
    one_line_error(cli("release", "verify", str(gone), check=False), str(gone), "not a release")
    one_line_error(cli("release", "export", str(gone), "--out", str(tmp_path / "o"), check=False), str(gone))
    one_line_error(cli("release", "diff", str(release(store)), str(gone), check=False), str(gone))
    refused(lambda: assets.open_release(str(missing), "wm/1", "sft", "train"), StoreError, "no such store")
    for name in ("../../etc/1", "wm/..", "/abs/1", "wm"):
        refused(lambda n=name: assets.open_release(str(store), n, "sft", "train"), StoreError, "expected NAME/VERSION")
    assert [r["name"] for r in list_releases(store)] == ["wm"]


def test_a_manifest_damaged_in_a_row_count_is_caught_by_the_reader(store):
    """A manifest has no signature; a damaged number in it still shows against the file it describes."""
    target = first(store, "data/sft/train-*.parquet")
    rel = str(target.relative_to(release(store)))
    rewrite_manifest(store, lambda b: next(f for f in b["files"] if f["path"] == rel).update(rows=10**6))
    refused(lambda: assets.open_release(str(store), "wm/1", "sft", "train"), ShardError, str(target), "the manifest says")


@pytest.mark.parametrize("attack", ["garbage bytes", "a JSON list", "a ../ path", "an absolute path"])
def test_queries_skip_a_refused_release_and_answer_for_the_rest(store, attack):
    MANIFEST_ATTACKS[attack](store)
    warnings: list[str] = []
    handle = Store(str(store), on_warning=warnings.append)
    assert run_query("SELECT count(*) AS n FROM transitions", handle).to_pylist() == [{"n": 0}]
    assert warnings == []  # views are built lazily: a query that reads no release opens none
    with pytest.raises(QueryError):  # the refused release gives no views at all
        run_query("SELECT count(*) FROM release_sft", Store(str(store), on_warning=warnings.append))
    assert any(str(release(store)) in w and "\n" not in w for w in warnings), warnings


def test_a_release_view_hashes_its_files_and_leaves_out_a_changed_stage(store):
    good = run_query("SELECT count(*) AS n FROM release_cpt", str(store)).to_pylist()[0]["n"]
    changed = flip(first(store, "data/sft/train-*.parquet"))
    warnings: list[str] = []
    handle = Store(str(store), on_warning=warnings.append)
    assert run_query("SELECT count(*) AS n FROM release_cpt", handle).to_pylist() == [{"n": good}]
    assert not warnings  # the sft files are not read, so not hashed
    with pytest.raises(QueryError):
        run_query("SELECT count(*) FROM release_sft", handle)
    assert [w for w in warnings if changed.name in w and CHANGED in w], warnings
    files = run_query("SELECT count(*) AS n FROM releases WHERE stage = 'sft'", str(store)).to_pylist()
    assert files[0]["n"] >= 1  # the listing still answers from the checked manifest
