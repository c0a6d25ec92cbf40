"""Hostile config files and command-line values: one ``error:`` line naming the file or
option, exit 2, no traceback, and no work started.

Every kind of bad file goes through the one loader (``schemas.config``) for every config
type; a set of them goes through the CLI's own entry point (``trajforge.main``, in
process: a subprocess costs seconds of imports) for every command that takes a YAML file,
and binary garbage through the installed front door in a subprocess, as a user runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from collectors.jobs import load_job
from pipelines.cli_inputs import existing_store, store_target
from pipelines.curate.config import load_curation
from pipelines.release.config import load_mixture
from schemas.config import MAX_CONFIG_BYTES, MAX_CONFIG_NODES
from schemas.errors import ConfigError
from tests.conftest import cli
from training.config import load_train_config

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "examples" / "tasks" / "terminal.yaml"

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)  # ~10^9 values once expanded, 400 bytes on disk


def _bad_files() -> dict[str, object]:
    """name -> the file's bytes, or a callable making the path (for what is not a plain file)."""
    return {
        "binary": bytes(range(256)) * 8,
        "latin1": "name: caf\xe9\n".encode("latin-1"),
        "nul": b"name: a\x00b\n",
        "syntax": b"a: [1, 2\n",
        "tab-indent": b"a:\n\t- 1\n",
        "list": b"- 1\n- 2\n",
        "scalar": b"just words\n",
        "empty": b"",
        "comments-only": b"# nothing here\n",
        "braces": b"{}\n",
        "null": b"null\n",
        "duplicate-key": b"seed: 1\nseed: 2\n",
        "billion-laughs": LAUGHS.encode(),
        "alias-loop": b"a: &a [*a]\n",
        "python-tag": b"x: !!python/object/apply:os.system ['touch /tmp/pwned']\n",
        "deep": b"[" * 5000 + b"]" * 5000,
        "huge": b"a: " + b"x" * (MAX_CONFIG_BYTES + 10) + b"\n",
        "nan": b"seed: .nan\n",
        "inf": b"seed: .inf\n",
        "huge-int": b"seed: " + b"9" * 40 + b"\n",
        "missing": lambda p: p.with_name("missing.yaml"),
        "folder": lambda p: (p.mkdir(), p)[1],
        "under-a-file": lambda p: (p.write_text("x"), p / "inner.yaml")[1],
        "fifo": lambda p: (os.mkfifo(p), p)[1],
    }


BAD = _bad_files()
LOADERS = {
    "job": load_job,
    "curation": load_curation,
    "mixture": load_mixture,
    "training": load_train_config,
}


def _make(tmp_path: Path, kind: str) -> Path:
    body = BAD[kind]
    path = tmp_path / f"{kind}.yaml"
    if callable(body):
        return body(path)
    path.write_bytes(body)
    return path


@pytest.mark.parametrize("config", LOADERS)
@pytest.mark.parametrize("kind", BAD)
def test_every_loader_refuses_every_bad_file_in_one_line(tmp_path, config, kind):
    path = _make(tmp_path, kind)
    with pytest.raises(ConfigError) as info:
        LOADERS[config](path)
    message = str(info.value)
    assert message.startswith(str(path)) and len(message.splitlines()) == 1 and len(message) < 600, message
    assert not Path("/tmp/pwned").exists()


def test_the_alias_bomb_is_refused_by_size_not_after_expanding():
    from schemas.config import check_values, parse_yaml

    data = parse_yaml(LAUGHS, "x.yaml")
    with pytest.raises(ConfigError, match=f"more than {MAX_CONFIG_NODES} values"):
        check_values(data, "x.yaml")


