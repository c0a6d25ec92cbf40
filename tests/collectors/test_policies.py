from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from collectors import runner
from collectors.env import Task
from collectors.jobs import load_job
from collectors.policies import ExplorationPolicy, OpenAIChatPolicy
from collectors.terminal import TerminalEnv
from llm.chat import ChatError
from pipelines.query import run_query
from schemas.transition import Observation


class ChatServer:
    """A local OpenAI-compatible endpoint: fails once with 500, then plays a script."""

    def __init__(self, replies):
        self.replies, self.requests = list(replies), []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, body))
                if len(server.requests) == 1:
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"overloaded")
                    return
                reply = server.replies.pop(0) if server.replies else {"content": "done"}
                message = {"role": "assistant", "content": reply.get("content")}
                if "call" in reply:
                    name, args = reply["call"]
                    message["tool_calls"] = [
                        {"id": f"c{len(server.requests)}", "type": "function", "function": {"name": name, "arguments": args}}
                    ]
                data = json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()


def test_chat_policy_drives_an_episode_through_a_local_endpoint(tmp_path):
    server = ChatServer(
        [
            {"call": ("run", json.dumps({"command": "echo hi"}))},
            {"call": ("run", "{not json")},
            {"call": ("write_file", json.dumps({"path": "x.txt", "content": "1"}))},
            {"content": "I am done."},
        ]
    )
    try:
        suite = tmp_path / "t.yaml"
        suite.write_text(yaml.safe_dump([{"id": "chat/1", "domain": "terminal", "instruction": "say hi"}]))
        job_file = tmp_path / "job.yaml"
        job_file.write_text(
            yaml.safe_dump(
                {
                    "job_id": "chat",
                    "tasks": [str(suite)],
                    "workers": 0,
                    "sandbox": {"backend": "local"},
                    "policy": {"kind": "openai", "model": "test-model", "base_url": server.url},
                }
            )
        )
        job, tasks = load_job(job_file)
        summary = runner.run_job(job, tasks, str(tmp_path / "store"))
        assert summary.collected == 1
        rows = run_query(
            "SELECT step, action.kind AS k, action_error AS e, next_state.text AS t, truncated, provenance.model AS m,"
            " provenance.policy AS p FROM transitions ORDER BY step",
            str(tmp_path / "store"),
        ).to_pylist()
        assert [r["k"] for r in rows] == ["run", "invalid", "write_file"]
        assert rows[0]["t"] == "hi\n[exit 0] /work$" and rows[1]["e"].startswith("not JSON")
        assert rows[2]["truncated"] and rows[0]["m"] == "test-model" and rows[0]["p"] == "openai-chat"
        path, first = server.requests[1]
        assert path == "/v1/chat/completions" and first["model"] == "test-model"
        assert {t["function"]["name"] for t in first["tools"]} == set(TerminalEnv.action_space.actions)
        assert "say hi" in first["messages"][1]["content"]
        _, later = server.requests[2]
        assert later["messages"][-1] == {"role": "tool", "tool_call_id": "c2", "content": "hi\n[exit 0] /work$"}
    finally:
        server.close()


def test_chat_policy_gives_up_with_a_clear_error():
    policy = OpenAIChatPolicy(TerminalEnv.action_space, model="m", base_url="http://127.0.0.1:9/v1", retries=1, timeout_s=1)
    policy.reset(Task(id="t", domain="terminal", instruction="x"), 0)
    with pytest.raises(ChatError, match=r"127.0.0.1:9/v1: APIConnectionError: .* \(after 2 tries\)"):
        policy.act(Observation(text="$"), [])


def test_exploration_policy_is_seeded_and_speaks_the_action_space():
    task = Task(id="t", domain="terminal", instruction="x")
    obs = Observation(text="notes.txt\nsrc/\n[exit 0] /work$")

    def run(seed):
        p = ExplorationPolicy(max_steps=30)
        p.reset(task, seed)
        return [p.act(obs, []) for _ in range(30)]

    a, b, c = run(1), run(1), run(2)
    assert a == b and a != c
    for action in a:
        TerminalEnv.action_space.parse(action)  # every action is well-formed
    assert any("notes.txt" in json.dumps(x) for x in a)  # it uses the files it has seen
