"""``trajforge serve``: OpenEnv's protocol through openenv-core's own client, sessions that
own their sandboxes, limits, tokens, hostile frames, and every served step recorded."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from openenv.cli._validation import validate_running_environment
from openenv.core.generic_client import GenericEnvClient
from websockets.asyncio.client import connect

from pipelines.query import run_query
from sandboxes.local import sandboxes_dir
from serve.client import TrajforgeClient
from serve.session import Served, load_served
from tests.serve.conftest import running

ROOT = Path(__file__).resolve().parents[2]


def _served(job_file, tmp_path, **kw) -> Served:
    job, tasks = load_served(job_file)
    return Served(job, tasks, store=str(tmp_path / "store"), **kw)


def _rows(store: Path, sql: str) -> list[dict]:
    return run_query(sql, str(store)).to_pylist()


def _sandboxes(run_id: str) -> list[str]:
    base = sandboxes_dir()
    return [d.name for d in base.iterdir() if d.name.startswith(run_id)] if base.is_dir() else []


def test_an_episode_through_openenvs_client_is_scored_and_recorded(job_file, tmp_path):
    served = _served(job_file, tmp_path)

    async def episode(url):
        async with GenericEnvClient(base_url=url) as env:
            first = await env.reset(task_id="t/count", policy="my-agent", model="m-1")
            assert first.observation["task_id"] == "t/count" and first.observation["domain"] == "terminal"
            assert "lines of notes.txt" in first.observation["instruction"] and not first.done
            r = await env.step({"action": "run", "command": "wc -l < notes.txt > count.txt; cat count.txt"})
            assert r.observation["text"].splitlines()[-2].strip() == "3" and r.observation["action_error"] is None
            bad = await env.step({"action": "fly", "to": "moon"})  # another vocabulary: a recorded action error
            assert "unknown action 'fly'" in bad.observation["action_error"] and not bad.done
            end = await env.step({"action": "end_episode"})
            assert end.done and end.reward == 1.0
            state = await env.state()
            assert state["task_id"] == "t/count" and state["step_count"] == 2 and state["done"]
            with pytest.raises(RuntimeError, match="episode is over"):
                await env.step({"action": "run", "command": "ls"})

    with running(served) as url:
        asyncio.run(episode(url))
    rows = _rows(
        tmp_path / "store",
        "SELECT step, action.kind AS kind, action_error, reward, truncated, provenance.origin AS origin, "
        "provenance.policy AS policy, provenance.model AS model, provenance.job_id AS job, provenance.extra AS extra "
        "FROM transitions ORDER BY step",
    )
    assert [r["kind"] for r in rows] == ["run", "invalid"]
    assert rows[1]["action_error"].startswith("unknown action 'fly'") and rows[1]["reward"] == 1.0 and rows[1]["truncated"]
    assert {(r["origin"], r["policy"], r["model"]) for r in rows} == {("collected", "my-agent", "m-1")}
    extra = json.loads(rows[0]["extra"])
    assert extra["stop_reason"] == "complete" and extra["served"]["session"] == rows[0]["job"]
    assert _sandboxes(served.run_id) == []


def test_schema_health_and_metadata_and_only_the_websocket_episode_routes(job_file, tmp_path):
    served = _served(job_file, tmp_path)
    with running(served) as url:
        schema = httpx.get(f"{url}/schema").json()
        members = {m["title"]: m for m in schema["action"]["anyOf"]}
        assert members["terminal.run"]["required"] == ["action", "command"]
        assert members["terminal.run"]["properties"]["action"] == {"const": "run"} and "end_episode" in members
        assert "text" in schema["observation"]["properties"]
        assert httpx.get(f"{url}/health").json()["status"] == "healthy"
        assert "terminal" in httpx.get(f"{url}/metadata").json()["description"]
        for path in ("/reset", "/step"):  # an episode lives in one WebSocket session
            assert httpx.post(f"{url}{path}", json={}).status_code in (404, 405)
        close = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/close", "params": {"session_id": "x"}}
        assert httpx.post(f"{url}/mcp", json=close).json()["error"]["code"] == -32601
        report = validate_running_environment(url)  # openenv-core's own runtime validator
        assert report["passed"] and report["mode"] == "production", [c for c in report["criteria"] if not c["passed"]]


def test_a_full_server_refuses_at_once_and_idle_sessions_are_reaped(job_file, tmp_path):
    served = _served(job_file, tmp_path)

    async def scenario(url):
        a, b = GenericEnvClient(base_url=url), GenericEnvClient(base_url=url, message_timeout_s=20)
        await a.reset(task_id="t/free")
        await a.step({"action": "run", "command": "echo a"})
        await b.reset(task_id="t/free")
        t = time.monotonic()
        async with connect(url.replace("http", "ws") + "/ws") as c:  # the server speaks first: the refusal, then close
            refusal = json.loads(await asyncio.wait_for(c.recv(), 5))
        assert refusal["type"] == "error" and refusal["data"]["code"] == "CAPACITY_REACHED"
        assert time.monotonic() - t < 5  # refused, not queued
        live = _sandboxes(served.run_id)
        assert len(live) == 2
        await asyncio.sleep(8)  # idle timeout 1 s; openenv-core's reaper looks every 5 s
        assert _sandboxes(served.run_id) == [] and not served.sessions
        with pytest.raises((RuntimeError, ConnectionError, Exception)):
            await a.step({"action": "run", "command": "echo again"})
        d = GenericEnvClient(base_url=url)
        r = await d.reset(task_id="t/free")  # the slots are free again
        assert r.observation["task_id"] == "t/free"
        await d.close()

    with running(served, max_sessions=2, idle_timeout_s=1.0) as url:
        asyncio.run(scenario(url))
    rows = _rows(tmp_path / "store", "SELECT provenance.extra AS extra, truncated FROM transitions")
    assert [json.loads(r["extra"])["stop_reason"] for r in rows] == ["idle_timeout"] and rows[0]["truncated"]


def test_two_sessions_never_see_each_others_sandbox(job_file, tmp_path):
    served = _served(job_file, tmp_path)

    async def scenario(url):
        async with GenericEnvClient(base_url=url) as a, GenericEnvClient(base_url=url) as b:
            await a.reset(task_id="t/free")
            await b.reset(task_id="t/free")
            await a.step({"action": "write_file", "path": "/work/secret-a.txt", "content": "only a"})
            seen = await b.step({"action": "run", "command": "cat /work/secret-a.txt; ls /work; ls /tmp"})
            assert "only a" not in seen.observation["text"] and "No such file" in seen.observation["text"]
            mine = await a.step({"action": "run", "command": "cat /work/secret-a.txt"})
            assert "only a" in mine.observation["text"]

    with running(served) as url:
        asyncio.run(scenario(url))


def test_a_token_guards_every_route_but_health(job_file, tmp_path):
    served = _served(job_file, tmp_path)

    async def scenario(url):
        with pytest.raises(ConnectionError):
            await GenericEnvClient(base_url=url).connect()
        with pytest.raises(ConnectionError):
            await TrajforgeClient(url, token="wrong").connect()
        async with TrajforgeClient(url, token="s3cret") as env:
            r = await env.reset(task_id="t/free")
            assert r.observation["task_id"] == "t/free"

    with running(served, token="s3cret") as url:
        assert httpx.get(f"{url}/schema").status_code == 401
        assert httpx.get(f"{url}/schema", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200
        asyncio.run(scenario(url))
    # beyond loopback without a token: refused before anything starts, in one line
    proc = subprocess.run(
        [sys.executable, "trajforge.py", "serve", str(job_file), "--host", "0.0.0.0", "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TRAJFORGE_SERVE_TOKEN"},
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "needs a bearer token" in proc.stderr


def test_hostile_frames_get_error_frames_and_the_server_stays_up(job_file, tmp_path):
    served = _served(job_file, tmp_path)

    async def ask(ws, frame):
        await ws.send(frame)
        return json.loads(await asyncio.wait_for(ws.recv(), 60))

    async def scenario(url):
        ws_url = url.replace("http", "ws") + "/ws"
        async with connect(ws_url, max_size=None) as ws:
            assert (await ask(ws, "{not json"))["data"]["code"] == "INVALID_JSON"
            assert (await ask(ws, json.dumps({"type": "step", "data": "x"})))["data"]["code"] == "VALIDATION_ERROR"
            assert (await ask(ws, json.dumps({"type": "warp"})))["data"]["code"] == "UNKNOWN_TYPE"
            mcp = {"type": "mcp", "data": {"jsonrpc": "2.0", "method": "openenv/session/close", "params": {"session_id": "x"}}}
            assert (await ask(ws, json.dumps(mcp)))["data"]["code"] == "UNKNOWN_TYPE"
            before = await ask(ws, json.dumps({"type": "step", "data": {"action": "run", "command": "ls"}}))
            assert "step before reset" in before["data"]["message"]
            unknown = await ask(ws, json.dumps({"type": "reset", "data": {"task_id": "../../etc/passwd"}}))
            assert "unknown task_id" in unknown["data"]["message"]
            bad_seed = await ask(ws, json.dumps({"type": "reset", "data": {"seed": "zero"}}))
            assert "seed must be an integer" in bad_seed["data"]["message"]
            ok = await ask(ws, json.dumps({"type": "reset", "data": {"task_id": "t/free"}}))
            assert ok["type"] == "observation"
            wrong = await ask(ws, json.dumps({"type": "step", "data": {"action": "click", "x": 1, "y": 2}}))
            assert wrong["type"] == "observation" and "unknown action 'click'" in wrong["data"]["observation"]["action_error"]
            typed = await ask(ws, json.dumps({"type": "step", "data": {"action": "run", "command": 5}}))
            assert "expected str" in typed["data"]["observation"]["action_error"]
        async with connect(ws_url, max_size=None) as ws:  # a frame over the limit closes that connection only
            await ws.send(json.dumps({"type": "step", "data": {"action": "run", "command": "x" * (2 << 20)}}))
            with pytest.raises(Exception):  # noqa: B017 (the close code is the server's: 1009)
                await asyncio.wait_for(ws.recv(), 30)
        async with GenericEnvClient(base_url=url) as env:
            assert (await env.reset(task_id="t/free")).observation["task_id"] == "t/free"

    with running(served) as url:
        asyncio.run(scenario(url))
        assert httpx.get(f"{url}/health").status_code == 200
    assert _sandboxes(served.run_id) == []
    rows = _rows(tmp_path / "store", "SELECT action_error FROM transitions ORDER BY step")
    assert len(rows) == 2 and all(r["action_error"] for r in rows)  # the invalid actions are data


def test_sigterm_with_sessions_open_records_them_and_leaks_no_sandbox(job_file, tmp_path):
    store = tmp_path / "store"
    run_id = f"serve-test-{os.getpid()}"
    proc = subprocess.Popen(
        [sys.executable, "trajforge.py", "serve", str(job_file), "--port", "0", "--store", str(store), "--run-id", run_id],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = "http://127.0.0.1:" + line.split("ws://127.0.0.1:")[1].split("/")[0]

        async def open_two():
            clients = [GenericEnvClient(base_url=url) for _ in range(2)]
            for c in clients:
                await c.reset(task_id="t/free", policy="held")
                await c.step({"action": "run", "command": "echo held"})
            assert len(_sandboxes(run_id)) == 2
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0

        asyncio.run(open_two())
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _sandboxes(run_id) == []
    rows = _rows(store, "SELECT provenance.policy AS p, provenance.extra AS extra FROM transitions")
    assert len(rows) == 2 and {r["p"] for r in rows} == {"held"}
    assert {json.loads(r["extra"])["stop_reason"] for r in rows} == {"closed"}


def test_the_asgi_app_of_openenv_yaml_needs_a_token_and_serves_the_suite(job_file, tmp_path):
    env = {**os.environ, "TRAJFORGE_SERVE_SUITE": str(job_file), "TRAJFORGE_SERVE_STORE": str(tmp_path / "s")}
    env.pop("TRAJFORGE_SERVE_TOKEN", None)
    code = "import serve.asgi as a; print(type(a.app).__name__, a.app.state.served.order)"
    refused = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "TRAJFORGE_SERVE_TOKEN" in refused.stderr
    env["TRAJFORGE_SERVE_TOKEN"] = "t"
    ok = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "FastAPI ['t/count', 't/free']" in ok.stdout, ok.stderr
    spec = yaml.safe_load((ROOT / "openenv.yaml").read_text())
    assert spec["app"] == "serve.asgi:app" and spec["runtime"] == "fastapi"


def test_a_sandbox_that_dies_keeps_its_recorded_steps_and_the_next_reset_gets_a_fresh_one(job_file, tmp_path):
    served = _served(job_file, tmp_path)

    async def scenario(url):
        async with GenericEnvClient(base_url=url) as env:
            await env.reset(task_id="t/free", policy="doomed")
            await env.step({"action": "run", "command": "echo before"})
            await env.step({"action": "run", "command": "(sleep 0.5; kill -9 -1) >/dev/null 2>&1 &"})
            await asyncio.sleep(2)
            with pytest.raises(RuntimeError, match="EXECUTION_ERROR"):
                await env.step({"action": "end_episode"})  # the check cannot score a dead sandbox
            again = await env.reset(task_id="t/free", policy="doomed")
            r = await env.step({"action": "run", "command": "echo alive"})
            assert again.observation["task_id"] == "t/free" and "alive" in r.observation["text"]

    with running(served) as url:
        asyncio.run(scenario(url))
    rows = _rows(tmp_path / "store", "SELECT step, reward, truncated, provenance.extra AS extra FROM transitions ORDER BY step")
    dead = [r for r in rows if json.loads(r["extra"])["stop_reason"] == "infra_error"]
    assert [r["step"] for r in dead] == [0, 1] and dead[-1]["truncated"] and all(r["reward"] is None for r in dead)
