"""OpenAI-style conversations with tools: a list of chat messages (``system``, ``user``,
``assistant``, ``tool`` / ``function``), alone or under ``messages``, ``traj``,
``conversations`` or ToolBench's ``answer_generation.train_messages`` (the longest is the
whole run); the list may be JSON text, as Toucan-1.5M's rows keep it (their ``uuid`` is
the record's id). Each spelling of a call: the modern ``tool_calls`` (answered by ``tool``
messages with its ``tool_call_id``), the legacy ``function_call`` (answered by the
``function`` message that names it, or the next one), ShareGPT's ``function_call`` turn
(JSON of name and arguments, answered by an ``observation`` turn), and a ReAct turn's
``Action:`` / ``Action Input:`` lines where a ``function`` answer follows, or nothing does
(ToolBench's ToolLLaMA ``conversations``), with or without a ``tools`` / ``functions`` list.
OpenHands' format for models without function calling is read too: a call as XML in the
assistant's text (``<function=NAME>``, ``<parameter=P>``), its output a user message
``EXECUTION RESULT of [NAME]:``, and the task without the worked example around it.
Anthropic's content blocks (``tool_use`` calls, ``tool_result`` answers) and OpenAI's
Responses API items (``function_call``, ``function_call_output``) are read as the same
calls and answers (``_as_chat``). tau2-bench's results file is one record of many
conversations (``simulations``, see ``_simulations``): its calls are flat (``name``,
``arguments``), its tool messages answer by ``id`` and may flag ``error``, several answers
may come as one ``tool_messages`` message, and the user simulator's own tool calls
(``requestor: user``) are part of the user's turn, not calls of the agent.

In: each call becomes a transition whose next state is its answer (a call nothing answers,
as at the end of a run cut short, is none, unless it is a finish); parallel calls are one
transition each, also where they come as consecutive assistant messages of one legacy call
each (as Qwen-Agent writes them), whose answers then follow in order. An assistant message
without a call that a ``user`` message answers is a ``message`` action with that answer as
the next state (in tau-bench the user is part of the environment). The first user message
is the instruction and the first state. A conversation does not say whether the tools
really ran: rows are ``unknown`` unless the importer is told (tau-bench ran them against
its mock database; ToolBench called the real APIs; Toucan's ran on real MCP servers).
``reward`` and ``task_id`` are read where present.

Out: ``export`` writes one ``{"messages": [...], "metadata": {...}}`` line per trajectory
with modern ``tool_calls``; ``metadata.trajforge`` keeps what a round trip needs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import re2

from formats.episode import (
    CONTENT_ID,
    LINEAR,
    Episode,
    RecordError,
    Step,
    as_text,
    canonical_action,
    ends_run,
    execution_result,
    loads,
    need,
    ours_of,
    several_runs,
    task_of,
    text_action,
    unpacked,
    with_ours,
    xml_call,
    xml_call_action,
)
from schemas.record_files import dumps
from schemas.transition import Action, Transition

NAME = "openai-messages"
#: Turns that are one call each (ShareGPT's ``function_call``; ``tool_call``, its JSON in
#: ``<tool_call>`` tags, as Hermes-style datasets write it), and turns that answer calls
#: (an answer in ``<tool_response>`` tags is read without them).
CALL_ROLES = ("function_call", "tool_call")
ANSWER_ROLES = ("tool", "function", "ipython", "observation", "tool_output", "tool_response", "tool_result", "environment")
ONE_FILE_PER_TRAJECTORY = False


def _messages(record: Any) -> tuple[list, dict]:
    if isinstance(record, list):
        return record, {}
    need(isinstance(record, dict), f"expected a JSON object or list, got {type(record).__name__}")
    for key in ("messages", "traj", "conversations", "conversation"):
        if key in record:
            found = unpacked(record[key], key)
            need(isinstance(found, list), f"{key}: not a list")
            return found, record
    gen = record.get("answer_generation")
    if isinstance(gen, dict) and isinstance(gen.get("train_messages"), list):
        runs = [m for m in gen["train_messages"] if isinstance(m, list)]
        need(bool(runs), "answer_generation.train_messages: no message list")
        return max(runs, key=len), record
    raise RecordError("no messages (messages, traj, conversations or answer_generation.train_messages)")


def _untagged(text: str, tag: str) -> str:
    """``text`` without one ``<tag>...</tag>`` around it (and the blanks inside them);
    any other text as it is."""
    bare, opening, closing = text.strip(), f"<{tag}>", f"</{tag}>"
    if bare.startswith(opening) and bare.endswith(closing) and len(bare) >= len(opening) + len(closing):
        return bare[len(opening) : -len(closing)].strip()
    return text


_TOOL_CALL = re2.compile(r"(?s)<tool_call>(.*?)</tool_call>", LINEAR)
_TOOL_RESPONSE = re2.compile(r"(?s)<tool_response>(.*?)</tool_response>", LINEAR)
#: The longest call text read as a Python literal (Hermes data writes some with single quotes).
_LITERAL_CHARS = 1 << 20


def _tagged_calls(text: str) -> list[dict[str, Any]]:
    """The calls a Hermes-style turn writes in its text, each ``{"name", "arguments"}`` in
    ``<tool_call>`` tags: as JSON, or as a Python literal (``{'name': ...}``); a call that is
    neither, or has no name, is not one."""
    found = []
    for body in _TOOL_CALL.findall(text):
        try:
            value = loads(body)
        except ValueError:
            value = _literal(body.strip())
        if isinstance(value, dict) and isinstance(value.get("name"), str) and value["name"]:
            found.append({"name": value["name"], "arguments": value.get("arguments", value.get("parameters", {}))})
    return found


def _literal(text: str) -> Any:
    if len(text) > _LITERAL_CHARS or not text.startswith("{"):
        return None
    try:
        value = ast.literal_eval(text)
        dumps(value)  # JSON's kinds only (no sets, bytes or complex numbers)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return value


def _react(text: str) -> dict[str, str] | None:
    """The call a ReAct turn writes in its text (``Action: NAME`` and, on the next line,
    ``Action Input: ARGUMENTS``, to the end: ToolBench's ToolLLaMA data), as a legacy
    ``function_call``; the last one where there are several. None: no such call."""
    lines = text.split("\n")
    for k in range(len(lines) - 1, 0, -1):
        line = lines[k].lstrip()
        if line.startswith("Action Input:"):
            name = lines[k - 1].strip()
            if not name.startswith("Action:") or not name[len("Action:") :].strip():
                return None
            arguments = "\n".join([line[len("Action Input:") :], *lines[k + 1 :]]).strip()
            return {"name": name[len("Action:") :].strip(), "arguments": arguments}
    return None


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return loads(raw) if raw.strip() else {}
        except ValueError:
            return {"input": raw}
    return raw if raw is not None else {}


#: Content blocks that carry calls and their answers (Anthropic's Messages API), and blocks
#: that are neither said nor done (a model's reasoning).
CALL_BLOCKS = ("tool_use", "tool_result")
UNSAID_BLOCKS = ("thinking", "redacted_thinking")
_BLOCKS = (*CALL_BLOCKS, *UNSAID_BLOCKS)
#: Items of OpenAI's Responses API (no ``role``): a call (a function's JSON arguments, a
#: custom tool's free ``input``), its output (by ``call_id``), and reasoning.
RESPONSE_CALLS = ("function_call", "custom_tool_call")
RESPONSE_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _as_chat(m: Any) -> list[Any]:
    """A message as chat messages with ``tool_calls`` and ``tool`` answers: an Anthropic
    message whose content blocks hold ``tool_use`` calls (its text blocks are what it says)
    or ``tool_result`` answers (by ``tool_use_id``; ``is_error`` flags an error; text beside
    them is the user's reply; a ``thinking`` block is not said), and an item of OpenAI's
    Responses API (``function_call``, ``function_call_output``, ``reasoning``: nothing).
    Any other message as it is."""
    if not isinstance(m, dict):
        return [m]
    kind = m.get("type")
    if "role" not in m and kind in RESPONSE_CALLS:
        fn = {"name": m.get("name"), "arguments": m.get("arguments", m.get("input"))}
        return [{"role": "assistant", "tool_calls": [{"id": m.get("call_id"), "function": fn}]}]
    if "role" not in m and kind in RESPONSE_OUTPUTS:
        return [{"role": "tool", "tool_call_id": m.get("call_id"), "content": m.get("output")}]
    if "role" not in m and kind == "reasoning":
        return []
    blocks = m.get("content")
    if not (isinstance(blocks, list) and any(isinstance(b, dict) and b.get("type") in _BLOCKS for b in blocks)):
        return [m]
    said = [b for b in blocks if not (isinstance(b, dict) and b.get("type") in _BLOCKS)]
    out: list[Any] = [
        {"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": b.get("content"), "error": b.get("is_error") is True}
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    calls = [
        {"id": b.get("id"), "function": {"name": b.get("name"), "arguments": b.get("input")}}
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    if calls or said:
        out.append(m | {"content": said or None, **({"tool_calls": calls} if calls else {})})
    return out


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


@dataclass
class _Call:
    """A call waiting for its answers."""

    id: str | None
    name: str
    action: Action
    answers: list[str] = field(default_factory=list)
    error: str | None = None  # an answer flagged as an error (tau2-bench's ``error: true``)


def _answered(open_calls: list[_Call], call_id: Any, name: Any) -> _Call | None:
    """The call a tool message answers: the one with its ``tool_call_id``, else the first
    unanswered one of its ``name``, else the first unanswered one, else the last (more
    output of it); None where no call is open."""
    if not open_calls:
        return None
    waiting = [c for c in open_calls if not c.answers]
    return (
        next((c for c in open_calls if call_id is not None and c.id == call_id), None)
        or next((c for c in waiting if name is not None and c.name == name), None)
        or next(iter(waiting), None)
        or open_calls[-1]
    )


def _answer_next(messages: list, i: int) -> bool:
    """The message after ``messages[i]`` answers a call, or there is none (a last call,
    such as ToolBench's ``Finish``, that nothing answered)."""
    after = messages[i + 1] if i + 1 < len(messages) else None
    return after is None or (isinstance(after, dict) and after.get("role", after.get("from")) in ANSWER_ROLES)


def whole_array(first: Any) -> bool:
    """A JSON array of chat messages (or of Responses API items) is one conversation (not a
    list of them)."""
    return isinstance(first, dict) and (
        isinstance(first.get("role", first.get("from")), str)
        or first.get("type") in (*RESPONSE_CALLS, *RESPONSE_OUTPUTS, "reasoning")
    )


def episodes(record: Any, name: str = "") -> Iterator[Episode]:
    if isinstance(record, dict) and isinstance(record.get("simulations"), list):
        yield from _simulations(record)
        return
    messages, meta = _messages(record)
    yield from _conversation(messages, meta, record)


def _simulations(record: dict) -> Iterator[Episode]:
    """tau2-bench's results: ``simulations``, each a conversation with its ``id``,
    ``task_id``, ``trial`` and ``reward_info``; the agent's model in ``info.agent_info``. A
    simulation without ``messages`` (an entry of the results index that tau2's directory
    format keeps beside one file per simulation, or a voice run kept as ticks) has none here."""
    info = record.get("info") if isinstance(record.get("info"), dict) else {}
    agent = info.get("agent_info") if isinstance(info.get("agent_info"), dict) else {}
    model = {"model": agent["llm"]} if isinstance(agent.get("llm"), str) else {}
    yield from several_runs(
        (f"simulations[{i}]" + ("." if isinstance(sim, dict) else ": "), partial(_simulation, sim, model))
        for i, sim in enumerate(record["simulations"])
    )


def _simulation(sim: Any, model: dict) -> Iterator[Episode]:
    need(isinstance(sim, dict), "not an object")
    if isinstance(sim.get("messages"), list):
        yield from _conversation(sim["messages"], model | sim, sim)


def _conversation(messages: list, meta: dict, record: Any) -> Iterator[Episode]:
    ours = (meta.get("metadata") or {}).get("trajforge") if isinstance(meta.get("metadata"), dict) else None
    ours = ours if isinstance(ours, dict) else {}
    instruction: str | None = None
    steps: list[Step] = []
    open_calls: list[_Call] = []  # calls waiting for their answers
    said: Action | None = None  # an assistant message waiting for the user's reply

    def close() -> None:  # a call nothing answered is no transition (no next state), unless it ends the run
        nonlocal open_calls
        steps.extend(Step(c.action, "\n".join(c.answers), c.error) for c in open_calls if c.answers or ends_run(c.action))
        open_calls = []

    chat = [(i, one) for i, m in enumerate(messages) for one in _as_chat(m)]
    messages = [m for _, m in chat]
    for k, (i, m) in enumerate(chat):
        where = f"messages[{i}]"
        need(isinstance(m, dict), f"{where}: not an object")
        role = m.get("role", m.get("from"))
        need(isinstance(role, str), f"{where}.role: missing")
        content = as_text(m.get("content", m.get("value")))
        if role in ("assistant", "gpt", *CALL_ROLES):
            calls = unpacked(m.get("tool_calls"), f"{where}.tool_calls")  # JSON text in some Parquet dumps
            legacy = _args(_untagged(content, "tool_call")) if role in CALL_ROLES else m.get("function_call")
            if isinstance(legacy, str):
                legacy = _args(legacy)
            if not (calls or legacy) and role not in CALL_ROLES and "<tool_call>" in content:
                calls = [{"function": fn} for fn in _tagged_calls(content)]  # Hermes: the calls in the turn's text
            if not (calls or legacy) and role not in CALL_ROLES and _answer_next(messages, k) and "Action Input:" in content:
                legacy = _react(content)
            xml = xml_call(content) if not (calls or legacy) and role not in CALL_ROLES and "<function=" in content else None
            if not ((calls or legacy or xml) and open_calls and not any(c.answers for c in open_calls)):
                close()  # else: one more of parallel calls made a message each, none answered yet
            said = None
            if calls:
                need(isinstance(calls, list), f"{where}.tool_calls: not a list")
                for j, c in enumerate(calls):
                    fn = c.get("function", c) if isinstance(c, dict) else None  # tau2-bench: name and arguments flat
                    need(
                        isinstance(fn, dict) and isinstance(fn.get("name"), str),
                        f"{where}.tool_calls[{j}].function.name: missing",
                    )
                    call_id = c.get("id") if isinstance(c.get("id"), str) else None
                    open_calls.append(_Call(call_id, fn["name"], canonical_action(fn["name"], _args(fn.get("arguments")))))
            elif isinstance(legacy, dict):
                need(isinstance(legacy.get("name"), str), f"{where}.function_call.name: missing")
                open_calls.append(_Call(None, legacy["name"], canonical_action(legacy["name"], _args(legacy.get("arguments")))))
            elif xml is not None:  # OpenHands without function calling: the call in the text
                open_calls.append(_Call(None, xml[0], xml_call_action(*xml)))
            elif content and content != "None" and role not in CALL_ROLES:
                said = text_action(content)
        elif role in ANSWER_ROLES:
            for answer in m["tool_messages"] if isinstance(m.get("tool_messages"), list) else [m]:  # tau2's MultiToolMessage
                if not isinstance(answer, dict) or answer.get("requestor") == "user":
                    continue  # a tool the user simulator called: part of the environment's turn, not an answer
                text = content if answer is m else as_text(answer.get("content"))
                tagged = _TOOL_RESPONSE.findall(text) if text.count("<tool_response>") > 1 else []
                if len(tagged) < 2 or len(tagged) != text.count("<tool_response>") or _TOOL_RESPONSE.sub("", text).strip():
                    tagged = [None]  # one answer, as it is (tags that do not pair, or text beside them)
                for part in tagged:  # Hermes: the answers to parallel calls, each in its tags, in one turn
                    call = _answered(open_calls, answer.get("tool_call_id", answer.get("id")), answer.get("name"))
                    if call is not None:
                        call.answers.append(_untagged(text, "tool_response") if part is None else part.strip())
                        if answer.get("error") is True:
                            call.error = text or "error"
        elif role in ("user", "human") and not content and m.get("tool_calls"):
            continue  # tau2's user simulator acting on its own device: its reply comes in a later message
        elif role in ("user", "human") and open_calls and (result := execution_result(content)) is not None:
            call = _answered(open_calls, None, result[0])  # OpenHands without function calling: a call's output
            if call is not None:
                call.answers.append(result[1])
        elif role in ("user", "human"):
            close()
            if instruction is None and not steps:
                instruction = task_of(content)
            elif said is not None:
                steps.append(Step(said, content))
            said = None
    close()
    if not steps:
        return
    info = meta.get("info") if isinstance(meta.get("info"), dict) else {}
    task_id = meta.get("task_id", info.get("task_id"))
    rid = meta.get("id", meta.get("uuid", ours.get("trajectory_id")))  # our own export: the trajectory it was
    if rid is None and task_id is not None:
        rid = f"{task_id}/{meta['trial']}" if "trial" in meta else str(task_id)
    episode = Episode(
        record_id=str(rid) if rid is not None else CONTENT_ID,
        initial=instruction or "",
        steps=steps,
        instruction=ours.get("instruction", instruction),
        task_id=ours.get("task_id") if isinstance(ours.get("task_id"), str) else (str(task_id) if task_id is not None else None),
        domain=ours.get("domain") if isinstance(ours.get("domain"), str) else None,  # inferred from the calls
        agent=ours.get("agent") if isinstance(ours.get("agent"), str) else None,
        model=meta.get("model") if isinstance(meta.get("model"), str) else None,
        executed=ours.get("executed") if ours.get("executed") in ("executed", "not_executed", "unknown") else "unknown",
        reward=_number(meta["reward"] if "reward" in meta else _field(meta.get("reward_info"), "reward")),
    )
    yield with_ours(episode, ours)


def _sayable(text: Any) -> bool:
    """Text an assistant message carries back as what it said: not empty, not ``None``, no
    call in tags (a reader would take those for a call: the tool-call spelling keeps them)."""
    return (
        isinstance(text, str) and text.strip() not in ("", "None") and "<tool_call>" not in text and "Action Input:" not in text
    )


def export(trajectory: Sequence[Transition]) -> dict[str, Any]:
    first = trajectory[0]
    messages: list[dict[str, Any]] = [{"role": "user", "content": first.state.text}]
    for t in trajectory:
        call_id = f"call_{t.step}"
        args = t.action.args
        if t.action.kind == "message" and _sayable(args.get("text")):  # said, not done: the user replies
            messages += [{"role": "assistant", "content": args["text"]}, {"role": "user", "content": t.next_state.text}]
            continue
        name, arguments = (args["name"], args.get("arguments", {})) if t.action.kind == "call_tool" else (t.action.kind, args)
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": dumps(arguments)}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": t.next_state.text})
    prov = first.provenance
    last_reward = trajectory[-1].reward
    return {
        "messages": messages,
        **({"reward": last_reward} if last_reward is not None else {}),
        **({"model": prov.model} if prov.model else {}),
        "metadata": {"trajforge": ours_of(trajectory)},
    }
