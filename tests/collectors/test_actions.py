from __future__ import annotations

import json

import pytest

from collectors.actions import ActionError
from collectors.android.actions import ANDROID_ACTIONS
from collectors.mcp.actions import MCP_ACTIONS
from collectors.os.actions import OS_ACTIONS
from collectors.search.actions import SEARCH_ACTIONS
from collectors.swe import SWEEnv
from collectors.terminal import RunCommand, TerminalEnv
from collectors.web.actions import WEB_ACTIONS

SPACE = TerminalEnv.action_space


def test_parse_dict_json_and_objects_to_one_canonical_string():
    a = SPACE.parse({"action": "run", "command": "ls", "timeout": 5})
    b = SPACE.parse('{"timeout": 5, "command": "ls", "action": "run"}')
    c = SPACE.parse(RunCommand("ls", 5))
    assert a == b == c
    assert a.canonical == b.canonical == '{"command":"ls","kind":"run","timeout":5}'
    assert a.to_action().canonical == a.canonical and a.to_action().kind == "run"
    assert SPACE.parse({"action": "run", "command": "ls"}).timeout == 30.0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("rm -rf /", "not JSON"),
        ([1, 2], "must be a JSON object"),
        ({"action": "fly"}, "unknown action 'fly'"),
        ({"action": "run"}, "missing 1 required positional argument: 'command'"),
        ({"action": "run", "command": "ls", "sudo": True}, "unknown argument 'sudo'"),
        ({"action": "run", "command": 7}, "run.command: expected str, got 7"),
        ({"action": "run", "command": "ls", "timeout": -1}, "run.timeout"),
        ({"action": "run", "command": "  "}, "must not be empty"),
        ({"action": "send_keys", "keys": "x", "enter": "yes"}, "send_keys.enter: expected bool"),
    ],
)
def test_malformed_actions_are_refused_in_one_line(raw, message):
    with pytest.raises(ActionError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        SPACE.parse(raw)
    assert "\n" not in str(info.value)


def test_descriptions_and_tools_are_generated_from_the_code():
    text = SWEEnv.action_space.describe()
    assert "- str_replace(path: str, old: str, new: str): Replace the one occurrence" in text
    assert "- view(path: str, start: int = 1, end: int | null = None)" in text
    tools = {t["function"]["name"]: t["function"] for t in SWEEnv.action_space.tools()}
    assert set(tools) == set(SWEEnv.action_space.actions)
    assert tools["view"]["parameters"]["required"] == ["path"]
    assert tools["view"]["parameters"]["properties"]["end"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    json.dumps(tools)  # serialisable as an API request


@pytest.mark.parametrize(
    ("space", "raw", "message"),
    [
        (
            ANDROID_ACTIONS,
            {"action": "swipe", "x1": 0, "y1": 0, "x2": 1, "y2": 1, "duration_ms": 1},
            "swipe.duration_ms: expected 10 to 5000, got 1",
        ),
        (ANDROID_ACTIONS, {"action": "wait", "seconds": 11}, "wait.seconds: expected 0 to 10, got 11"),
        (ANDROID_ACTIONS, {"action": "input_text", "text": ""}, "input_text.text: expected 1 to 1000 characters"),
        (
            ANDROID_ACTIONS,
            {"action": "status", "goal_status": "x"},
            "status.goal_status: expected complete or infeasible, got 'x'",
        ),
        (OS_ACTIONS, {"action": "click", "x": 1, "y": 1, "button": "x"}, "click.button: expected left, middle or right, got 'x'"),
        (OS_ACTIONS, {"action": "type_text", "text": "x" * 2001}, "type_text.text: expected 1 to 2000 characters"),
        (WEB_ACTIONS, {"action": "press", "key": " "}, "press.key: must not be empty"),
        (MCP_ACTIONS, {"action": "call_tool", "name": ""}, "call_tool.name: must not be empty"),
        (SEARCH_ACTIONS, {"action": "search", "query": " ", "top_k": 0}, "search.query: must not be empty"),
        (SEARCH_ACTIONS, {"action": "search", "query": "x", "top_k": 0}, "search.top_k: must be between 1 and 50, got 0"),
        (SEARCH_ACTIONS, {"action": "search", "query": 3}, "search.query: expected str, got 3"),  # the type before the limit
    ],
)
def test_declared_limits_are_checked_at_construction_with_one_message(space, raw, message):
    with pytest.raises(ActionError) as info:
        space.parse(raw)
    assert str(info.value) == message


def test_limits_do_not_show_in_descriptions_or_schemas():
    assert "- swipe(x1: int, y1: int, x2: int, y2: int, duration_ms: int = 300): Drag" in ANDROID_ACTIONS.describe()
    (press,) = [t["function"] for t in WEB_ACTIONS.tools() if t["function"]["name"] == "press"]
    assert press["parameters"]["properties"] == {"key": {"type": "string"}}
    # field-less and base-field actions are frozen dataclasses like the others
    assert WEB_ACTIONS.parse({"action": "hover", "bid": "7"}).canonical == '{"bid":"7","kind":"hover"}'
    assert WEB_ACTIONS.parse({"action": "noop"}) == WEB_ACTIONS.parse('{"action": "noop"}')
