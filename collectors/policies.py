"""Policies choose actions: given the task, the history and the observation, an action.

- ``ScriptedPolicy`` replays a task's ``actions`` (deterministic; tests and replays).
- ``ExplorationPolicy`` takes seeded random but plausible actions per domain, covering the
  state space cheaply, from the explorer the domain's spec names (``collectors.explore``:
  shell commands over the files it has seen; file views, searches, edits and test runs in SWE).
- ``OpenAIChatPolicy`` asks any OpenAI-compatible chat endpoint (vLLM, SGLang, hosted), with
  the domain's actions as tools, retrying with backoff; the model goes into provenance.
A policy returns ``None`` to stop.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

from collectors.actions import ActionSpace
from collectors.env import Task
from llm.chat import post_chat
from schemas.domains import domain
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


class ExplorationPolicy(Policy):
    """Each domain's explorer (its spec's ``explorer``: ``collectors.explore``), seeded per episode."""

    name = "exploration"

    def __init__(self, max_steps: int = 12) -> None:
        self.max_steps = max_steps

    def reset(self, task: Task, seed: int) -> None:
        super().reset(task, seed)
        self.rng = random.Random(seed)
        self.explorer = domain(task.domain).explorer_class()(self.rng)

    def act(self, observation: Observation, history: list[tuple[Any, Observation]]) -> Any:
        self.steps += 1
        return self.explorer.act(observation, self.steps, self.max_steps)


class OpenAIChatPolicy(Policy):
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint with the actions as tools."""

    name = "openai-chat"

    def __init__(
        self,
        action_space: ActionSpace,
        *,
        model: str,
        base_url: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 512,
        retries: int = 4,
        timeout_s: float = 60.0,
        max_steps: int = 30,
    ) -> None:
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
