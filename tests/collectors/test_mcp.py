"""The MCP environment over the official SDK: conformance against the published servers
from PyPI (mcp-server-time, mcp-server-git, mcp-server-sqlite, installed by `make
mcp-servers`) and every stub; arguments checked against the tools' schemas before
sending; tool errors, JSON-RPC errors, hangs, crashes and huge results; streamable HTTP;
provenance; exploration; and the example jobs through the front door."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collectors.check_env import check_env
from collectors.env import EnvError, Task, load_suite
from collectors.jobs import load_job
from collectors.mcp.client import ServerDied, ServerTimeout
from collectors.mcp.env import MCPEnv, render_result
from collectors.mcp.servers import STUBS
from collectors.runner import run_job
from pipelines.query import run_query
from schemas.errors import ConfigError
from schemas.transition import canonical_json
from tests.conftest import cli

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TASKS = {t.id: t for t in load_suite(ROOT / "examples" / "tasks" / "mcp.yaml")}


def _task(env_id: str, *actions: dict, **kw) -> Task:
    return Task(id=f"t/{env_id}", domain="mcp", env_id=env_id, instruction="test", actions=tuple(actions), **kw)


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_check_env_conformance_on_published_servers_and_stubs(task_id):
    task = TASKS[task_id]
    check_env(lambda: MCPEnv(env_id=task.env_id), task, seed=7)


def test_check_env_conformance_on_the_fault_testbed():
    task = _task(
        "testbed",
        {"action": "call_tool", "name": "echo", "arguments": {"text": "hi"}},
        {"action": "call_tool", "name": "huge", "arguments": {"chars": 50}},
        {"action": "finish"},
    )
    check_env(lambda: MCPEnv(env_id="testbed"), task)


def test_every_stub_and_published_server_has_a_shipped_task():
    assert {t.env_id for t in TASKS.values()} == {"time", "git", "sqlite"} | (set(STUBS) - {"testbed"})


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_scripted_episodes_reach_their_success_check(task_id):
    task = TASKS[task_id]
    with MCPEnv(env_id=task.env_id) as env:
        obs, info = env.reset(seed=3, task=task)
        assert obs.text.startswith("MCP server: ") and f"Task: {task.instruction}" in obs.text
        assert info["provenance"]["image_digest"] == env.image_digest
        if "tool" in task.check:
            assert env.check_task(task)[0] == 0.0  # not done at reset
        for action in task.actions:
            obs, _, _, _, info = env.step(action)
            assert info["action_error"] is None, (action, info["action_error"])
            assert json.loads(obs.extra)["outcome"] in ("ok", "tool_error", "finished")
        assert env.check_task(task)[0] == 1.0


def test_stub_state_depends_on_earlier_calls_and_is_reset_per_episode():
    with MCPEnv(env_id="bank") as env:
        env.reset(seed=1, task=_task("bank"))
        before = json.loads(env.step({"action": "call_tool", "name": "list_accounts"})[0].text.split("\n}\n")[0] + "}")
        moved = env.step(
            {
                "action": "call_tool",
                "name": "transfer",
                "arguments": {"from_account": "savings", "to_account": "checking", "amount": "10.00"},
            }
        )[0]
        assert json.loads(moved.extra)["outcome"] == "ok"
        after = env.step({"action": "call_tool", "name": "list_accounts"})[0].text
        assert f'"balance": "{float(before["balance"]) + 10:.2f}"' in after
        env.reset(seed=1, task=_task("bank"))  # a fresh server: the seeded balances again
        assert env.step({"action": "call_tool", "name": "list_accounts"})[0].text.startswith(
            f'{{\n  "account": "checking",\n  "balance": "{before["balance"]}"'
        )
        env.reset(seed=2, task=_task("bank"))  # another seed, another state
        assert f'"balance": "{before["balance"]}"' not in env.step({"action": "call_tool", "name": "list_accounts"})[0].text


def test_arguments_are_checked_against_the_tool_schema_before_sending():
    with MCPEnv(env_id="bank") as env:
        obs, _ = env.reset(seed=1, task=_task("bank"))
        bad = {
            "action": "call_tool",
            "name": "transfer",
            "arguments": {"from_account": "savings", "to_account": "checking", "amount": 10},
        }
        after, reward, terminated, _, info = env.step(bad)
        assert info["action_error"] == "call_tool.arguments.amount: 10 is not of type 'string' (tool transfer)"
        assert after == obs and reward is None and not terminated
        missing = env.step({"action": "call_tool", "name": "transfer", "arguments": {"amount": "1.00"}})[4]["action_error"]
        assert missing.startswith("call_tool.arguments: 'from_account' is a required property")
        unknown = env.step({"action": "call_tool", "name": "wire_money", "arguments": {}})[4]["action_error"]
        assert unknown.startswith("unknown tool 'wire_money' (tools: list_accounts, transfer,")
        # nothing reached the server: no transaction was made
        history = env.step({"action": "call_tool", "name": "list_transactions", "arguments": {"account_name": "savings"}})[0]
        assert history.text == "[]"


def test_tool_errors_and_jsonrpc_errors_are_recorded_apart():
    with MCPEnv(env_id="testbed") as env:
        env.reset(seed=0, task=_task("testbed"))
        obs = env.step({"action": "call_tool", "name": "reject", "arguments": {"reason": "quota"}})[0]
        assert obs.text == "[JSON-RPC error -32602] rejected: quota"
        assert json.loads(obs.extra) == {"tool": "reject", "outcome": "jsonrpc_error", "error_code": -32602}
    with MCPEnv(env_id="time") as env:
        env.reset(seed=0, task=_task("time"))
        obs = env.step({"action": "call_tool", "name": "get_current_time", "arguments": {"timezone": "Mars/Olympus"}})[0]
        assert obs.text.startswith("[tool error]\n") and "Mars/Olympus" in obs.text
        assert json.loads(obs.extra)["outcome"] == "tool_error"


def test_a_hanging_server_times_out_and_is_restarted():
    with MCPEnv(env_id="testbed", options={"call_timeout_s": 1.5}) as env:
        env.reset(seed=0, task=_task("testbed"))
        t0 = time.monotonic()
        with pytest.raises(ServerTimeout, match=r"no answer to tools/call sleep within 1\.5 s; server stopped"):
            env.step({"action": "call_tool", "name": "sleep", "arguments": {"seconds": 60}})
        assert time.monotonic() - t0 < 15 and env.restarts == 1 and env.conn.closed
        env.reset(seed=0, task=_task("testbed"))  # a fresh server process
        obs = env.step({"action": "call_tool", "name": "echo", "arguments": {"text": "back"}})[0]
        assert obs.text == "back"


def test_a_crashing_server_is_reported_and_restarted():
    with MCPEnv(env_id="testbed") as env:
        env.reset(seed=0, task=_task("testbed"))
        with pytest.raises(ServerDied, match="died during tools/call crash"):
            env.step({"action": "call_tool", "name": "crash", "arguments": {}})
        env.reset(seed=0, task=_task("testbed"))
        assert env.step({"action": "call_tool", "name": "echo", "arguments": {"text": "alive"}})[0].text == "alive"


def test_huge_output_is_capped_and_flagged():
    with MCPEnv(env_id="testbed", options={"obs_cap_chars": 5000}) as env:
        env.reset(seed=0, task=_task("testbed"))
        obs = env.step({"action": "call_tool", "name": "huge", "arguments": {"chars": 200_000}})[0]
        assert obs.truncated and json.loads(obs.extra)["capped_from_chars"] == 200_000
        assert len(obs.text) < 5100 and obs.text.endswith("[... 195000 more characters cut ...]")


def test_jobs_retry_a_hang_on_a_fresh_server_and_record_a_dying_one_as_failed(tmp_path):
    marker = tmp_path / "hung-once"
    suite = tmp_path / "tasks.yaml"
    suite.write_text(
        json.dumps(
            {
                "tasks": [
                    {
                        "id": "hang-once",
                        "domain": "mcp",
                        "env_id": "testbed",
                        "instruction": "echo after a hang",
                        "actions": [
                            {"action": "call_tool", "name": "hang_once", "arguments": {"marker": str(marker)}},
                            {"action": "call_tool", "name": "echo", "arguments": {"text": "done"}},
                        ],
                    },
                    {
                        "id": "crash",
                        "domain": "mcp",
                        "env_id": "testbed",
                        "instruction": "crash",
                        "actions": [{"action": "call_tool", "name": "crash", "arguments": {}}],
                    },
                ]
            }
        )
    )
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"job_id: faults\ntasks: [{suite}]\nworkers: 0\nretries: 1\nmcp: {{call_timeout_s: 2}}\n")
    job, tasks = load_job(job_file)
    summary = run_job(job, tasks, str(tmp_path / "store"), log=lambda m: None)
    assert summary.collected == 1 and summary.failed == 1 and summary.retried == 2
    assert "died during tools/call crash" in summary.failures["crash#0"]
    ledger = [json.loads(line) for line in (tmp_path / "store" / "jobs" / "faults" / "ledger.jsonl").read_text().splitlines()]
    assert {(e["episode"], e["status"], e["attempts"]) for e in ledger} == {("hang-once#0", "done", 2), ("crash#0", "failed", 2)}
    hung = next(e for e in ledger if e["episode"] == "hang-once#0")
    timeout = "ServerTimeout: mcp server 'testbed': no answer to tools/call hang_once within 2 s; server stopped"
    assert hung["retried_after"] == [timeout]  # the hang is on record, apart from the data
    rows = run_query("SELECT step, next_state.text AS text FROM transitions ORDER BY step", str(tmp_path / "store")).to_pylist()
    assert [r["text"] for r in rows] == ["ok", "done"]  # only the retried, finished episode; nothing of the hung try


def test_provenance_names_the_server_version_and_tool_list_hash(tmp_path):
    job, tasks = load_job(ROOT / "examples" / "jobs" / "mcp.yaml")
    tasks = [t for t in tasks if t.env_id == "time"]
    run_job(job.model_copy(update={"workers": 0}), tasks, str(tmp_path / "store"), log=lambda m: None)
    row = run_query(
        "SELECT provenance.image_digest AS d, provenance.extra AS x, provenance.sandbox_backend AS b FROM transitions LIMIT 1",
        str(tmp_path / "store"),
    ).to_pylist()[0]
    extra = json.loads(row["x"])
    assert row["d"] == f"mcp-time {extra['mcp_server_version']}" and row["b"] == "mcp"
    with MCPEnv(env_id="time") as env:
        env.reset(seed=0)
        assert extra["mcp_tools_sha256"] == hashlib.sha256(canonical_json(env.tool_list()).encode()).hexdigest()
    # the version the server reports is the published package's
    dist = next((ROOT / ".venv-mcp" / "mcp-server-time").glob("lib/python*/site-packages/mcp_server_time-*.dist-info"))
    assert dist.name.removesuffix(".dist-info").split("-")[1] == extra["mcp_server_version"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_over_streamable_http():
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "collectors.mcp.stubs.tickets",
            "--seed",
            "4",
            "--transport",
            "streamable-http",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        options = {"servers": {"tracker": {"url": f"http://127.0.0.1:{port}/mcp"}}}
        with MCPEnv(env_id="tracker", options=options) as env:
            obs, _ = env.reset(seed=0, task=_task("tracker"))
            assert obs.text.startswith("MCP server: stub-tickets 1.0") and "- create_ticket:" in obs.text
            made = env.step({"action": "call_tool", "name": "create_ticket", "arguments": {"title": "Over HTTP it works"}})[0]
            assert json.loads(made.extra)["outcome"] == "ok" and '"status": "open"' in made.text
    finally:
        proc.kill()
        proc.wait()


def test_unknown_servers_and_bad_server_sections_are_refused_in_one_line(tmp_path):
    with pytest.raises(
        EnvError, match=r"mcp: unknown server 'nope' \(known: bank, git, mailbox, sqlite, testbed, tickets, time;"
    ):
        MCPEnv(env_id="nope")
    bad = tmp_path / "job.yaml"
    bad.write_text(
        f"job_id: x\ntasks: [{ROOT / 'examples' / 'tasks' / 'mcp.yaml'}]\nmcp: {{servers: {{a: {{command: c, url: u}}}}}}\n"
    )
    with pytest.raises(ConfigError, match=r"mcp\.servers\.a") as err:
        load_job(bad)
    assert "either command" in str(err.value) and "\n" not in str(err.value).strip()


def test_render_result_keeps_content_blocks_and_adds_only_new_structured_content():
    from mcp.types import CallToolResult, ImageContent, TextContent

    same = CallToolResult(content=[TextContent(type="text", text='{"a": 1}')], structured_content={"a": 1})
    assert render_result(same) == '{"a": 1}'
    blocks = [TextContent(type="text", text="done"), ImageContent(type="image", data="QUJD", mime_type="image/png")]
    more = CallToolResult(content=blocks, structured_content={"rows": 3}, is_error=True)
    assert render_result(more) == '[tool error]\ndone\n[image image/png, 3 bytes]\nstructuredContent: {\n  "rows": 3\n}'


def test_exploration_builds_calls_from_the_schemas_and_reuses_what_the_server_showed(tmp_path):
    job_file = ROOT / "examples" / "jobs" / "mcp-explore.yaml"
    job, tasks = load_job(job_file)
    out = cli("collect", str(job_file), "--store", str(tmp_path / "s")).stdout
    assert f"{len(tasks) * job.episodes_per_task} episodes collected" in out and "0 failed" in out
    rows = run_query(
        "SELECT trajectory_id, step, action.canonical AS a, state.text AS s, action_error AS err, "
        "json_extract_string(next_state.extra, '$.outcome') AS outcome FROM transitions ORDER BY 1, 2",
        str(tmp_path / "s"),
    ).to_pylist()
    assert len(rows) == len(tasks) * job.episodes_per_task * job.max_steps
    assert sum(r["err"] is not None for r in rows) <= len(rows) // 10
    assert {"ok", "tool_error"} <= {r["outcome"] for r in rows}
    # some calls use an id (m3, T-102, ...) that only an earlier result showed
    reused = [
        r
        for r in rows
        if r["step"] > 0
        and any(
            f'"{v}"' in r["s"]
            for v in json.loads(r["a"])["arguments"].values()
            if isinstance(v, str) and any(c.isdigit() for c in v)
        )
    ]
    assert len(reused) >= 3


def test_example_jobs_collect_mcp_episodes(tmp_path):
    store = tmp_path / "store"
    out = cli("collect", str(ROOT / "examples" / "jobs" / "mcp.yaml"), "--store", str(store))
    assert f"{len(TASKS)} episodes collected" in out.stdout and "0 failed" in out.stdout
    sql = "SELECT task_id, max(reward) AS reward, count(*) AS steps FROM transitions GROUP BY 1 ORDER BY 1"
    rows = [json.loads(line) for line in cli("query", sql, "--store", str(store), "--format", "json").stdout.splitlines()]
    assert {r["task_id"] for r in rows} == set(TASKS) and all(r["reward"] == 1.0 for r in rows)
    assert {r["task_id"]: r["steps"] for r in rows} == {t: len(task.actions) for t, task in TASKS.items()}
