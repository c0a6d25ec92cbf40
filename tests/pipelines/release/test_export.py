"""``release export --format agentworldbench`` against the layout of AgentWorldBench's own
harness (QwenLM/Qwen-AgentWorld ``eval/eval.py``, read there; nothing of it is copied).

The harness's layout, as this test reproduces it:

- **load_data(dir)**: the files ``sorted(dir.glob("*_test.jsonl"))``, not recursive; each
  non-empty line (stripped) is one JSON object, a job.
- **get_subtask(job)**: ``task.split("/")[-1]`` when ``task`` holds a ``/``, else ``task``;
  one of terminal, swe, search, mcp, android, web, os.
- **inference**: ``i = max(turn_idx - 1, 0)``; messages = the system message
  ``system_str`` (when not empty), then for ``j < min(i, len(prompt), len(response))`` the
  user message ``prompt[j]`` and the assistant message ``response[j]``, then the user
  message ``current_prompt`` (``prompt[i]`` when that is empty).
- **judge**: the context is ``prompt[k] + "\\n" + response[k] + "\\n\\n"`` for ``k < i``;
  the ground truth is ``response[i]`` (empty when there is none); the current turn shown is
  ``current_prompt``.

So a job needs ``prompt`` and ``response`` as lists of strings of one length, a 1-based
``turn_idx`` with ``1 <= turn_idx <= len(prompt)`` and ``current_prompt == prompt[turn_idx-1]``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.release.build import create_release
from pipelines.release.config import MixtureConfig, load_mixture
from pipelines.release.inspect import agentworldbench_items, export_agentworldbench, sample_turns
from pipelines.release.samples import wrap
from pipelines.store import Store
from schemas.errors import ShardError
from tests.conftest import cli
from tests.pipelines.release.test_release import IN_MEMORY, curated_store
from tests.security.test_release import flip, one_line_error, refused, rehash

DOMAINS = {"terminal", "swe", "search", "mcp", "android", "web", "os"}
FIELDS = {"task", "id", "prompt", "response", "current_prompt", "system_str", "turn_idx", "total_turns"}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A store with an SFT-only release wm/1 whose small prompt budget makes some samples
    drop their oldest turns (both kinds of row are exported)."""
    root = tmp_path_factory.mktemp("export")
    store = curated_store(root / "s", n=300)
    cfg = load_mixture("examples/mixtures/default.yaml", store).model_dump()
    sft = {**cfg["stages"]["sft"], "max_prompt_tokens": 2000}
    cfg = MixtureConfig.model_validate({**cfg, "splits": {"validation": 0.1, "test": 0.4}, "stages": {"sft": sft}})
    create_release(cfg, store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None, rows_per_file=60)
    return Path(store)


def release(store: Path) -> Path:
    return store / "releases" / "wm" / "1"


# -- the harness's layout, rewritten from its description above ------------------------------------
def load_data(data_dir: Path) -> list[dict]:
    jobs = []
    for path in sorted(data_dir.glob("*_test.jsonl")):
        with open(path) as f:
            jobs.extend(json.loads(line) for line in f if line.strip())
    return jobs


def get_subtask(job: dict) -> str:
    task = job.get("task", "mcp")
    return task.split("/")[-1] if "/" in task else task


def inference_messages(job: dict) -> list[dict[str, str]]:
    i = max(job.get("turn_idx", 1) - 1, 0)
    prompts, responses = job["prompt"], job["response"]
    messages = [{"role": "system", "content": job["system_str"]}] if job.get("system_str") else []
    for j in range(min(i, len(prompts), len(responses))):
        messages += [{"role": "user", "content": prompts[j]}, {"role": "assistant", "content": responses[j]}]
    current = job.get("current_prompt") or (prompts[i] if i < len(prompts) else "")
    return [*messages, {"role": "user", "content": current}]


