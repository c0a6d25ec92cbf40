"""SWE-agent runs: ``.traj`` files (0.x: ``trajectory`` steps of action, observation,
thought, state; 1.x: the same plus ``history`` messages with ``tool_calls``; a
demonstration: ``history`` only) and rows of datasets built from them (nebius
SWE-agent-trajectories: ``instance_id``, ``trajectory`` messages with roles system / user /
ai, ``target``, ``model_name``; SWE-smith trajectories: ``messages``, a list or a JSON
string of one, ``instance_id``, ``traj_id``, ``resolved``, ``model``).

Every SWE-agent action is a command typed into the agent's shell (its interface commands
are shell functions there), so each becomes ``run`` (``submit``, and mini-swe-agent's
``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``, become ``submit``); the observation is what
came back (a command nothing answered, as the last of a run cut short, is no transition). A
JSON array of messages is one run (mini-swe-agent's early ``.traj.json``). An assistant
message gives its command as SWE-agent recorded it (``action``), else as a tool call
(``tool_calls``: the first one, as SWE-agent runs one a turn) or in the text: an XML function call (``<function=bash>``
with ``<parameter=command>``, the format SWE-smith trains on) or the last fenced block. A
tool call or XML call is spelled as SWE-agent's parser spells it: ``bash``'s command as it
is, any other tool's name and then its arguments, each quoted for the shell. The first
user message (the issue) is the instruction and the first state. The domain is swe; the
commands ran in the task's container, so rows are ``executed``. A dataset row's
``target`` or ``resolved`` is the episode's reward.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import re2

from formats.episode import CONTENT_ID, LINEAR, Episode, Step, as_text, ends_run, loads, need, unpacked, xml_call
from schemas.transition import Action

NAME = "swe-agent"
_BLOCK = re2.compile(r"(?s)```[^\n]*\n(.*?)```", LINEAR)


#: What ends a mini-swe-agent run: a command that echoes this word (its output's first line).
MINI_SUBMIT = ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "echo MINI_SWE_AGENT_FINAL_OUTPUT")


def action_of(command: str) -> Action:
    command = command.strip()
    if command == "submit" or command.startswith("submit ") or any(m in command for m in MINI_SUBMIT):
        return Action.make("submit", raw=command)
    return Action.make("run", raw=command, command=command, timeout=30.0)


def whole_array(first: Any) -> bool:
    """A JSON array of chat messages is one run (mini-swe-agent's ``.traj.json`` as its
    early versions and its tests keep it), not a list of records."""
    return isinstance(first, dict) and isinstance(first.get("role"), str)


def episodes(record: Any, name: str = "") -> Iterator[Episode]:
    if isinstance(record, list):  # a run kept as its messages alone
        record = {"messages": record}
    need(isinstance(record, dict), f"expected a JSON object, got {type(record).__name__}")
    info = record.get("info") if isinstance(record.get("info"), dict) else {}
    record_id = _first_str(record, "traj_id", "instance_id", "id") or name or CONTENT_ID
    history = record["history"] if "history" in record else unpacked(record.get("messages"), "messages")  # SWE-smith
    steps_in = record.get("trajectory")
    need(steps_in is None or isinstance(steps_in, list), "trajectory: not a list")
    need(history is None or isinstance(history, list), "history: not a list")
    need(steps_in is not None or history is not None, "neither trajectory nor history")
    messages = steps_in if steps_in and all(isinstance(m, dict) and "role" in m for m in steps_in) else history or []
    instruction = _instruction(messages)
    steps = list(_from_steps(steps_in)) if steps_in and messages is not steps_in else list(_from_messages(messages))
    if not steps:
        return
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    model = (
        _first_str(record, "model_name", "model")
        or _first_str(info, "model_name")
        or _first_str(stats, "model")
        or _configured_model(record, info)
    )
    target = record.get("target", record.get("resolved"))
    yield Episode(
        record_id=record_id,
        initial=instruction or "",
        steps=steps,
        instruction=instruction,
        task_id=_first_str(record, "instance_id"),  # else the record id
        domain="swe",
        agent="swe-agent",
        model=model,
        executed="executed",
        reward=float(target) if isinstance(target, bool) else None,
        extra={k: info[k] for k in ("exit_status",) if isinstance(info.get(k), str)},
    )


def _configured_model(record: dict, info: dict) -> str | None:
    """The model in a run's configuration: SWE-agent 1.x's ``replay_config`` (JSON text,
    ``agent.model.name``), mini-swe-agent's ``info.config.model.model_name``."""
    replay = record.get("replay_config")
    if isinstance(replay, str):
        try:
            replay = loads(replay)
        except ValueError:
            replay = None
    agent = replay.get("agent") if isinstance(replay, dict) else None
    model = agent.get("model") if isinstance(agent, dict) else None
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    return _first_str(model, "name", "model_name") or _first_str(config.get("model"), "model_name", "name")