def test_anchors_that_stay_small_still_work(tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text("stages:\n  sft: {weights: &w {terminal: 2, swe: 1}}\n  rl: {weights: *w}\n")
    cfg = load_mixture(path)
    assert cfg.stages["rl"].weights == {"terminal": 2, "swe": 1}


VALUE_CASES = [
    (
        "curation",
        "exact_dedup: {enabled: false}\nnear_dedup: {enabled: false}\nquality: {enabled: false}\n"
        "scrub: {enabled: false}\ndecontaminate: {enabled: false}\n",
        "every stage is disabled",
    ),
    ("curation", "domains: []\n", "domains: List should have at least 1 item"),
    ("curation", "near_dedup: {threshold: -0.5}\n", "near_dedup.threshold: Input should be greater than or equal to 0"),
    ("curation", "decontaminate: {eval_sets: evals.jsonl}\n", "decontaminate.eval_sets: Input should be a valid list"),
    (
        "curation",
        "decontaminate: {eval_sets: [{file: evals.jsonl}]}\n",
        "decontaminate.eval_sets.0: Input should be a valid string",
    ),
    ("curation", "max_transitions_per_pass: many\n", "max_transitions_per_pass: Input should be a valid integer"),
    ("mixture", "stages: {}\n", "no stage to build"),
    ("mixture", "stages: {sft: {enabled: false}}\n", "no stage to build"),
    ("mixture", "stages: {sft: {weights: {terminal: 0, web: 0}}}\n", "weights sum to 0"),
    ("mixture", "stages: {sft: {weights: {terminal: -1}}}\n", "weight of terminal must be >= 0"),
    ("mixture", "curations: []\n", "curations: give 'all' or a list of curation ids"),
    ("mixture", "curations: [../../elsewhere]\n", "curations: give 'all' or a list of curation ids"),
    ("mixture", "stages: {sft: {token_budget: -5}}\n", "stages.sft.token_budget: Input should be greater than or equal to 1"),
    ("training", "stage: sft\nmodel: {init: {hidden_size: -1}}\n", "init.hidden_size must be a positive integer"),
    ("training", "stage: sft\nmodel: {init: {}}\ntrain: {learning_rate: -1}\n", "train.learning_rate: Input should be greater"),
    ("training", "stage: sft\nmodel: {init: {}}\ntrain: {lr_scheduler: cosin}\n", "train.lr_scheduler: Input should be"),
    ("training", "stage: sft\nmodel: {init: {}}\nsplit: ../../x\n", "split: Input should be"),
    ("training", "stage: sft\nmodel: {init: {}}\nrelease: ../../etc/1\n", "release: String should match pattern"),
    ("job", f"job_id: j\ntasks: [{TASKS}]\ndomains: []\n", "domains: List should have at least 1 item"),
    ("job", f"job_id: j\ntasks: [{TASKS}]\nstep_timeout_s: -1\n", "step_timeout_s: Input should be greater than 0"),
    ("job", f"job_id: ../j\ntasks: [{TASKS}]\n", "job_id: String should match pattern"),
]


@pytest.mark.parametrize(("config", "body", "message"), VALUE_CASES)
def test_impossible_values_name_the_key(tmp_path, config, body, message):
    path = tmp_path / "c.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        LOADERS[config](path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value), str(info.value)
    assert len(str(info.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (b"", "no eval items"),
        (b"not json\n", "line 1: not JSON"),
        (b'["a list"]\n', "line 1: an eval item must be a JSON object, got list"),
        (b'{"id": "a"}\n{"repo": ["x"], "commit": "c"}\n', "line 2: repo must be a string, got list"),
        (b'{"question": "what"}\n', "line 1: nothing to match on"),
        (b'{"id": "a"}\n\xff\xfe\n', "not UTF-8 text"),
        (b"[" * 100000 + b"\n", "line 1: "),
    ],
)
def test_eval_sets_of_the_wrong_shape_are_refused_before_beam(tmp_path, lines, message):
    (tmp_path / "evals.jsonl").write_bytes(lines)
    path = tmp_path / "cur.yaml"
    path.write_text("decontaminate: {eval_sets: [evals.jsonl]}\n")
    with pytest.raises(ConfigError) as info:
        load_curation(path)
    assert str(info.value).startswith(f"{path}: decontaminate.eval_sets: evals.jsonl: ") and message in str(info.value)


def test_a_good_eval_set_still_loads(tmp_path):
    (tmp_path / "evals.jsonl").write_text('{"id": "t1", "instruction": "fix the bug"}\n\n{"task_id": 7}\n')
    path = tmp_path / "cur.yaml"
    path.write_text("decontaminate: {eval_sets: [evals.jsonl], ngram: 5}\n")
    assert load_curation(path).decontaminate.eval_sets == [str(tmp_path / "evals.jsonl")]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\xfe garbage", "not UTF-8 text"),
        (b"- {id: a, domain: terminal, instruction: x, setup: ls}\n", "task 0: setup: Input should be a valid list"),
        (b"- {id: a, domain: terminal, instruction: x, max_steps: -2}\n", "task 0: max_steps: Input should be greater"),
        (b"- {id: a, domain: terminal, instruction: [x]}\n", "task 0: instruction: Input should be a valid string"),
        (b"- {id: a, domain: desktop, instruction: x}\n", "task 0: task a: unknown domain 'desktop'"),
        (b"- {id: a, domain: terminal, instruction: x}\n- {id: b, id: c}\n", "duplicate key 'id'"),
    ],
)
def test_task_suites_go_through_the_same_checks(tmp_path, body, message):
    suite = tmp_path / "tasks.yaml"
    suite.write_bytes(body)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"job_id": "j", "tasks": [str(suite)]}))
    with pytest.raises(ConfigError, match=r"tasks\.yaml") as info:
        load_job(job)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1


def test_store_checks():
    for bad in ("", "   ", "/nonexistent/store", "/etc/hostname"):
        with pytest.raises(ConfigError, match="--store"):
            existing_store(bad)
    for bad in ("", "/etc/hostname"):
        with pytest.raises(ConfigError, match="--store"):
            store_target(bad)
    assert existing_store(str(ROOT)) == str(ROOT) and store_target("/nonexistent/new") == "/nonexistent/new"


