"""MCP actions: call one of the server's tools, or finish with an answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from collectors.actions import ActionSpace, ActionSpec, NonEmpty


@dataclass(frozen=True)
class CallTool(ActionSpec):
    """Call the server's tool `name` with `arguments` (an object matching the tool's input schema).
    The text {workspace} in an argument stands for the episode's working directory."""

    kind = "call_tool"
    name: Annotated[str, NonEmpty()]
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Finish(ActionSpec):
    """End the episode, with the answer to the user's request if it asked for one."""

    kind = "finish"
    answer: str = ""


MCP_ACTIONS = ActionSpace("mcp", [CallTool, Finish])
