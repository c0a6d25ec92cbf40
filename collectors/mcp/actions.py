"""MCP actions: call one of the server's tools, or finish with an answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collectors.actions import ActionError, ActionSpace, ActionSpec


@dataclass(frozen=True)
class CallTool(ActionSpec):
    """Call the server's tool `name` with `arguments` (an object matching the tool's input schema).
    The text {workspace} in an argument stands for the episode's working directory."""

    kind = "call_tool"
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        if not self.name.strip():
            raise ActionError("call_tool.name: must not be empty")


@dataclass(frozen=True)
class Finish(ActionSpec):
    """End the episode, with the answer to the user's request if it asked for one."""

    kind = "finish"
    answer: str = ""


MCP_ACTIONS = ActionSpace("mcp", [CallTool, Finish])
