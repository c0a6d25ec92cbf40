"""The length policy on planted long samples: oldest history trimmed first, the target never
cut, samples that cannot fit dropped and counted with their reason, and every kept sample's
length as training renders it (``apply_chat_template`` with the ChatML template) within
``max_tokens`` and equal to its ``tokens``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipelines.release.card import _length_lines
from pipelines.release.config import MixtureConfig, Stage
from pipelines.release.passes import samples_of
from pipelines.release.samples import LENGTH_REASONS, Trajectory, build_samples, wrap
from pipelines.release.stats import Stats
from schemas import Action, Observation, Provenance, Transition
from tests.pipelines.release.test_samples import tokenizer, trajectory  # noqa: F401 (the shared fixture)

try:
    from pipelines.release.tokens import CHATML
except ImportError:  # before the template moved next to the token counts
    from training.assets import CHATML

LIMIT = 1200


@pytest.fixture(scope="module")
def chat(tokenizer):  # noqa: F811
    """The tokenizer as training loads it: ChatML, EOS <|im_end|>."""
    transformers = pytest.importorskip("transformers")
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=tokenizer.counter.path, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tok.chat_template = CHATML
    return tok


def length(chat, messages, generation_prompt=False) -> int:
    return len(
        chat.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=generation_prompt)["input_ids"]
    )


def mixture(limit: int = LIMIT, **stages) -> MixtureConfig:
    body = {
        "sft": Stage(max_tokens=limit, max_prompt_tokens=100_000),
        "rl": Stage(max_tokens=limit, max_prompt_tokens=100_000),
        "cpt": Stage(context_tokens=300, max_tokens=limit),
    }
    return MixtureConfig(stages={**body, **stages})


def planted(sizes: list[int]) -> Trajectory:
    """A trajectory whose step i prints ``sizes[i]`` words."""
    state, steps = "$ ", []
    for i, size in enumerate(sizes):
        screen = f"out {i} " + "file " * size + f"[exit 0] /work$ {i}"
        steps.append(
            Transition.create(
                trajectory_id="long",
                step=i,
                domain="terminal",
                env_id="bash",
                task_id="t",
                instruction="list the files",
                state=Observation.make(state, "terminal"),
                action=Action.make("run", command=f"ls {i}"),
                next_state=Observation.make(screen, "terminal"),
                provenance=Provenance(run_id="r"),
            )
        )
        state = screen
    return Trajectory(steps, frozenset(), "cur-1", {})


def test_long_histories_are_trimmed_oldest_first_and_every_kept_sample_fits(tokenizer, chat):  # noqa: F811
    traj = trajectory(n=12, size=40)
    drops: dict = {}
    out = build_samples(traj, tokenizer, mixture(), drops)
    assert not any(drops.values())
    sft, rl = out["sft"], out["rl"]
    assert len(sft) == len(rl) == 12 and sft[-1]["dropped_turns"] > 0  # the late steps lost history
    for s in sft:
        k, j = s["step"], s["dropped_turns"]
        assert s["history_turns"] == k - j  # the most recent turns are the ones kept
        history = [m["content"] for m in s["prompt"] if m["role"] == "assistant"]
        assert history == [wrap(traj.steps[i].next_state.text) for i in range(j, k)]
        if j:
            assert f"({j} earlier turns omitted)" in s["prompt"][1]["content"]
        assert s["completion"][0]["content"] == wrap(traj.steps[k].next_state.text)  # the target whole
        n = length(chat, s["prompt"] + s["completion"])
        assert n == s["tokens"] <= LIMIT  # exactly what TRL sees: never truncated at max_length = max_tokens
        assert s["prompt_tokens"] + s["completion_tokens"] == n
    for r in rl:
        assert length(chat, r["prompt"], generation_prompt=True) == r["tokens"]
        assert length(chat, [*r["prompt"], {"role": "assistant", "content": wrap(r["ground_truth"])}]) <= LIMIT
    # one turn more history would not have fitted: with a limit one token over, no sample keeps less
    roomier = build_samples(traj, tokenizer, mixture(sft[-1]["tokens"] + 1))["sft"][-1]
    assert roomier["dropped_turns"] <= sft[-1]["dropped_turns"]


def test_a_target_or_state_too_long_is_dropped_and_counted_with_its_reason(tokenizer, chat):  # noqa: F811
    traj = planted([20, 20, 2000, 20, 20])  # step 2 prints far more than the limit; step 3 starts from it
    drops: dict = {}
    out = build_samples(traj, tokenizer, mixture(), drops)
    for stage in ("sft", "rl"):
        assert [s["step"] for s in out[stage]] == [0, 1, 4], stage
        assert dict(drops[stage]) == {"target_too_long": 1, "prompt_too_long": 1}
    huge = traj.steps[2].next_state.text
    assert not any(huge in m["content"] for s in out["sft"] for m in s["prompt"] + s["completion"])
    last = out["sft"][-1]  # history from the step whose state was the huge screen: dropped, not cut
    assert last["dropped_turns"] == 4 and length(chat, last["prompt"] + last["completion"]) == last["tokens"] <= LIMIT
    # CPT: the part of turn 3 and the next one, which restates it as its state, are too long
    assert dict(drops["cpt"]) == {"turn_too_long": 2} and all(d["tokens"] <= LIMIT for d in out["cpt"])
    assert all(huge not in d["text"] for d in out["cpt"]) and out["cpt"]
    assert set(drops["sft"]) | set(drops["cpt"]) <= set(LENGTH_REASONS)


def test_no_limit_keeps_everything_and_reasoning_counts_against_the_sft_limit(tokenizer, chat):  # noqa: F811
    traj = planted([20, 20, 2000])
    drops: dict = {}
    out = build_samples(traj, tokenizer, mixture(None), drops)
    assert [s["step"] for s in out["sft"]] == [0, 1, 2] and not any(drops.values())
    reasoned = Trajectory(traj.steps[:2], frozenset(), "cur-1", {traj.steps[1].transition_id: "think " * 1400})
    out = build_samples(reasoned, tokenizer, mixture(), drops := {})
    assert [s["step"] for s in out["sft"]] == [0] and [s["step"] for s in out["rl"]] == [0, 1]  # RL has no reasoning
    assert dict(drops["sft"]) == {"target_too_long": 1} and not drops["rl"]


def test_drops_reach_the_stats_the_report_and_the_card(tokenizer):  # noqa: F811
    cfg = mixture()
    stats = Stats()
    samples_of(planted([20, 20, 2000, 20]), tokenizer, cfg, stats)
    merged = Stats()
    merged.merge(stats.to_json())  # as the driver sums the workers' files
    assert merged.drops() == {
        "cpt": {"turn_too_long": 2},
        "rl": {"prompt_too_long": 1, "target_too_long": 1},
        "sft": {"prompt_too_long": 1, "target_too_long": 1},
    }

    report = SimpleNamespace(
        dropped=merged.drops(), lengths={"sft": {"samples": 2, "p50": 100, "p90": 200, "p99": 210, "max": 210}}
    )
    text = "\n".join(_length_lines(cfg, report))
    assert "| sft | 2 | 100 | 200 | 210 | 210 | 1,200 | 2 |" in text
    assert f"| sft | `target_too_long`: {LENGTH_REASONS['target_too_long']} | 1 |" in text
