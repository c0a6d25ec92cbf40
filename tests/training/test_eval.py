"""Open-loop prompts: the model's own predictions replace the recorded observations."""

from __future__ import annotations

from training.evaluate import _rollout_chains, open_loop_prompt


def rec(step, dropped, gt, prompt, traj="t1", domain="terminal"):
    return {"step": step, "dropped_turns": dropped, "ground_truth": gt, "prompt": prompt, "trajectory_id": traj, "domain": domain}


def test_open_loop_prompt_puts_predictions_where_the_recorded_observations_stood():
    sys = {"role": "system", "content": "S"}
    chain = [
        rec(0, 0, "obs0", [sys, {"role": "user", "content": "## Current State\nstart\n\n## Action\nls"}]),
        rec(
            1,
            0,
            "obs1",
            [
                sys,
                {"role": "user", "content": "## Current State\nstart\n\n## Action\nls"},
                {"role": "assistant", "content": "<predicted_observation>\nobs0\n</predicted_observation>"},
                {"role": "user", "content": "## Action\ncd x"},
            ],
        ),
        # history dropped for the budget: the first user message restates obs1 as the current state
        rec(
            2,
            2,
            "obs2",
            [sys, {"role": "user", "content": "(2 earlier turns omitted)\n\n## Current State\nobs1\n\n## Action\npwd"}],
        ),
    ]
    preds = ["P0", "P1"]
    one = open_loop_prompt(chain, 1, preds)
    assert one[2]["content"] == "<predicted_observation>\nP0\n</predicted_observation>" and one[1] == chain[1]["prompt"][1]
    two = open_loop_prompt(chain, 2, preds)
    assert "## Current State\nP1\n" in two[1]["content"] and "obs1" not in two[1]["content"]
    assert chain[2]["prompt"][1]["content"].count("obs1") == 1  # the records are not changed


def test_rollout_chains_need_every_step_up_to_k():
    records = [rec(0, 0, "a", [], "t1"), rec(1, 0, "b", [], "t1"), rec(0, 0, "a", [], "t2"), rec(2, 0, "c", [], "t2")]
    chains = _rollout_chains(records, 2, per_domain=5)
    assert [c[0]["trajectory_id"] for c in chains] == ["t1"]
    assert _rollout_chains(records, 2, per_domain=0) == []


def test_judge_table_averages_the_five_scores_and_counts_failures():
    import json

    from tests.collectors.test_policies import ChatServer
    from training.config import Judge
    from training.evaluate import _judge_table

    good = {"format": 5, "factuality": 3, "consistency": 4, "realism": 2, "quality": 1}
    server = ChatServer([{"content": json.dumps(good)}, {"content": "not json"}])  # after the first request's 500
    try:
        records = [
            rec(0, 0, "a", [{"role": "user", "content": "ls"}], domain="terminal"),
            rec(1, 0, "b", [{"role": "user", "content": "ls"}], domain="web"),
        ]
        table = _judge_table(Judge(base_url=server.url, model="j", retries=1, concurrency=1), records, ["x", "y"])
    finally:
        server.close()
    assert table["terminal"] == {**{k: float(v) for k, v in good.items()}, "failures": 0}
    assert table["web"] == {"failures": 1}
