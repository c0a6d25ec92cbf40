"""Releases end to end on curated synthetic stores: layout, reproducibility, verify, diff,
Hugging Face loading, the AgentWorldBench export, views, distillation and bad input."""

from __future__ import annotations

import json
import logging
import logging.handlers
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collectors.synth import Synthesizer
from pipelines.curate.config import CurationConfig
from pipelines.curate.run import curate
from pipelines.query import run_query
from pipelines.release.build import create_release
from pipelines.release.config import MixtureConfig, Stage, load_mixture
from pipelines.release.inspect import diff, export_agentworldbench, verify
from pipelines.release.tokens import train_tokenizer
from pipelines.store import StoreWriter
from schemas.errors import ConfigError, StoreError
from tests.collectors.test_policies import ChatServer
from tests.conftest import SMALL, cli

IN_MEMORY = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def curated_store(path: Path, seed: int = 3, n: int = 500, run: str | None = None) -> str:
    gen = Synthesizer(seed, duplicates=0.2, **SMALL)
    with StoreWriter(str(path), run or gen.run_id) as w:
        w.write_many(gen.transitions(n))
    curate(CurationConfig(), str(path), beam_args=IN_MEMORY, log=lambda m: None)
    if not (path / "tokenizer.json").exists():
        texts = [t.next_state.text for t in Synthesizer(0, **SMALL).transitions(300)]
        train_tokenizer(texts, str(path / "tokenizer.json"), vocab_size=400)
    return str(path)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A curated store with one release, built once for the module (copy it to change it)."""
    root = tmp_path_factory.mktemp("release")
    store = curated_store(root / "s")
    cfg = load_mixture("examples/mixtures/default.yaml", store)
    cfg = MixtureConfig.model_validate({**cfg.model_dump(), "splits": {"validation": 0.15, "test": 0.25}})
    report = create_release(cfg, store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    return store, cfg, report


def test_layout_manifest_lineage_and_card(base):
    store, _cfg, report = base
    root = Path(store, "releases", "wm", "1")
    names = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert {"manifest.json", "lineage.json", "README.md", "domain_mix.png", "token_lengths.png"} <= names
    data = sorted(n for n in names if n.startswith("data/"))
    assert any(n.startswith("data/sft/train-00000-of-") for n in data) and any(n.startswith("data/rl/test-") for n in data)
    manifest = json.loads((root / "manifest.json").read_text())
    files = {f["path"]: f for f in manifest["files"]}
    assert set(files) == names - {"manifest.json"}
    rows = sum(f["rows"] for f in manifest["files"] if f.get("stage") == "sft" and f["split"] == "train")
    assert (
        rows
        == report.samples["sft"]["train"]
        == pq.read_table(root / "data" / "sft").num_rows - sum(report.samples["sft"][s] for s in ("validation", "test"))
    )
    assert manifest["curations"] and manifest["source_runs"] and manifest["code_version"] and manifest["config_hash"]
    assert set(manifest["schemas"]) == {"cpt", "sft", "rl"} and manifest["libraries"]["pyarrow"]
    lineage = json.loads((root / "lineage.json").read_text())
    (cid,) = lineage["curations"]
    assert lineage["curations"][cid]["raw_runs"] == manifest["source_runs"]
    card = (root / "README.md").read_text()
    assert card.startswith("---\npretty_name: wm 1\nlicense: other\nlicense_name: unspecified-collected-data\n")
    assert "config_name: sft" in card and "language:\n- en\n" in card and "sources name no licence" in card
    assert "## What curation dropped" in card and ("exact duplicate" in card or "exact_duplicate" in card)
    assert manifest["input_hash"] == report.input_hash and set(manifest["lengths"]) == {"cpt", "sft", "rl"}
    assert (root / "domain_mix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_duplicate_targets_are_not_samples_and_no_task_is_in_two_splits(base):
    store, _cfg, _ = base
    excluded = run_query("SELECT transition_id FROM curated WHERE exclude_as_target", store).column(0).to_pylist()
    assert excluded
    sft = run_query("SELECT transition_id, task_id, env_id, split FROM release_sft", store).to_pylist()
    assert not {r["transition_id"] for r in sft} & set(excluded)
    splits: dict[tuple[str, str], set[str]] = {}
    for r in sft:
        splits.setdefault((r["env_id"], r["task_id"]), set()).add(r["split"])
    assert all(len(s) == 1 for s in splits.values()) and {s for v in splits.values() for s in v} == {
        "train",
        "validation",
        "test",
    }
    views = run_query("SELECT stage, sum(rows) AS n FROM releases WHERE name = 'wm' GROUP BY 1 ORDER BY 1", store)
    assert [r["stage"] for r in views.to_pylist()] == ["cpt", "rl", "sft"]


def test_rebuild_is_byte_identical_and_versions_are_immutable(base, tmp_path):
    store, cfg, _ = base
    again = create_release(cfg, store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    assert again.identical
    other = curated_store(tmp_path / "s2")  # the same raw data and configs in another store
    create_release(cfg, other, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    left, right = Path(store, "releases/wm/1"), Path(other, "releases/wm/1")
    files = sorted(str(p.relative_to(left)) for p in left.rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(right)) for p in right.rglob("*") if p.is_file())
    assert all((left / f).read_bytes() == (right / f).read_bytes() for f in files)
    changed = cfg.model_copy(update={"seed": cfg.seed + 1})
    with pytest.raises(StoreError, match="release wm 1 exists with other content"):
        create_release(changed, other, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    assert (right / "manifest.json").read_bytes() == (left / "manifest.json").read_bytes()


def test_an_unchanged_rerun_answers_from_the_input_hash_and_a_changed_input_rebuilds(base, tmp_path, monkeypatch):
    import apache_beam as beam

    store, cfg, report = base
    s = tmp_path / "s"
    shutil.copytree(store, s)
    real, built = beam.Pipeline, []
    monkeypatch.setattr(beam, "Pipeline", lambda *a, **kw: built.append(1) or real(*a, **kw))
    again = create_release(cfg, str(s), "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    assert again.identical and not built  # no Beam pipeline: answered from the manifest's input_hash
    assert (again.samples, again.tokens, again.dropped, again.input_hash) == (
        report.samples,
        report.tokens,
        report.dropped,
        report.input_hash,
    )
    manifest = (s / "releases/wm/1/manifest.json").read_bytes()
    (index,) = (s / "curated/_index").glob("*.json")  # an input changed without changing the content: rebuilt, kept
    index.write_text(json.dumps(json.loads(index.read_text()), indent=4))
    again = create_release(cfg, str(s), "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    assert again.identical and len(built) == 2 and again.input_hash != report.input_hash
    assert (s / "releases/wm/1/manifest.json").read_bytes() == manifest  # releases are immutable
    changed = cfg.model_copy(update={"stages": {"sft": cfg.stages["sft"].model_copy(update={"max_tokens": 2000})}})
    with pytest.raises(StoreError, match="release wm 1 exists with other content"):  # another config: built, refused
        create_release(changed, str(s), "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    assert len(built) == 4


def test_verify_catches_a_flipped_byte_a_removed_file_and_an_extra_one(base, tmp_path):
    store, _, _ = base
    copy = tmp_path / "r"
    shutil.copytree(Path(store, "releases/wm/1"), copy)
    assert verify(copy) == []
    target = sorted(copy.glob("data/sft/train-*.parquet"))[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    (copy / "lineage.json").unlink()
    (copy / "notes.txt").write_text("x")
    problems = verify(copy)
    assert problems == sorted(problems) or len(problems) == 3
    assert {p.split(": ", 1)[1] for p in problems} == {
        "changed (sha256 differs from the manifest)",
        "missing",
        "extra file, not in the manifest",
    }
    proc = cli("release", "verify", str(copy), check=False)
    assert proc.returncode == 2 and f"{target}: changed" in proc.stderr


def test_diff_shows_samples_added_by_new_curated_data(base, tmp_path):
    store, cfg, _ = base
    s = tmp_path / "s"
    shutil.copytree(store, s)
    gen = Synthesizer(9, run_id="more", duplicates=0.0, **SMALL)
    with StoreWriter(str(s), "more") as w:
        w.write_many(gen.transitions(120))
    curate(CurationConfig(), str(s), beam_args=IN_MEMORY, log=lambda m: None)
    create_release(cfg, str(s), "wm", "2", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=150)
    rows = diff(s / "releases/wm/1", s / "releases/wm/2")
    assert sum(r["added"] for r in rows) > 0 and sum(r["removed"] for r in rows) == 0
    assert all(r["kept"] > 0 for r in rows if r["stage"] == "sft" and r["split"] == "train")
    out = cli("release", "diff", str(s / "releases/wm/1"), str(s / "releases/wm/2")).stdout
    assert out.splitlines()[0].split() == ["stage", "split", "domain", "added", "removed", "kept"]
    listed = cli("release", "list", "--store", str(s)).stdout.splitlines()
    assert [line.split(":")[0] for line in listed] == ["wm 1", "wm 2"]


def test_hugging_face_datasets_loads_every_stage(base, tmp_path):
    datasets = pytest.importorskip("datasets")  # a dev dependency: installed by make test
    store, _, report = base
    root = Path(store, "releases/wm/1")
    seen = logging.handlers.BufferingHandler(10_000)
    hf = logging.getLogger("datasets")  # the library's root logger: it does not propagate
    hf.addHandler(seen)
    try:
        for stage in ("cpt", "sft", "rl"):  # the folder alone: the card's configs and dataset_info
            ds = datasets.load_dataset(str(root), stage, cache_dir=str(tmp_path / "hf"))
            assert {s: ds[s].num_rows for s in ds} == {s: n for s, n in report.samples[stage].items() if n}
    finally:
        hf.removeHandler(seen)
    warned = [r.getMessage() for r in seen.buffer if r.levelno >= logging.WARNING]
    assert not [m for m in warned if "dataset_info" in m or "malformed" in m], warned
    for stage in ("cpt", "sft", "rl"):
        files = {s: sorted(str(p) for p in root.glob(f"data/{stage}/{s}-*.parquet")) for s in ("train", "test")}
        ds = datasets.load_dataset("parquet", data_files=files)
        assert ds["train"].num_rows == report.samples[stage]["train"] and ds["test"].num_rows == report.samples[stage]["test"]
    assert ds["train"][0]["prompt"][0]["role"] == "system"


def test_agentworldbench_export_round_trips_field_by_field(base, tmp_path):
    store, _, _ = base
    root = Path(store, "releases/wm/1")
    counts = export_agentworldbench(root, tmp_path / "awb")
    rows = {r["id"]: r for p in root.glob("data/sft/test-*.parquet") for r in pq.read_table(p).to_pylist()}
    assert sum(counts.values()) == len(rows) > 0
    for path in sorted((tmp_path / "awb").glob("*.jsonl")):  # the harness's layout: tests/pipelines/release/test_export.py
        for line in path.read_text().splitlines():
            item = json.loads(line)
            assert set(item) == {"task", "id", "prompt", "response", "current_prompt", "system_str", "turn_idx", "total_turns"}
            row = rows[item["id"]]
            assert f"{item['task']}_test.jsonl" == f"{row['domain']}_test.jsonl" == path.name
            assert item["system_str"] == row["prompt"][0]["content"]
            users, i = [m["content"] for m in row["prompt"] if m["role"] == "user"], item["turn_idx"] - 1
            assert item["prompt"][: i + 1] == users and item["current_prompt"] == users[-1]
            assert len(item["response"]) == len(item["prompt"])
            assert f"<predicted_observation>\n{item['response'][i]}\n</predicted_observation>" == row["completion"][0]["content"]
            assert item["total_turns"] == row["total_turns"]


def test_budgets_weights_and_strict_shortfalls(base, tmp_path):
    store, cfg, _ = base
    have = run_query(
        "SELECT domain, sum(tokens) AS t FROM release_sft WHERE name = 'wm' AND version = '1' AND split = 'train' GROUP BY 1",
        store,
    ).to_pylist()
    terminal = int(next(r["t"] for r in have if r["domain"] == "terminal"))
    budget = int(terminal * 1.5)  # terminal only, 1.5 epochs
    mixed = MixtureConfig.model_validate(
        {**cfg.model_dump(), "stages": {"sft": Stage(token_budget=budget, weights={"terminal": 1}, max_epochs=2).model_dump()}}
    )
    report = create_release(mixed, store, "wm-terminal", "1", beam_args=IN_MEMORY, log=lambda m: None)
    got = run_query(
        "SELECT domain, sum(tokens) AS t, count(*) AS n, count(DISTINCT id) AS u FROM release_sft "
        "WHERE name = 'wm-terminal' AND split = 'train' GROUP BY 1",
        store,
    ).to_pylist()
    assert [r["domain"] for r in got] == ["terminal"] and 0.75 * budget < got[0]["t"] < 1.25 * budget
    assert got[0]["n"] > got[0]["u"]  # some samples taken twice
    assert set(report.samples) == {"sft"} and not report.shortfall
    strict = mixed.model_copy(
        update={"strict": True, "stages": {"sft": Stage(token_budget=terminal * 5, weights={"terminal": 1})}}
    )
    with pytest.raises(ConfigError, match=r"stages\.sft\.token_budget"):
        create_release(strict, store, "wm-strict", "1", beam_args=IN_MEMORY, log=lambda m: None)
    assert not Path(store, "releases", "wm-strict", "1").exists()


def test_cli_errors_are_one_line(base, tmp_path):
    store, _, _ = base
    bad = tmp_path / "mix.yaml"
    bad.write_text("curations: [nope]\ntokenizer: tokenizer.json\n")
    proc = cli("release", "create", str(bad), "--store", store, "--name", "x", "--version", "1", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("error: curations: 'nope' is not a finished")
    bad.write_text("tokenizer: missing.json\n")
    proc = cli("release", "create", str(bad), "--store", store, "--name", "x", "--version", "1", check=False)
    assert (
        proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == "error: tokenizer: missing.json: no tokenizer.json there"
    )


def test_distilled_reasoning_comes_before_the_predicted_observation(base, tmp_path):
    store, cfg, _ = base
    s = tmp_path / "s"
    shutil.copytree(store, s)
    teacher = ChatServer([{"content": "The listing shows the new file."}] * 40)  # fails once first: retried
    try:
        (cid,) = [p.parent.name for p in (s / "curated").glob("*/report.json")]
        out = cli(
            "distill", "--store", str(s), "--curation", cid, "--model", "teacher", "--base-url", teacher.url, "--limit", "40"
        )
        assert out.stdout.startswith("40 reasoning texts")
    finally:
        teacher.close()
    seen = [body for _, body in teacher.requests]
    assert len(seen) == 41 and seen[0]["model"] == "teacher" and "Answer:" in seen[0]["messages"][1]["content"]
    only_sft = MixtureConfig.model_validate({**cfg.model_dump(), "stages": {"sft": {}}})
    create_release(only_sft, str(s), "wm-distilled", "1", beam_args=IN_MEMORY, log=lambda m: None)
    rows = run_query("SELECT completion, has_reasoning FROM release_sft WHERE name = 'wm-distilled'", str(s)).to_pylist()
    with_reasoning = [r for r in rows if r["has_reasoning"]]
    assert 0 < len(with_reasoning) <= 40
    assert all(
        r["completion"][0]["content"].startswith("The listing shows the new file.\n<predicted_observation>\n")
        for r in with_reasoning
    )