def judge_inputs(job: dict) -> tuple[str, str, str]:
    """(context, current turn, ground truth) as the judge sees them."""
    i = max(job.get("turn_idx", 1) - 1, 0)
    prompts, responses = job["prompt"], job["response"]
    context = "".join(prompts[k] + "\n" + responses[k] + "\n\n" for k in range(i) if k < len(prompts) and k < len(responses))
    current = job.get("current_prompt") or (prompts[i] if i < len(prompts) else "")
    return context, current, responses[i] if i < len(responses) else ""


# -- tests -----------------------------------------------------------------------------------------
def test_every_exported_row_gives_the_harness_our_prompt_and_our_next_state(built, tmp_path):
    store = built
    counts = export_agentworldbench(release(store), tmp_path / "awb")
    assert sorted(p.name for p in (tmp_path / "awb").iterdir()) == sorted(p.name for p in counts)
    assert {p.name for p in counts} <= {f"{d}_test.jsonl" for d in DOMAINS} and len(counts) > 1
    samples = {r["id"]: r for p in release(store).glob("data/sft/test-*.parquet") for r in pq.read_table(p).to_pylist()}
    steps = {t.transition_id: t for t in Store(str(store)).iter_transitions("curated")}
    jobs = load_data(tmp_path / "awb")
    assert len(jobs) == sum(counts.values()) == len(samples) > 20
    assert sorted(j["id"] for j in jobs) == sorted(samples)  # every test sample once
    kinds = set()
    for job in jobs:
        assert set(job) == FIELDS
        sample = samples[job["id"]]
        assert get_subtask(job) == job["task"] == sample["domain"] in DOMAINS
        prompts, responses, k = job["prompt"], job["response"], job["turn_idx"]
        assert all(isinstance(x, str) for x in prompts + responses) and len(prompts) == len(responses)
        assert type(k) is int and 1 <= k <= len(prompts) and job["current_prompt"] == prompts[k - 1]
        assert job["total_turns"] == sample["total_turns"] and job["system_str"] == sample["prompt"][0]["content"]
        # inference: our SFT prompt, history observations without their tags
        ours = [m if m["role"] != "assistant" else {**m, "content": wrap(m["content"])} for m in inference_messages(job)]
        assert ours == sample["prompt"]
        # judge: the ground truth is the environment's next state of that very step, for that action
        context, current, truth = judge_inputs(job)
        step = steps[sample["transition_id"]]
        assert truth == step.next_state.text and wrap(truth) == sample["completion"][0]["content"]
        assert current == job["current_prompt"] and current.endswith(f"## Action\n{step.action.canonical}")
        assert context == "".join(f"{p}\n{r}\n\n" for p, r in zip(prompts[: k - 1], responses[: k - 1], strict=True))
        assert "<predicted_observation>" not in context
        if sample["dropped_turns"]:
            assert k == len(prompts) == sample["history_turns"] + 1
            assert f"({sample['dropped_turns']} earlier turns omitted)" in prompts[0]
            kinds.add("window")
        else:
            assert k == sample["step"] + 1 and "earlier turns omitted" not in prompts[0]
            kinds.add("shared" if k < len(prompts) else "last")
    assert kinds == {"window", "shared", "last"}  # the release has all three kinds of row


def test_a_trajectory_shares_one_set_of_turn_lists(built, tmp_path):
    export_agentworldbench(release(built), tmp_path / "awb")
    samples = {r["id"]: r for p in release(built).glob("data/sft/test-*.parquet") for r in pq.read_table(p).to_pylist()}
    by_trajectory: dict[str, set[str]] = {}
    for job in load_data(tmp_path / "awb"):
        sample = samples[job["id"]]
        if not sample["dropped_turns"]:
            by_trajectory.setdefault(sample["trajectory_id"], set()).add(json.dumps([job["prompt"], job["response"]]))
    assert all(len(lists) == 1 for lists in by_trajectory.values())
    assert any(len(json.loads(next(iter(v)))[0]) > 2 for v in by_trajectory.values())


