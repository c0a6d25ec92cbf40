"""Protocol conformance, one domain at a time: the shipped example job of each domain served
as it is, an episode through openenv-core's own client (reset by task id, the task's first
scripted action, ``end_episode``), and its steps recorded with the domain's provenance; and
``backend: sim``, a planted tiny world model as the environment."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from openenv.core.generic_client import GenericEnvClient

from pipelines.query import run_query
from serve.session import Served, load_served
from tests.serve.conftest import TASKS, running

JOBS = Path(__file__).resolve().parents[2] / "examples" / "jobs"
DOMAINS = [
    pytest.param("terminal", "terminal-swe.yaml", marks=pytest.mark.sandbox),
    pytest.param("swe", "terminal-swe.yaml", marks=pytest.mark.sandbox),
    pytest.param("search", "search.yaml"),
    pytest.param("mcp", "mcp.yaml", marks=pytest.mark.mcp_servers),
    pytest.param("web", "web.yaml", marks=pytest.mark.system),
    pytest.param("os", "os.yaml", marks=pytest.mark.system),
    pytest.param("android", "android-sim.yaml", marks=pytest.mark.system),
]


def _episode(url: str, task_id: str, action: dict | None) -> list:
    async def run():
        async with GenericEnvClient(base_url=url, message_timeout_s=180) as env:
            first = await env.reset(task_id=task_id, policy="conformance")
            got = [first]
            if action is not None:
                got.append(await env.step(action))
            got.append(await env.step({"action": "end_episode"}))
            return got

    return asyncio.run(run())


@pytest.mark.parametrize(("domain", "job"), DOMAINS)
def test_every_domain_serves_an_episode_through_openenvs_client(domain, job, tmp_path):
    job_cfg, tasks = load_served(JOBS / job)
    task = next(t for t in tasks if t.domain == domain)
    action = dict(task.actions[0]) if task.actions else None
    served = Served(job_cfg, tasks, store=str(tmp_path / "store"))
    with running(served) as url:
        first, *steps, end = _episode(url, task.id, action)
    assert first.observation["domain"] == domain and first.observation["task_id"] == task.id
    assert first.observation["text"].strip() and not first.done
    for r in steps:
        assert r.observation["action_error"] is None, r.observation["action_error"]
        assert r.observation["text"].strip() and r.observation["step"] == 1
    assert end.done and (end.reward is not None) == bool(task.check)
    sql = "SELECT domain, task_id, provenance.policy AS policy, provenance.origin AS origin FROM transitions"
    rows = run_query(sql, str(tmp_path / "store")).to_pylist()
    origin = "simulated" if job == "android-sim.yaml" else "collected"  # the simulated phone says what it is
    assert len(rows) == len(steps) and all(
        (r["domain"], r["task_id"], r["policy"], r["origin"]) == (domain, task.id, "conformance", origin) for r in rows
    )


@pytest.mark.sandbox
def test_the_sim_backend_serves_the_world_model_and_records_simulated_steps(tmp_path):
    from simulate.tiny import planted_model

    planted = planted_model(tmp_path / "wm", "4\n[exit 0] /work$")
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({"tasks": TASKS}))
    job = {
        "job_id": "served-sim",
        "tasks": ["suite.yaml"],
        "sandbox": {"backend": "local"},
        "sim": {"model": planted, "temperature": 0.0, "max_new_tokens": 16},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    job_cfg, tasks = load_served(tmp_path / "job.yaml", backend="sim")
    assert job_cfg.backend == "sim"
    served = Served(job_cfg, tasks, store=str(tmp_path / "store"))
    with running(served) as url:
        first, step, end = _episode(url, "t/count", {"action": "run", "command": "wc -l < notes.txt"})
    assert first.observation["domain"] == "terminal" and step.observation["text"] == "4\n[exit 0] /work$"
    assert end.done
    rows = run_query(
        "SELECT provenance.origin AS origin, provenance.sandbox_backend AS sb, provenance.extra AS extra FROM transitions",
        str(tmp_path / "store"),
    ).to_pylist()
    assert len(rows) == 1 and rows[0]["origin"] == "simulated" and rows[0]["sb"] == "sim"
    extra = json.loads(rows[0]["extra"])
    assert extra["simulator"]["model"] == planted and extra["stop_reason"] == "complete"