# -- through the real CLI: every command that takes a YAML file, and every one that reads a store -------------
def _config_commands(tmp_path: Path, path: Path) -> dict[str, list[str]]:
    store = str(tmp_path / "store")
    return {
        "collect": ["collect", str(path), "--store", store],
        "curate": ["curate", str(path), "--store", store],
        "release create": ["release", "create", str(path), "--store", store, "--name", "r", "--version", "1"],
        "train cpt": ["train", "cpt", str(path), "--store", store, "--release", "r/1", "--output", str(tmp_path / "run")],
        "train sft": ["train", "sft", str(path), "--store", store, "--release", "r/1", "--output", str(tmp_path / "run")],
        "train rl": ["train", "rl", str(path), "--store", store, "--release", "r/1", "--output", str(tmp_path / "run")],
    }


def _assert_one_line_error(code, out: str, err: str, *expected: str) -> None:
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    for text in expected:
        assert text in lines[0], lines[0]


def _main(capsys, argv: list[str]) -> tuple[int, str, str]:
    """The CLI's entry point in this process: its exit code, stdout and stderr."""
    from trajforge import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    got = capsys.readouterr()
    return info.value.code, got.out, got.err


def test_the_front_door_refuses_garbage_for_every_config_command(tmp_path):
    path = _make(tmp_path, "binary")
    for name, argv in _config_commands(tmp_path, path).items():
        proc = cli(*argv, check=False)
        _assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, str(path), "not UTF-8")
        assert not (tmp_path / "store").exists() and not (tmp_path / "run").exists(), name


@pytest.mark.parametrize("kind", sorted(BAD))
def test_every_config_command_gives_one_line_and_starts_nothing(tmp_path, capsys, kind):
    path = _make(tmp_path, kind)
    for name, argv in _config_commands(tmp_path, path).items():
        _assert_one_line_error(*_main(capsys, argv), str(path))
        assert not (tmp_path / "store").exists() and not (tmp_path / "run").exists(), name


def test_read_commands_refuse_a_missing_store(tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    mixture, curation = ROOT / "examples/mixtures/default.yaml", ROOT / "examples/curation/default.yaml"
    commands = [
        ["stats", "--store", missing],
        ["shards", "validate", missing],
        ["shards", "repair", missing],
        ["curate", str(curation), "--store", missing],
        ["release", "create", str(mixture), "--store", missing, "--name", "r", "--version", "1"],
        ["tokenizer", "train", "--store", missing, "--out", str(tmp_path / "tok")],
        ["train", "eval", "--model", str(tmp_path), "--store", missing, "--release", "r/1"],
    ]
    for argv in commands:
        _assert_one_line_error(*_main(capsys, argv), missing)
    assert not Path(missing).exists() and not (tmp_path / "tok").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["synth", "{tmp}/s", "--transitions", "-5"], "--transitions"),
        (["synth", "{tmp}/s", "--duplicates", "nan"], "--duplicates"),
        (["synth", "{tmp}/s", "--run-id", "../../escape"], "run id"),
        (["synth", ""], "empty store path"),
        (["collect", "{job}", "--store", "{tmp}/s", "--shard", "-1"], "--shard"),
        (["collect", "{job}", "--store", "{tmp}/s", "--shard", "3", "--num-shards", "2"], "--shard 3 --num-shards 2"),
        (["collect", "{job}", "--store", "{tmp}/s", "--num-shards", "x"], "--num-shards"),
        (["collect", "{job}", "--store", ""], "empty store path"),
        (["curate", "{curation}", "--store", "{store}", "--runner=NoSuchRunner"], "--runner NoSuchRunner"),
        (["release", "create", "{mixture}", "--store", "{store}", "--name", "../x", "--version", "1"], "'../x'"),
        (["release", "create", "{mixture}", "--store", "{store}", "--name", "r", "--version", "a/b"], "'a/b'"),
        (["train", "eval", "--model", "{tmp}", "--store", "{store}", "--release", "../../etc"], "--release"),
        (["train", "eval", "--model", "{tmp}", "--store", "{store}", "--release", "r/1", "--rollouts", "-1"], "--rollouts"),
    ],
)
def test_hostile_command_line_values(tmp_path, capsys, argv, message):
    (tmp_path / "store" / "raw").mkdir(parents=True)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"job_id": "j", "tasks": [str(TASKS)], "sandbox": {"backend": "local"}}))
    values = {
        "tmp": str(tmp_path),
        "store": str(tmp_path / "store"),
        "job": str(job),
        "curation": str(ROOT / "examples/curation/default.yaml"),
        "mixture": str(ROOT / "examples/mixtures/default.yaml"),
    }
    _assert_one_line_error(*_main(capsys, [a.format(**values) for a in argv]), message)
    assert not (tmp_path / "s").exists() and sorted(p.name for p in (tmp_path / "store").iterdir()) == ["raw"]


def test_model_init_checks_sizes_but_takes_flags():
    from training.config import ModelSpec

    assert ModelSpec(init={"tie_word_embeddings": False, "use_cache": True}).init["tie_word_embeddings"] is False
    for bad in ({"max_position_embeddings": 0}, {"hidden_size": True}, {"num_hidden_layers": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ModelSpec(init=bad)