@pytest.fixture
def store(built, tmp_path) -> Path:
    """A copy of the built store's releases, to damage."""
    shutil.copytree(built / "releases", tmp_path / "s" / "releases")
    return tmp_path / "s"


def test_a_tampered_release_is_refused_in_one_line_and_nothing_is_written(store, tmp_path):
    target = flip(sorted(release(store).glob("data/sft/test-*.parquet"))[0])
    out = tmp_path / "awb"
    one_line_error(cli("release", "export", str(release(store)), "--out", str(out), check=False), str(target), "sha256")
    assert not out.exists() or not list(out.iterdir())


def test_only_whole_test_files_are_written_and_the_cli_says_where(store, tmp_path):
    out = tmp_path / "awb"
    proc = cli("release", "export", str(release(store)), "--out", str(out))
    written = sorted(out.iterdir())
    assert written and all(p.name.endswith("_test.jsonl") and p.name[: -len("_test.jsonl")] in DOMAINS for p in written)
    lines = proc.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [str(p) for p in written]
    assert [int(line.rsplit(": ", 1)[1].split()[0]) for line in lines] == [len(p.read_text().splitlines()) for p in written]
    # a forged row in the last file, with hashes to match: refused, and no file appears, not even a part
    target = sorted(release(store).glob("data/sft/test-*.parquet"))[-1]
    table = pq.read_table(target)
    prompts = table.column("prompt").to_pylist()
    prompts[-1] = prompts[-1][1:]  # no system message
    pq.write_table(
        table.set_column(table.schema.get_field_index("prompt"), "prompt", pa.array(prompts, table.schema.field("prompt").type)),
        target,
    )
    rehash(store, target)
    again = tmp_path / "again"
    refused(lambda: export_agentworldbench(release(store), again), ShardError, str(target), "not an SFT sample")
    assert not list(again.iterdir())
    one_line_error(cli("release", "export", str(release(store)), "--out", str(out), "--format", "csv", check=False), "csv")


def test_observations_are_cut_by_offset_with_reasoning_and_tags_inside():
    """Plain rows: observations that hold the tags themselves, in history and as a target after
    a reasoning text (the teacher never sees the tags), and a row whose history was cut: each
    carries exactly the texts wrap() was given."""
    tricky = f"a\n{wrap('inner')}\n"  # an observation quoting a tagged one
    system = {"role": "system", "content": "sys"}

    def row(step: int, users: list[str], observations: list[str], target: str, reasoning: str = "", dropped: int = 0) -> dict:
        prompt = [system, {"role": "user", "content": users[0]}]
        for obs, user in zip(observations, users[1:], strict=True):
            prompt += [{"role": "assistant", "content": wrap(obs)}, {"role": "user", "content": user}]
        return {
            "id": f"s{step}",
            "domain": "terminal",
            "trajectory_id": "t",
            "step": step,
            "total_turns": 3,
            "dropped_turns": dropped,
            "has_reasoning": bool(reasoning),
            "prompt": prompt,
            "completion": [{"role": "assistant", "content": wrap(target, reasoning or None)}],
        }

    rows = [row(0, ["u0"], [], tricky), row(1, ["u0", "u1"], [tricky], tricky, reasoning="why\nso")]
    rows.append(row(2, ["(1 earlier turns omitted) u1", "u2"], [""], "end\n", dropped=1))
    items = agentworldbench_items([(r, sample_turns(r)) for r in rows])
    assert [(i["turn_idx"], i["current_prompt"]) for i in items] == [(1, "u0"), (2, "u1"), (2, "u2")]
    assert items[0]["prompt"] == items[1]["prompt"] == ["u0", "u1"] and items[0]["response"] == [tricky, tricky]
    assert items[2]["prompt"] == ["(1 earlier turns omitted) u1", "u2"] and items[2]["response"] == ["", "end\n"]
    bad = row(0, ["u0"], [], "x")
    bad["completion"][0]["content"] = "x"  # no tags: not one of our samples
    with pytest.raises(ValueError):
        sample_turns(bad)
