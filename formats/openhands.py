"""OpenHands runs: the event stream (a list of events, or an object with ``history`` /
``events`` / ``trajectory``, as SWE-rebench-openhands and similar datasets keep it). An
action event has ``action`` and ``args``; the observation it caused has ``cause`` = the
action's ``id`` and ``content``.

In: each agent action with an observation becomes a transition. The tool call the model
made (``tool_call_metadata``: ``function_name`` and the arguments in the raw model
response) gives the action where present, else the action type: ``run`` -> run,
``write`` / ``edit`` with content -> create, ``read`` -> view, ``finish`` -> finish,
anything else -> ``call_tool`` with the event's arguments. The first user message is the
instruction and the first state; a later one answers what the agent said before it (a
``message`` action whose next state is the user's reply). The runtime executed the
actions: rows are ``executed``.

OpenHands 1.x (the software-agent-sdk) writes typed events instead, each with its class
as ``kind``: an ``ActionEvent`` (``tool_name``, ``tool_call_id``, the model's
``tool_call``, the typed ``action``) is answered by the ``ObservationEvent`` (its
``observation.content``), ``AgentErrorEvent`` (``error``: the step's error) or
``UserRejectObservation`` (``rejection_reason``) with the same ``tool_call_id``; the
first user ``MessageEvent`` is the instruction, and a later one answers the agent's
``MessageEvent`` before it, as above. A list of them (or ``events`` / ``items``, as its
API returns them) is one run; so is a conversation folder as it persists one
(``base_state.json``, which names the model, and ``events/event-*.json``,
``folder_record``).

OpenDevin and early OpenHands kept ``history`` as ``[action, observation]`` pairs (as
their evaluation's ``output.jsonl`` rows do, with the task's ``instruction``): each pair's
observation answers its action.

Datasets built from OpenHands runs (nebius SWE-rebench-openhands-trajectories, nvidia
SWE-Zero-openhands-trajectories) keep each run as OpenAI chat messages under
``trajectory``, with ``trajectory_id``, ``instance_id`` and ``resolved``: those are read as
``openai-messages`` reads a conversation (a tool call and its answer make a transition),
with the trajectory id as the record, the instance as the task and ``resolved`` as the
reward. SWE-Zero's runs are execution-free (their observations were not produced by
running the actions): import them with ``--executed not_executed``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from formats import openai_messages
from formats.episode import CONTENT_ID, Episode, RecordError, Step, as_text, canonical_action, loads, need, text_action
from schemas.transition import Action

NAME = "openhands"
_NOISE = {"thought", "impl_source", "translated_ipython_code", "confirmation_state", "security_risk", "hidden", "blocking"}


def _events(record: Any) -> tuple[list, dict, str]:
    """The run's events, the record's other fields, and where the events were."""
    if isinstance(record, list):
        return record, {}, "events"
    need(isinstance(record, dict), f"expected a list of events or an object, got {type(record).__name__}")
    for key in ("history", "events", "trajectory", "items"):
        if isinstance(record.get(key), list):
            return record[key], record, key
    raise RecordError("no events (a list, or history / events / trajectory)")


def _pairs(events: list) -> bool:
    """The run kept as OpenDevin / early OpenHands kept it: ``history`` a list of
    ``[action, observation]`` pairs."""
    return bool(events) and all(isinstance(e, list) and len(e) == 2 for e in events)


def _unpaired(pairs: list, key: str) -> list[dict]:
    """Pairs (the record's ``key``) as an event stream: each observation caused by its
    pair's action (a ``null`` observation, what a message got, answers nothing)."""
    events: list[dict] = []
    for i, (action, observation) in enumerate(pairs):
        need(isinstance(action, dict) and isinstance(observation, dict), "{}[{}]: not an action and an observation", key, i)
        cause = f"pair-{i}"
        events.append(action | {"id": cause})
        if observation.get("observation") not in (None, "null"):
            events.append(observation | {"cause": cause})
    return events


def _chat(events: list) -> bool:
    """The run kept as chat messages (``role``), not as events (``action`` / ``observation``)."""
    first = next((e for e in events if isinstance(e, dict)), None)
    return first is not None and "role" in first and "action" not in first and "observation" not in first


def _from_chat(messages: list, meta: dict, key: str, record: Any, name: str) -> Iterator[Episode]:
    try:
        found = list(openai_messages.episodes({"messages": messages}, name))
    except RecordError as exc:  # its messages are this record's ``key``
        raise RecordError(str(exc).replace("messages", key, 1)) from None
    rid = meta.get("trajectory_id") or meta.get("instance_id") or meta.get("id") or name or CONTENT_ID
    resolved = meta.get("resolved")
    for ep in found:
        yield replace(
            ep,
            record_id=str(rid),
            task_id=str(meta["instance_id"]) if meta.get("instance_id") else None,
            domain=None,  # inferred from the actions
            agent="openhands",
            model=meta["model"] if isinstance(meta.get("model"), str) else None,
            executed="executed",
            reward=float(resolved) if isinstance(resolved, bool | int | float) else None,
        )


def _tool_call(event: dict) -> Action | None:
    meta = event.get("tool_call_metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("function_name"), str):
        return None
    call_id = meta.get("tool_call_id")
    response = meta.get("model_response") if isinstance(meta.get("model_response"), dict) else {}
    for choice in response.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        for call in (message or {}).get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and (call.get("id") == call_id or len((message or {}).get("tool_calls")) == 1):
                raw = fn.get("arguments")
                try:
                    args = loads(raw) if isinstance(raw, str) else raw
                except ValueError:
                    args = {"input": raw}
                return canonical_action(meta["function_name"], args if args is not None else {})
    return None


def _action(event: dict, where: str) -> Action:
    found = _tool_call(event)
    if found is not None:
        return found
    kind = event["action"]
    args = event.get("args", {})
    need(isinstance(args, dict), f"{where}.args: not an object")
    if kind == "run" and isinstance(args.get("command"), str):
        return Action.make("run", raw=args["command"], command=args["command"], timeout=30.0)
    if (
        kind in ("write", "edit")
        and isinstance(args.get("path"), str)
        and isinstance(args.get("content"), str)
        and args["content"]
    ):
        return Action.make("create", raw=json.dumps(args), path=args["path"], content=args["content"])
    if kind == "read" and isinstance(args.get("path"), str):
        return Action.make("view", raw=json.dumps(args), path=args["path"], start=1, end=None)
    if kind == "finish":
        answer = args.get("final_thought") or event.get("message") or ""
        return Action.make("finish", raw=json.dumps(args), answer=answer if isinstance(answer, str) else json.dumps(answer))
    return canonical_action(kind, {k: v for k, v in args.items() if k not in _NOISE})


def whole_array(first: Any) -> bool:
    """A JSON array of events (or of OpenDevin's [action, observation] pairs) is one run
    (not a list of runs)."""
    if _pairs([first]):
        first = first[0]
    if not isinstance(first, dict):
        return False
    kind = first.get("kind")
    return "action" in first or "observation" in first or (isinstance(kind, str) and kind.endswith(("Event", "Observation")))


#: The event classes of OpenHands 1.x that a run's transitions come from.
SDK_EVENTS = frozenset({"ActionEvent", "ObservationEvent", "AgentErrorEvent", "UserRejectObservation", "MessageEvent"})
#: Fields of an SDK action that are not its arguments.
_SDK_NOISE = {"kind", "security_risk", "summary"}


def _sdk(events: list) -> bool:
    """Events of OpenHands 1.x (typed: ``kind``), not of 0.x (``action`` / ``observation``)."""
    return any(isinstance(e, dict) and e.get("kind") in SDK_EVENTS for e in events)


def claims_folder(folder: Path) -> bool:
    """A conversation folder of OpenHands 1.x: ``base_state.json`` and ``events/``."""
    return (folder / "base_state.json").is_file() and (folder / "events").is_dir()


def folder_record(folder: Path, read: Callable[[Path], Any]) -> dict[str, Any]:
    """A conversation folder as one record: its events in order (``event-00000-<id>.json``,
    ...), the conversation's ``id`` and its agent's model (``agent.llm.model``)."""
    state = read(folder / "base_state.json")
    state = state if isinstance(state, dict) else {}
    agent = state.get("agent") if isinstance(state.get("agent"), dict) else {}
    llm = agent.get("llm") if isinstance(agent.get("llm"), dict) else {}
    events = [read(p) for p in sorted((folder / "events").glob("event-*.json"))]
    return {"id": state.get("id"), "events": events} | ({"model": llm["model"]} if isinstance(llm.get("model"), str) else {})


def _sdk_call(e: dict, where: str) -> Action:
    """An SDK ``ActionEvent``'s call: the model's own tool call (``tool_call``: ``name`` and
    JSON ``arguments``, or litellm's ``function``), else the typed ``action``'s fields."""
    call = e.get("tool_call") if isinstance(e.get("tool_call"), dict) else {}
    fn = call.get("function") if isinstance(call.get("function"), dict) else call
    name = fn.get("name") if isinstance(fn.get("name"), str) and fn.get("name") else e.get("tool_name")
    need(isinstance(name, str) and name != "", "{}.tool_name: missing", where)
    raw = fn.get("arguments")
    if isinstance(raw, str):
        try:
            args = loads(raw)
        except ValueError:
            args = {"input": raw}
    elif isinstance(e.get("action"), dict):
        args = {k: v for k, v in e["action"].items() if k not in _SDK_NOISE and v is not None}
    else:
        args = raw if raw is not None else {}
    return canonical_action(name, args)


def _from_sdk(events: list, meta: dict, record: Any, name: str) -> Iterator[Episode]:
    answers: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    for i, e in enumerate(events):
        need(isinstance(e, dict), "events[{}]: not an object", i)
        kind, cid = e.get("kind"), e.get("tool_call_id")
        if kind not in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation") or not isinstance(cid, str):
            continue
        if kind == "ObservationEvent":
            obs = e.get("observation") if isinstance(e.get("observation"), dict) else {}
            text = as_text(obs["content"]) if "content" in obs else as_text({k: v for k, v in obs.items() if k != "kind"})
        else:
            text = as_text(e.get("error") if kind == "AgentErrorEvent" else e.get("rejection_reason"))
            errors[cid] = text or kind
        answers.setdefault(cid, []).append(text)
    instruction: str | None = None
    steps: list[Step] = []
    said: Action | None = None  # what the agent said, waiting for the user's reply
    for i, e in enumerate(events):
        kind = e.get("kind")
        if kind == "MessageEvent":
            message = e.get("llm_message") if isinstance(e.get("llm_message"), dict) else {}
            text = as_text(message.get("content"))
            if e.get("source") == "user" and instruction is None:
                instruction = text
            elif e.get("source") == "user" and said is not None:
                steps.append(Step(said, text))
            said = text_action(text) if e.get("source") == "agent" and text else None
        elif kind == "ActionEvent":
            said = None
            where = f"events[{i}]"
            cid = e.get("tool_call_id")
            need(isinstance(cid, str), "{}.tool_call_id: missing", where)
            if cid in answers or e.get("tool_name") == "finish":
                steps.append(Step(_sdk_call(e, where), "\n".join(answers.get(cid, [])), errors.get(cid)))
    if steps:
        yield _episode(steps, instruction, meta.get("model") if isinstance(meta.get("model"), str) else None, meta, record, name)


def _said(event: dict) -> str:
    """A message event's text (``args.content``, else its ``message``)."""
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    return as_text(args.get("content", event.get("message")))


def _episode(steps: list[Step], instruction: str | None, model: str | None, meta: dict, record: Any, name: str) -> Episode:
    """An OpenHands run's episode: the record's ``instance_id`` (else its ``id``, else the
    file's name) is its id; the runtime executed the actions."""
    rid = meta.get("instance_id") or meta.get("id") or name or CONTENT_ID
    if instruction is None and isinstance(meta.get("instruction"), str):  # an evaluation's output row
        instruction = meta["instruction"]
    return Episode(
        record_id=str(rid),
        initial=instruction or "",
        steps=steps,
        instruction=instruction,
        task_id=str(meta["instance_id"]) if meta.get("instance_id") else None,
        agent="openhands",
        model=model,
        executed="executed",
    )


def episodes(record: Any, name: str = "") -> Iterator[Episode]:
    events, meta, key = _events(record)
    if _pairs(events):
        events = _unpaired(events, key)
    if _chat(events):
        yield from _from_chat(events, meta, key, record, name)
        return
    if _sdk(events):
        yield from _from_sdk(events, meta, record, name)
        return
    by_cause: dict[Any, list[str]] = {}
    for i, e in enumerate(events):
        need(isinstance(e, dict), "events[{}]: not an object", i)
        if "observation" in e and "cause" in e:
            by_cause.setdefault(str(e["cause"]), []).append(as_text(e.get("content")))
    instruction: str | None = None
    steps: list[Step] = []
    model: str | None = None
    said: Action | None = None  # what the agent said, waiting for the user's reply
    for i, e in enumerate(events):
        where = f"events[{i}]"
        if "action" not in e:
            continue
        kind = e.get("action")
        need(isinstance(kind, str), "{}.action: not a string", where)
        text = _said(e) if kind == "message" else ""
        if e.get("source") == "user":
            if kind == "message" and instruction is None:
                instruction = text
            elif kind == "message" and said is not None:
                steps.append(Step(said, text))
            said = None
            continue
        said = text_action(text) if kind == "message" and text else None
        need("id" in e, "{}.id: missing", where)
        answers = by_cause.get(str(e["id"]))
        response = (
            (e.get("tool_call_metadata") or {}).get("model_response") if isinstance(e.get("tool_call_metadata"), dict) else None
        )
        if isinstance(response, dict) and isinstance(response.get("model"), str):
            model = response["model"]
        if answers is None and kind != "finish":
            continue  # an agent message or a thought: nothing answered it
        steps.append(Step(_action(e, where), "\n".join(answers or [])))
    if steps:
        yield _episode(steps, instruction, model, meta, record, name)
