"""Policies choose actions: given the task, the history and the observation, an action.

- ``ScriptedPolicy`` replays a task's ``actions`` (deterministic; tests and replays).
- ``ExplorationPolicy`` takes seeded random but plausible actions per domain, covering the
  state space cheaply: shell commands from a grammar of real commands over the files it
  has seen; file views, searches, small edits and test runs in SWE.
- ``OpenAIChatPolicy`` asks any OpenAI-compatible chat endpoint (vLLM, SGLang, hosted), with
  the domain's actions as tools, retrying with backoff; the model goes into provenance.
A policy returns ``None`` to stop.
"""

from __future__ import annotations

import json
import os
import random
import re
from typing import Any

from collectors.actions import ActionSpace
from collectors.env import Task
from llm.chat import post_chat
from schemas.errors import ConfigError
from schemas.transition import Observation


class Policy:
    name = "policy"
    model: str | None = None

    def reset(self, task: Task, seed: int) -> None:
        self.task, self.seed, self.steps = task, seed, 0

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        raise NotImplementedError


class ScriptedPolicy(Policy):
    name = "scripted"

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        if self.steps >= len(self.task.actions):
            return None
        self.steps += 1
        return self.task.actions[self.steps - 1]


_WORDS = ["alpha", "beta", "todo", "error", "config", "main", "data", "test", "value", "name"]


class ExplorationPolicy(Policy):
    name = "exploration"

    def __init__(self, max_steps: int = 12) -> None:
        self.max_steps = max_steps

    def reset(self, task: Task, seed: int) -> None:
        super().reset(task, seed)
        self.rng = random.Random(seed)
        self.files: list[str] = []
        self.dirs: list[str] = ["."]
        from collectors.mcp.explore import MCPExplorer

        self.mcp = MCPExplorer(self.rng)

    def _learn(self, observation: Observation) -> None:
        extra = observation.extra_dict
        for path in (extra.get("changed_files") or {}).get("added", []):
            if path not in self.files:
                self.files.append(path)
        for line in observation.text.splitlines():
            token = line.strip().split()[-1] if line.strip() else ""
            if re.fullmatch(r"[\w./-]+\.(py|txt|md|cfg|toml|yaml|json|sh|csv)", token) and token not in self.files:
                self.files.append(token.removeprefix("./"))
            elif re.fullmatch(r"[\w.-]+/", token) and token.rstrip("/") not in self.dirs:
                self.dirs.append(token.rstrip("/"))

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        self._learn(observation)
        self.steps += 1
        if self.task.domain == "search":  # ends with an answer rather than being cut off
            from collectors.search.explore import explore_action

            return explore_action(self.rng, observation, self.steps - 1, answer_after=self.max_steps - 1)
        if self.steps > self.max_steps:
            return {"action": "submit"} if self.task.domain == "swe" else None
        if self.task.domain == "web":
            return self._web(observation)
        if self.task.domain == "mcp":
            return self.mcp.act(observation)
        if self.task.domain == "os":
            from collectors.os.explore import explore_action

            return explore_action(self.rng, observation)
        if self.task.domain == "android":
            from collectors.android.explore import explore_action

            return explore_action(self.rng, observation)
        return self._swe() if self.task.domain == "swe" else self._terminal()

    def _web(self, observation: Observation) -> dict[str, Any]:
        """Click, type into and select among the page's own elements (bids from the text);
        now and then scroll, go back or press a key. Links lead only where the page does."""
        r = self.rng
        nodes = re.findall(r"\[([\w-]+)\] (\w+)", observation.text)
        fields = [b for b, role in nodes if role in ("textbox", "searchbox")]
        clickable = [b for b, role in nodes if role in ("link", "button", "checkbox", "radio", "tab", "menuitem")]
        selects = [b for b, role in nodes if role in ("combobox", "listbox")]
        roll = r.random()
        if fields and roll < 0.3:
            return {"action": "fill", "bid": r.choice(fields), "text": f"{r.choice(_WORDS)} {r.randint(1, 99)}"}
        if selects and roll < 0.4:
            options = re.findall(r'option "([^"]+)"', observation.text)
            return {"action": "select_option", "bid": r.choice(selects), "value": r.choice(options) if options else ""}
        if clickable and roll < 0.85:
            return {"action": "click", "bid": r.choice(clickable)}
        return r.choice([{"action": "go_back"}, {"action": "scroll", "dx": 0, "dy": r.choice([300, -300])},
                         {"action": "press", "key": r.choice(["Tab", "Enter", "Escape"])}])  # fmt: skip

    def _terminal(self) -> dict[str, Any]:
        r = self.rng
        f = r.choice(self.files) if self.files else "README.md"
        d = r.choice(self.dirs)
        w = r.choice(_WORDS)
        commands = [
            "ls -la", f"ls -p {d}", f"cat {f}", f"wc -l {f}", f"head -n {r.randint(3, 20)} {f}", f"grep -n {w} {f}",
            f"echo {w} {r.randint(0, 999)} > {w}.txt", f"mkdir -p {w}_dir && ls -p", f"cd {d} && pwd", "cd /work",
            "find . -maxdepth 2 -type f | sort | head -n 20", f"python3 -c 'print({r.randint(1, 9)} * {r.randint(1, 9)})'",
            "git status 2>&1 | head -n 5", f"sort {f} | uniq -c | head", f"cp {f} {w}.bak && ls", "date -u +%F",
            f"stat -c '%s %n' {f}", "env | sort | head -n 5", "ps -eo pid,args | head -n 5", f"rm -f {w}.bak; ls",
        ]  # fmt: skip
        if r.random() < 0.1:
            return {
                "action": "write_file",
                "path": f"{w}_{r.randint(0, 99)}.txt",
                "content": f"{w}\n" * r.randint(1, 5),
            }
        return {"action": "run", "command": r.choice(commands), "timeout": 10}

    def _swe(self) -> dict[str, Any]:
        r = self.rng
        py = [f for f in self.files if f.endswith(".py")] or ["setup.py"]
        f = r.choice(py)
        roll = r.random()
        if roll < 0.4:
            start = r.choice([1, 1, 10, 20, 40])
            return {"action": "view", "path": f, "start": start, "end": start + r.randint(10, 60)}
        if roll < 0.6:
            return {"action": "search", "pattern": r.choice(["def ", "return", "import", "class ", "url", "port"])}
        if roll < 0.75:
            return {"action": "run_tests"}
        if roll < 0.85:
            return {"action": "run", "command": r.choice(["git status", "git log --oneline | head", "git diff --stat"])}
        return {"action": "insert", "path": f, "line": 0, "text": f"# reviewed {r.randint(0, 999)}"}