def _first_str(d: Any, *keys: str) -> str | None:
    for k in keys:
        v = d.get(k) if isinstance(d, dict) else None
        if isinstance(v, str) and v:
            return v
    return None


def _demo(m: Any) -> bool:
    """An in-context demonstration SWE-agent puts in the history (``is_demo``): not the run."""
    return isinstance(m, dict) and str(m.get("is_demo", "")).lower() == "true"


def _instruction(messages: list) -> str | None:
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user" and not _demo(m):
            return as_text(m.get("content", m.get("text")))
    return None


def _from_steps(steps: list) -> Iterator[Step]:
    for i, s in enumerate(steps):
        need(isinstance(s, dict), "trajectory[{}]: not an object", i)
        action = s.get("action")
        need(isinstance(action, str), "trajectory[{}].action: missing or not a string", i)
        if not action.strip():
            continue
        state = s.get("state")
        extra = {"state": state} if isinstance(state, str | dict) else {}
        yield Step(action_of(action), as_text(s.get("observation")), extra=extra)


def _from_messages(messages: list) -> Iterator[Step]:
    """History messages: an assistant turn's action and the tool or user messages after it."""
    pending: Action | None = None
    seen: list[str] = []
    for i, m in enumerate(messages):
        need(isinstance(m, dict), "history[{}]: not an object", i)
        if _demo(m):
            continue
        role = m.get("role")
        if role in ("assistant", "ai"):
            if pending is not None and (seen or ends_run(pending)):  # else nothing answered it: no next state
                yield Step(pending, "\n".join(seen))
            command = _command(m, i)
            pending, seen = (action_of(command) if command and command.strip() else None), []
        elif role in ("tool", "user") and pending is not None:
            seen.append(as_text(m.get("content", m.get("text"))))
    if pending is not None and (seen or ends_run(pending)):
        yield Step(pending, "\n".join(seen))


def _command(m: dict, i: int) -> str | None:
    """An assistant message's command: SWE-agent's own ``action``, a tool call, an XML
    function call in the text, or the text's last fenced block."""
    if isinstance(m.get("action"), str):
        return m["action"]
    calls = m.get("tool_calls")
    if isinstance(calls, list) and calls:
        fn = calls[0].get("function") if isinstance(calls[0], dict) else None
        need(isinstance(fn, dict) and isinstance(fn.get("name"), str), "history[{}].tool_calls[0].function.name: missing", i)
        raw = fn.get("arguments")
        try:
            args = loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = raw
        return _spelled(fn["name"], args if isinstance(args, dict) else {} if args is None else {"input": args})
    text = as_text(m.get("content", m.get("text")))
    found = xml_call(text)
    if found:
        return _spelled(*found)
    blocks = _BLOCK.findall(text)
    return blocks[-1] if blocks else None


def _spelled(name: str, args: dict) -> str:
    """A tool call as the command SWE-agent runs for it: ``bash``'s command as it is, else
    the tool's name and its arguments, each quoted for the shell."""
    if name == "bash" and isinstance(args.get("command"), str):
        return args["command"]
    words = [v if isinstance(v, str) else str(v) for v in args.values() if v is not None]
    return " ".join([name, *map(shlex.quote, words)])
