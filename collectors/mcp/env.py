"""The MCP environment: an MCP client (the official SDK) driving one server's tools.

``env_id`` names the server (``collectors.mcp.servers``). At reset the episode gets a
fresh working directory, the task's files and setup commands run there, the server is
(re)started when its arguments name ``{workspace}`` or ``{seed}`` (its state is then the
episode's own) and the observation is the server, its tools (name, description, input
schema) and the task. A step calls one tool: the name and arguments are checked against
the tool list and the tool's JSON schema before anything is sent (a mismatch is the
agent's ``action_error``); next_state is the result rendered as text (content blocks, and
``structuredContent`` where it adds to them). ``extra.outcome`` keeps apart a result
(``ok``), a tool error (``isError``: ``tool_error``) and a JSON-RPC error
(``jsonrpc_error``, with its code). A call without an answer in ``call_timeout_s`` or a
server that dies stops the server and raises ``EnvError``: the runner retries the episode
on a fresh server. The server's name, version, protocol and tool-list hash go into
provenance.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from collectors.actions import ActionError, ActionSpec
from collectors.env import EnvError, Environment, EnvOptions, Task
from collectors.mcp import servers
from collectors.mcp.actions import CallTool, Finish
from collectors.mcp.client import Connection, ServerSpec
from sandboxes.base import ExecResult
from schemas.transition import Observation, canonical_json
from schemas.volatile import detect_spans


class MCPServerOptions(EnvOptions):
    """A server of the job's own: a command run over stdio, or a streamable HTTP url."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerOptions:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        return self


class MCPOptions(EnvOptions):
    """Settings of MCP episodes (the job's ``mcp`` section); a task's env_id names the server."""

    servers: dict[str, MCPServerOptions] = Field(default_factory=dict)  # env_id -> {command, args, env} or {url}
    call_timeout_s: float = Field(30.0, gt=0)
    startup_timeout_s: float = Field(30.0, gt=0)
    obs_cap_chars: int = Field(20_000, ge=1000)


