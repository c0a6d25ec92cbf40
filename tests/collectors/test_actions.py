from __future__ import annotations

import json

import pytest

from collectors.actions import ActionError
from collectors.swe import SWEEnv
from collectors.terminal import RunCommand, TerminalEnv

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