class OpenAIChatPolicy(Policy):
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint with the actions as tools."""

    name = "openai-chat"

    def __init__(self, action_space: ActionSpace, *, model: str, base_url: str, api_key_env: str = "OPENAI_API_KEY",
                 temperature: float = 0.0, max_tokens: int = 512, retries: int = 4, timeout_s: float = 60.0,
                 max_steps: int = 30) -> None:  # fmt: skip
        self.space, self.model, self.base_url = action_space, model, base_url.rstrip("/")
        self.api_key = os.environ.get(api_key_env, "")
        self.temperature, self.max_tokens, self.retries, self.timeout_s = temperature, max_tokens, retries, timeout_s
        self.max_steps = max_steps

    def reset(self, task: Task, seed: int) -> None:
        super().reset(task, seed)
        system = (
            f"You are an agent acting in a {task.domain} environment. Use exactly one tool call per turn.\n"
            f"Actions:\n{self.space.describe()}"
        )
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": task.instruction},
        ]

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        return post_chat(self.base_url, body, api_key=self.api_key, retries=self.retries, timeout_s=self.timeout_s)

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        self.steps += 1
        if self.steps > self.max_steps:
            return None
        if self.steps > 1:
            self.messages.append({"role": "tool", "tool_call_id": self._call_id, "content": observation.text})
        else:
            self.messages[-1]["content"] += f"\n\nCurrent observation:\n{observation.text}"
        reply = self._post(
            {
                "model": self.model,
                "messages": self.messages,
                "tools": self.space.tools(),
                "temperature": self.temperature,
                "max_tokens": self.max_tokens,
                "seed": self.seed,
            }
        )
        message = reply["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        self.messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls[:1]})
        if not calls:  # a text answer ends the episode; the text itself is no action
            return None
        call = calls[0]
        self._call_id = call.get("id", f"call-{self.steps}")
        try:
            args = json.loads(call["function"].get("arguments") or "{}")
        except ValueError:
            return call["function"].get("arguments")  # malformed: recorded as an action_error
        return {"action": call["function"]["name"], **(args if isinstance(args, dict) else {"args": args})}


def make_policy(config: dict[str, Any], action_space: ActionSpace) -> Policy:
    kind = config.get("kind", "scripted")
    options = {k: v for k, v in config.items() if k != "kind"}
    if kind == "scripted":
        return ScriptedPolicy()
    if kind == "exploration":
        return ExplorationPolicy(**options)
    if kind == "openai":
        return OpenAIChatPolicy(action_space, **options)
    raise ConfigError(f"policy.kind: unknown policy {kind!r} (expected scripted, exploration or openai)")
