"""TRL's own ``GRPOTrainer`` trains a tiny policy on served terminal tasks, over a
``trajforge serve`` server and in-process: the environment is stepped through its typed tool
methods, scored by the task's check, and every step is recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.query import run_query
from serve.session import Served, load_served
from serve.trl import environment_class, environment_factory
from tests.serve.conftest import running

CALL = '<tool_call>\n{"name": "run", "arguments": {"command": "wc -l < notes.txt > count.txt"}}\n</tool_call>'


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A planted Qwen3-template policy whose every turn is the one tool call above."""
    from trl.chat_template_utils import qwen3_chat_template

    from simulate.tiny import planted_chain

    out = tmp_path_factory.mktemp("policy")
    return planted_chain(out, [CALL], ["Write the number of lines.", CALL] * 3, chat_template=qwen3_chat_template)


def _train(policy: str, factory, out: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    from training.assets import load_model, load_tokenizer
    from training.config import ModelSpec, TrainConfig

    tok = load_tokenizer(TrainConfig(stage="sft", model=ModelSpec(path=policy)))
    tok.chat_template = qwen3_chat_template
    model = load_model(ModelSpec(path=policy), tok)
    rows = {"prompt": [[{"role": "user", "content": "Solve the task."}]] * 4, "task_id": ["t/count"] * 4}
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=48,
        max_steps=2,
        max_tool_calling_iterations=1,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        temperature=1.0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[],
        args=args,
        train_dataset=Dataset.from_dict(rows),
        processing_class=tok,
        environment_factory=factory,
    )
    trainer.train()
    rewards = [log["reward"] for log in trainer.state.log_history if "reward" in log]
    assert rewards and max(rewards) == 1.0  # the check scored the rollouts that ran the tool call


def _recorded(store: Path) -> list[dict]:
    sql = (
        "SELECT task_id, action.canonical AS action, reward, provenance.policy AS policy, provenance.extra AS extra "
        "FROM transitions ORDER BY trajectory_id, step"
    )
    return run_query(sql, str(store)).to_pylist()


@pytest.mark.parametrize("where", ["server", "in-process"])
def test_grpo_trainer_steps_trajforge_environments_and_the_steps_are_recorded(where, policy, job_file, tmp_path):
    job, tasks = load_served(job_file)
    served = Served(job, tasks, store=str(tmp_path / "store"))
    if where == "server":
        with running(served, max_sessions=16) as url:
            _train(policy, environment_factory("terminal", url=url), tmp_path / "out")
    else:
        _train(policy, environment_factory("terminal", served=served), tmp_path / "out")
        served.close()
    rows = _recorded(tmp_path / "store")
    assert rows, "no served step was recorded"
    assert {r["task_id"] for r in rows} == {"t/count"} and {r["policy"] for r in rows} == {"trl-grpo"}
    called = {"kind": "run", "command": "wc -l < notes.txt > count.txt", "timeout": 30.0}
    assert all(json.loads(r["action"]) == called for r in rows)
    assert {r["reward"] for r in rows} == {1.0}  # each episode's check, on its last (only) step
    assert {json.loads(r["extra"])["stop_reason"] for r in rows} == {"complete"}


def test_the_tool_methods_are_the_domains_actions_with_their_types():
    from transformers.utils import get_json_schema

    env = environment_class("swe")
    schema = get_json_schema(env.str_replace)["function"]
    assert schema["name"] == "str_replace" and set(schema["parameters"]["required"]) == {"path", "old", "new"}
    assert not hasattr(env, "close") and hasattr(env, "reset") and hasattr(env, "get_reward")
    run = get_json_schema(environment_class("terminal").run)["function"]["parameters"]
    assert run["properties"]["timeout"]["type"] == "number" and run["required"] == ["command"]
