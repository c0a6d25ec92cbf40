"""The concurrent episode runner: same output as one at a time, admission limits, model
calls that retry and account, stop reasons, history views, and a clean shutdown."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from benchmarks.fake_llm import FakeLLM, Script
from collectors import rollouts, runner
from collectors.env import Task
from collectors.jobrun import EpisodeSpec
from collectors.jobs import JobConfig, load_job
from collectors.policies import HistoryView, OpenAIChatPolicy
from collectors.terminal import TerminalEnv
from llm import chat as chat_module
from llm.chat import AsyncChat, ChatError, ContextLengthError, PolicyError, retry_after
from pipelines.query import run_query
from schemas.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _suite(tmp_path: Path, n: int, actions: list[dict] | None = None) -> Path:
    tasks = [
        {
            "id": f"conc/{i}",
            "domain": "terminal",
            "instruction": f"task {i}",
            "actions": actions
            if actions is not None
            else [{"action": "run", "command": f"echo {i}; pwd"}, {"action": "run", "command": "ls"}],
            "check": "true",
        }
        for i in range(n)
    ]
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(tasks))
    return path


def _job(tmp_path: Path, name: str = "job.yaml", **keys) -> tuple[JobConfig, list]:
    body = {
        "job_id": "conc",
        "tasks": [str(_suite(tmp_path, keys.pop("n", 6), keys.pop("actions", None)))],
        "sandbox": {"backend": "local"},
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(body | keys))
    return load_job(path)


def _rows(store: Path) -> list[tuple]:
    return [
        tuple(r.values())
        for r in run_query(
            "SELECT trajectory_id, step, action.canonical AS a, next_state.text AS t, content_hash AS h, reward, terminated,"
            " truncated, json_extract_string(provenance.extra, '$.stop_reason') AS stop FROM transitions ORDER BY 1, 2",
            str(store),
        ).to_pylist()
    ]


def test_concurrent_runs_write_what_one_at_a_time_writes(tmp_path):
    stores = {}
    for name, keys in {
        "serial": {"workers": 0, "concurrency": 1},
        "coroutines": {"workers": 0, "concurrency": 6, "max_starting": 2},
        "processes": {"workers": 2, "concurrency": 3},
    }.items():
        job, tasks = _job(tmp_path, f"{name}.yaml", **keys)
        store = tmp_path / f"store-{name}"
        summary = runner.run_job(job, tasks, str(store), log=lambda m: None)
        assert summary.collected == 6 and summary.failed == 0 and summary.stop_reasons == {"complete": 6}
        stores[name] = _rows(store)
    assert len(stores["serial"]) == 12 and stores["serial"][0][-1] == "complete"
    assert stores["coroutines"] == stores["serial"] and stores["processes"] == stores["serial"]


def test_no_more_sandboxes_start_at_once_than_the_limit(tmp_path, monkeypatch):
    starting, peak, lock = [0], [0], threading.Lock()
    fresh = TerminalEnv._fresh

    def counted(self, task):
        with lock:
            starting[0] += 1
            peak[0] = max(peak[0], starting[0])
        try:
            time.sleep(0.2)  # a slow start: without the limit, all eight would overlap
            return fresh(self, task)
        finally:
            with lock:
                starting[0] -= 1

    monkeypatch.setattr(TerminalEnv, "_fresh", counted)
    job, tasks = _job(tmp_path, n=8, workers=0, concurrency=8, max_starting=2, start_timeout_s=1.0)
    run = rollouts.EpisodeRunner(job)
    specs = [EpisodeSpec("conc", "conc-run", t, 0, 0, job.model_dump()) for t in tasks]

    async def go():
        return [r async for r in rollouts.run_specs(specs, job, runner=run)]

    results = asyncio.run(go())
    # eight starts of 0.2 s each, two at a time, with a start time limit of 1 s: none fails
    assert all(r.ok for r in results) and len(results) == 8, [r.reason for r in results]
    assert peak[0] == 2 and run.pool.peak_starting == 2
    assert run.peak_in_flight == 8
    assert rollouts.live_envs() == []  # every sandbox closed at the end


def test_a_pooled_environment_is_reused_and_a_dead_one_replaced(tmp_path):
    job, tasks = _job(tmp_path, n=3, workers=0, concurrency=1)
    specs = [EpisodeSpec("conc", "conc-run", t, 0, 0, job.model_dump()) for t in tasks]
    run = rollouts.EpisodeRunner(job)
    made = []

    async def go():
        out = []
        async for r in rollouts.run_specs(specs, job, runner=run):
            envs = rollouts.live_envs()
            made.extend(e for e in envs if e not in made)
            if len(out) == 0:
                envs[0].sandbox.close()  # the pooled sandbox dies between episodes
            out.append(r)
        return out

    results = asyncio.run(go())
    assert all(r.ok for r in results)
    assert len(made) == 2  # the first sandbox served until it died; one more after


# -- the model client -------------------------------------------------------------------------
def test_retry_after_is_read_as_seconds_or_a_date():
    assert retry_after({"retry-after": "3"}) == 3.0
    assert retry_after({"retry-after-ms": "250"}) == 0.25
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert retry_after({"retry-after": "soon"}) is None and retry_after({}) is None


def test_the_client_waits_what_retry_after_says_and_counts_retries(monkeypatch):
    server = FakeLLM(Script(latency=0, faults=(429, 500, 0), retry_after=0.7))
    url = server.start()
    waits = []

    async def sleep(s):
        waits.append(s)

    monkeypatch.setattr(chat_module, "_sleep", sleep)
    try:

        async def go():
            client = AsyncChat(url, retries=3, base_delay_s=0.5)
            try:
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TerminalEnv.action_space.tools()}
                return await client.complete(body)
            finally:
                await client.aclose()

        reply = asyncio.run(go())
    finally:
        server.close()
    assert reply.retries == 3 and reply.message["tool_calls"][0]["function"]["name"] == "run"
    assert waits[0] == 0.7  # the 429's Retry-After, exactly
    assert 0.25 <= waits[1] <= 0.5 and 0.5 <= waits[2] <= 1.0  # then jittered, doubling backoff
    assert reply.prompt_tokens > 0 and reply.completion_tokens == 20


@pytest.mark.parametrize(
    ("faults", "error", "match"),
    [((401,), PolicyError, "HTTP 401"), ((500, 500, 500), ChatError, r"HTTP 500.*after 3 tries")],
)
def test_refusals_are_not_retried_and_outages_are_retried_then_fail(faults, error, match):
    server = FakeLLM(Script(latency=0, faults=faults))
    url = server.start()
    try:

        async def go():
            client = AsyncChat(url, retries=2, base_delay_s=0.01)
            try:
                await client.complete({"model": "m", "messages": [{"role": "user", "content": "x"}]})
            finally:
                await client.aclose()

        with pytest.raises(error, match=match):
            asyncio.run(go())
    finally:
        server.close()
    assert server.stats.requests == len(faults)


def test_a_context_length_error_is_its_own_error():
    server = FakeLLM(Script(latency=0, max_prompt_chars=10))
    url = server.start()
    try:

        async def go():
            client = AsyncChat(url, retries=3)
            try:
                await client.complete({"model": "m", "messages": [{"role": "user", "content": "a long prompt"}]})
            finally:
                await client.aclose()

        with pytest.raises(ContextLengthError, match="maximum context length"):
            asyncio.run(go())
    finally:
        server.close()
    assert server.stats.requests == 1


# -- LLM jobs: stop reasons, accounting, views ------------------------------------------------
@pytest.fixture
def llm():
    servers = []

    def make(**kw) -> FakeLLM:
        server = FakeLLM(Script(**({"latency": 0.05} | kw)))
        server.start()
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.close()


def _llm_job(tmp_path, server, **keys):
    policy = {"kind": "openai", "model": "fake", "base_url": server.url, "retries": 2} | keys.pop("policy", {})
    return _job(tmp_path, actions=[], policy=policy, **({"workers": 0, "concurrency": 4} | keys))


def test_stop_reasons_are_recorded_per_episode(tmp_path, llm):
    cases = {
        "complete": (llm(calls=2), {}),
        "max_steps": (llm(calls=5), {"max_steps": 2}),
        "context_length": (llm(calls=5, max_prompt_chars=1000), {}),  # the third call is too long
        "policy_error": (llm(calls=5, faults=(200, 200, 200, 200, 200, 401)[5:]), {}),
    }
    for reason, (server, keys) in cases.items():
        job, tasks = _llm_job(tmp_path, server, n=2, job_id=f"stop-{reason.replace('_', '-')}", **keys)
        store = tmp_path / f"store-{reason}"
        summary = runner.run_job(job, tasks, str(store), log=lambda m: None)
        ledger = [json.loads(x) for p in (store / "jobs").rglob("*.jsonl") for x in p.read_text().splitlines()]
        if reason == "policy_error":  # the first call refused: nothing recorded, not retried
            assert summary.failed == 1 and summary.collected == 1, summary
            failed = [e for e in ledger if e["status"] == "failed"]
            assert failed[0]["stop_reason"] == "policy_error" and failed[0]["attempts"] == 1
            continue
        assert summary.stop_reasons == {reason: 2}, (reason, summary)
        stops = {r[-1] for r in _rows(store)}
        assert stops == {reason}
        assert {e["stop_reason"] for e in ledger} == {reason}


def test_an_episode_past_its_time_limit_stops_with_timeout(tmp_path, llm):
    server = llm(calls=50, latency=0.3)
    job, tasks = _llm_job(tmp_path, server, n=1, episode_timeout_s=1.0, retries=0)
    summary = runner.run_job(job, tasks, str(tmp_path / "store"), log=lambda m: None)
    assert summary.stop_reasons == {"timeout": 1} and summary.collected == 1
    rows = _rows(tmp_path / "store")
    assert 1 <= len(rows) <= 4 and rows[-1][7] is True  # the last step is marked truncated


def test_an_endpoint_that_stays_down_is_an_infra_error_after_episode_retries(tmp_path, llm):
    server = llm(p500=1.0, latency=0)
    job, tasks = _llm_job(tmp_path, server, n=1, retries=1, policy={"retries": 1})
    summary = runner.run_job(job, tasks, str(tmp_path / "store"), log=lambda m: None)
    assert summary.failed == 1 and summary.stop_reasons == {"infra_error": 1}
    assert server.stats.requests == 4  # 2 tries a call, 2 attempts of the episode


def test_token_accounting_adds_up(tmp_path, llm):
    server = llm(calls=3, p429=0.2, retry_after=0.01, seed=3)
    job, tasks = _llm_job(
        tmp_path, server, n=5, price={"prompt_per_mtok": 2.0, "completion_per_mtok": 8.0}, policy={"retries": 8}
    )
    summary = runner.run_job(job, tasks, str(tmp_path / "store"), log=lambda m: None)
    assert summary.collected == 5
    assert summary.llm_calls == server.stats.answered == 5 * 4  # 3 tool calls and a final answer each
    assert summary.prompt_tokens == server.stats.prompt_tokens and summary.completion_tokens == server.stats.completion_tokens
    assert summary.llm_retries == server.stats.r429 > 0
    assert summary.cost == pytest.approx((server.stats.prompt_tokens * 2 + server.stats.completion_tokens * 8) / 1e6)
    (sql,) = run_query(
        "SELECT sum(CAST(json_extract(provenance.extra, '$.llm.prompt_tokens') AS BIGINT))"
        " + sum(coalesce(CAST(json_extract(provenance.extra, '$.llm_final.prompt_tokens') AS BIGINT), 0)) AS p,"
        " sum(CAST(json_extract(provenance.extra, '$.llm.retries') AS BIGINT))"
        " + sum(coalesce(CAST(json_extract(provenance.extra, '$.llm_final.retries') AS BIGINT), 0)) AS r FROM transitions",
        str(tmp_path / "store"),
    ).to_pylist()
    assert sql["p"] == server.stats.prompt_tokens and sql["r"] == server.stats.r429


@pytest.mark.parametrize(
    ("history", "shown"),
    [
        ({"view": "all"}, [0, 1, 2, 3, 4]),
        ({"view": "last", "turns": 2}, [0, 1, 2, 2, 2]),
        ({"view": "tokens", "budget": 60}, None),
    ],
)
def test_the_policy_sees_its_view_and_the_store_keeps_everything(tmp_path, llm, history, shown):
    server = llm(calls=4, keep_requests=True)
    job, tasks = _llm_job(tmp_path, server, n=1, policy={"history": history})
    runner.run_job(job, tasks, str(tmp_path / "store"), log=lambda m: None)
    turns = [sum(m["role"] == "tool" for m in r["messages"]) for r in server.requests]
    views = [
        json.loads(r["e"])
        for r in run_query("SELECT provenance.extra AS e FROM transitions ORDER BY step", str(tmp_path / "store")).to_pylist()
    ]
    assert [v["llm"]["turns_shown"] for v in views] == turns[:4] and [v["llm"]["turns_total"] for v in views] == [0, 1, 2, 3]
    assert views[0]["llm"]["view"] == HistoryView.of(history).label
    if shown is not None:
        assert turns == shown
    else:  # the newest turns within 60 tokens (4 characters a token): fewer than all, never none after the first
        assert turns[0] == 0 and all(1 <= t < i for i, t in enumerate(turns) if i > 1)
    assert len(_rows(tmp_path / "store")) == 4  # the full history is stored whatever the model saw


def test_a_summary_view_asks_the_model_for_a_summary_of_the_dropped_turns(tmp_path, llm):
    server = llm(calls=4, keep_requests=True)
    job, tasks = _llm_job(tmp_path, server, n=1, policy={"history": {"view": "summary", "turns": 1}})
    summary = runner.run_job(job, tasks, str(tmp_path / "store"), log=lambda m: None)
    summaries = [r for r in server.requests if not r.get("tools")]
    assert len(summaries) == 3  # after steps 2, 3 and 4, one more turn drops out each time
    later = [r for r in server.requests if r.get("tools")][-1]
    assert any("Summary of the earlier steps" in (m.get("content") or "") for m in later["messages"])
    assert summary.llm_calls == 5 and summary.prompt_tokens == server.stats.prompt_tokens


def test_history_views_are_checked():
    with pytest.raises(ConfigError, match=r"policy\.history"):
        HistoryView.of({"view": "last"})
    with pytest.raises(ConfigError, match=r"policy\.history"):
        OpenAIChatPolicy(TerminalEnv.action_space, model="m", base_url="http://x", history={"view": "newest", "turns": 2})


def test_the_sync_act_works_outside_an_event_loop(llm):
    server = llm(calls=1)
    policy = OpenAIChatPolicy(TerminalEnv.action_space, model="m", base_url=server.url)
    policy.reset(Task(id="t", domain="terminal", instruction="x"), 0)
    assert policy.act(None, []) == {"action": "run", "command": "echo step 0"}


# -- shutdown -----------------------------------------------------------------------------------
def _leftovers(marker: str) -> list[str]:
    """Processes still running whose command line names ``marker`` (a test's folder)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


def test_sigint_commits_what_finished_leaves_no_sandbox_and_a_rerun_completes(tmp_path, llm):
    server = llm(calls=3, latency=0.4)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "job_id": "shutdown",
                "tasks": [str(_suite(tmp_path, 12, []))],
                "workers": 1,
                "concurrency": 4,
                "shutdown_grace_s": 0.5,
                "sandbox": {"backend": "local"},
                "policy": {"kind": "openai", "model": "fake", "base_url": server.url},
            }
        )
    )
    store = tmp_path / "store"
    cmd = [sys.executable, str(ROOT / "trajforge.py"), "collect", str(job_file), "--store", str(store)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        store.exists() and any(p.stat().st_size for p in (store / "jobs").rglob("*.jsonl"))
    ):
        time.sleep(0.1)  # until the first episode is in the ledger: some done, others in flight
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err, err[-2000:]
    first = run_query("SELECT count(DISTINCT trajectory_id) AS n FROM transitions", str(store)).to_pylist()[0]["n"]
    assert 0 < first < 12
    from sandboxes.gc import gc

    left = gc(docker=False)  # what the interrupted run left behind, if anything, is swept (and named) here
    assert left.local == [] and left.cgroups == [] and left.disks == [], left.lines()
    assert _leftovers(str(tmp_path)) == []
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = run_query(
        "SELECT trajectory_id, step, count(*) AS n FROM transitions GROUP BY ALL HAVING n > 1", str(store)
    ).to_pylist()
    assert rows == []  # no duplicates
    total = run_query("SELECT count(DISTINCT trajectory_id) AS n FROM transitions", str(store)).to_pylist()[0]["n"]
    assert total == 12