class Workspace:
    """The episode's working directory, with what a task's default setup hooks call."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write_file(self, path: str, content: str) -> None:
        target = (self.root / path.lstrip("/")).resolve()
        if not target.is_relative_to(self.root.resolve()):
            raise EnvError(f"task file {path!r} is outside the workspace")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)

    def exec(self, command: str, timeout: float = 60) -> ExecResult:
        t0 = time.perf_counter()
        try:
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.root), "WORKSPACE": str(self.root)}
            r = subprocess.run(["bash", "-c", command], cwd=self.root, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return ExecResult(124, "", f"timed out after {timeout} s", (time.perf_counter() - t0) * 1000, timed_out=True)
        return ExecResult(r.returncode, r.stdout, r.stderr, (time.perf_counter() - t0) * 1000)


def render_result(result: Any) -> str:
    """A CallToolResult as the text an agent reads: content blocks in order, then
    ``structuredContent`` unless a text block already says the same."""
    parts, texts = [], []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
            texts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri} {block.name}]")
        elif kind == "resource":
            res = block.resource
            parts.append(f"[resource {res.uri}]\n" + (getattr(res, "text", None) or f"({len(getattr(res, 'blob', ''))} bytes)"))
        else:
            parts.append(f"[{kind} content]")
    structured = result.structured_content
    if structured is not None and not parts:  # an empty list: say so
        parts.append(json.dumps(structured.get("result", structured) if isinstance(structured, dict) else structured))
    elif structured is not None and not _said(structured, texts):
        parts.append("structuredContent: " + json.dumps(structured, indent=2, sort_keys=True, ensure_ascii=False))
    text = "\n".join(parts) if parts else "(empty result)"
    return f"[tool error]\n{text}" if result.is_error else text


def _said(structured: Any, texts: list[str]) -> bool:
    """Whether the text blocks already carry the structured content (servers built with the
    SDK send both: the value as JSON text, or a list as one block per item, under ``result``)."""
    parsed = []
    for t in texts:
        try:
            parsed.append(json.loads(t))
        except ValueError:
            parsed.append(t)
    inner = structured.get("result") if isinstance(structured, dict) and len(structured) == 1 else None
    return structured in parsed or (inner is not None and (inner == parsed or [inner] == parsed))


def _expand(value: Any, workspace: str) -> Any:
    if isinstance(value, str):
        return value.replace("{workspace}", workspace)
    if isinstance(value, dict):
        return {k: _expand(v, workspace) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, workspace) for v in value]
    return value


class MCPEnv(Environment):
    domain = "mcp"
    sandbox_backend = "mcp"

    def __init__(self, sandbox: Any = None, env_id: str = "time", options: MCPOptions | dict | None = None) -> None:
        super().__init__(env_id, options)
        custom = {name: s.model_dump() for name, s in self.options.servers.items()}
        self.spec: ServerSpec = servers.server_spec(env_id, custom)
        self.home = Path(tempfile.mkdtemp(prefix=f"trajforge-mcp-{env_id}-"))
        self.workspace = self.sandbox = Workspace(self.home / "ws")
        self.conn: Connection | None = None
        self.tools: dict[str, Any] = {}
        self.validators: dict[str, Any] = {}
        self.restarts = 0

    # -- server life cycle -----------------------------------------------------------------------
    def _connect(self, seed: int) -> None:
        """A live server for the episode: started afresh when its state is the episode's own."""
        if self.conn is not None and not self.conn.closed and not servers.per_episode(self.spec):
            return
        if self.conn is not None:
            self.conn.close()
        root = str(self.workspace.root)
        self.conn = Connection(servers.expand(self.spec, root, seed), startup_timeout=self.options.startup_timeout_s)
        self.tools = {t.name: t for t in self.conn.list_tools(self.options.startup_timeout_s)}
        self.validators = {}

    def _validator(self, name: str):
        if name not in self.validators:
            from jsonschema import Draft202012Validator, validators

            schema = self.tools[name].input_schema or {"type": "object"}
            cls = validators.validator_for(schema, default=Draft202012Validator)
            self.validators[name] = cls(schema)
        return self.validators[name]

    def tool_list(self) -> list[dict[str, Any]]:
        return [{"name": t.name, "description": t.description or "", "inputSchema": t.input_schema} for t in self.tools.values()]

    # -- the protocol ----------------------------------------------------------------------------
    def _reset(self, seed: int | None, task: Task | None) -> tuple[Observation, dict[str, Any]]:
        t0 = time.perf_counter()
        root = self.workspace.root
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        if task is not None:
            task.run_setup(self)
        self._connect(seed or 0)
        listing = self.tool_list()
        tools_sha = hashlib.sha256(canonical_json(listing).encode()).hexdigest()
        info = self.conn.server_info
        lines = [f"MCP server: {info['name']} {info['version']}".rstrip(), f"Workspace: {root}"]
        if info["instructions"]:
            lines.append(f"Instructions: {info['instructions']}")
        if task is not None:
            lines.append(f"Task: {task.instruction}")
        lines.append(f"Tools ({len(listing)}):")
        for t in listing:
            lines.append(f"- {t['name']}: {' '.join(t['description'].split())}")
            lines.append(f"  input: {json.dumps(t['inputSchema'], sort_keys=True, separators=(',', ':'))}")
        text = "\n".join(lines)
        self.image_digest = f"{info['name']} {info['version']}".strip()
        provenance = {
            "image_digest": self.image_digest,
            "extra": canonical_json(
                {
                    "mcp_server": info["name"],
                    "mcp_server_version": info["version"],
                    "mcp_protocol": info["protocol"],
                    "mcp_tools_sha256": tools_sha,
                    "mcp_env_id": self.env_id,
                }
            ),
        }
        extra = {"server": info["name"], "server_version": info["version"], "tools_sha256": tools_sha, "tools": len(listing)}
        obs = Observation.make(text, "text", extra=extra, spans=detect_spans(text))
        return obs, {
            "reset_ms": (time.perf_counter() - t0) * 1000,
            "provenance": provenance,
            "instruction": task.instruction if task else None,
        }

    def _step(self, action: ActionSpec) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        if isinstance(action, Finish):
            text = f"Finished: {action.answer}" if action.answer else "Finished."
            return Observation.make(text, "text", extra={"outcome": "finished"}), None, True, {}
        assert isinstance(action, CallTool)
        if action.name not in self.tools:
            raise ActionError(f"unknown tool {action.name!r} (tools: {', '.join(self.tools)})")
        arguments = _expand(action.arguments, str(self.workspace.root))
        errors = sorted(self._validator(action.name).iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path)
            raise ActionError(f"call_tool.arguments{'.' + where if where else ''}: {errors[0].message} (tool {action.name})")
        import mcp

        t0 = time.perf_counter()
        try:
            result = self.conn.call_tool(action.name, arguments, timeout=self.options.call_timeout_s)
        except mcp.MCPError as exc:
            text, extra = f"[JSON-RPC error {exc.code}] {exc.error.message}", {"outcome": "jsonrpc_error", "error_code": exc.code}
        except EnvError:
            self.restarts += 1
            raise
        else:
            text, extra = render_result(result), {"outcome": "tool_error" if result.is_error else "ok"}
        call_ms = (time.perf_counter() - t0) * 1000
        cap, truncated = self.options.obs_cap_chars, False
        if len(text) > cap:
            extra["capped_from_chars"] = len(text)
            text, truncated = text[:cap] + f"\n[... {len(text) - cap} more characters cut ...]", True
        obs = Observation.make(text, "text", extra={"tool": action.name, **extra}, spans=detect_spans(text), truncated=truncated)
        sent = CallTool(action.name, arguments)
        return obs, None, False, {"action_ms": call_ms, "action": sent.to_action()}

    def check_task(self, task: Task) -> tuple[float | None, str]:
        """``check`` (a mapping, or its JSON text): ``{tool, arguments, contains}`` calls a tool
        on the episode's server and looks for ``contains`` in the rendered result;
        ``{answer_contains}`` looks in the episode's ``finish`` answer."""
        check = task.check if isinstance(task.check, dict) else json.loads(task.check)
        if "answer_contains" in check:
            answer = self.observation.text if self.observation is not None else ""
            ok = str(check["answer_contains"]).lower() in answer.lower()
            return (1.0 if ok else 0.0), answer[-300:]
        if self.conn is None or self.conn.closed:
            return None, "no live server to check against"
        arguments = _expand(check.get("arguments", {}), str(self.workspace.root))
        try:
            text = render_result(self.conn.call_tool(check["tool"], arguments, timeout=self.options.call_timeout_s))
        except Exception as exc:
            return 0.0, f"check call failed: {exc}"
        return (1.0 if str(check["contains"]) in text else 0.0), text[-300:]

    def _close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        shutil.rmtree(self.home, ignore_errors=True)
