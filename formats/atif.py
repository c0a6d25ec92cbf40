"""ATIF, Harbor's Agent Trajectory Interchange Format (RFC 0001, v1.0-v1.5): one JSON
object per trajectory (``schema_version``, ``session_id``, ``agent``, ``steps``).

In: each agent step's tool calls become transitions, one per call, with the observation
results that name the call (``source_call_id``); results that name none (or a call the
step does not make) go to the step's only call, or to its last one. An agent step with
results but no tool call becomes a ``message`` action. User steps before the first agent step are the initial state (the
first is the instruction); later user and system steps are kept in the next step's
``extra``, with what a system step observed (v1.2: a reset, a context summary, a
delegation) as its ``observation``. A result that delegates to a sub-agent is shown as a reference line (the
sub-trajectory is its own record). ``step_id`` may be a number or a numeric string (both
occur in Harbor's own files). Outputs came from executing the calls in the agent's
environment (Harbor's runs), so rows are ``executed`` unless the importer is told otherwise.
A Harbor trial folder (``result.json`` beside ``agent/trajectory.json``) is one record:
``_trial`` gives its trajectories the trial's task and the verifier's reward; Harbor's job
and trial files beside them in a jobs folder hold no trajectory and are skipped.

Out: ``export`` writes ATIF-v1.5 that passes the spec's rules: ``step_id`` 1, 2, ...; each
``source_call_id`` names a tool call of its step; our exact action, reward and error ride
in the step's ``extra.trajforge`` so a round trip keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from collectors.env import reward_in
from formats.episode import (
    KEYSTROKE_TOOLS,
    Episode,
    Step,
    as_text,
    canonical_action,
    ends_run,
    loads,
    need,
    ours_of,
    several_runs,
    task_of,
    text_action,
    with_ours,
    xml_action,
)
from schemas.transition import Action, Transition, canonical_json

NAME = "atif"
VERSION = "ATIF-v1.5"


#: Fields of Harbor's own job and trial files (``config.json``, ``result.json``), which sit
#: beside the trajectories in a jobs folder: such a record holds no trajectory, and is
#: skipped as one without actions rather than refused.
HARBOR_FILES = frozenset({"job_name", "n_total_trials", "trial_name", "trial_uri", "verifier_result"})


def claims_folder(folder: Path) -> bool:
    """A Harbor trial folder: ``result.json`` and the agent's ``agent/trajectory.json``."""
    return (folder / "result.json").is_file() and (folder / "agent" / "trajectory.json").is_file()


def folder_record(folder: Path, read: Callable[[Path], Any]) -> dict[str, Any]:
    """A Harbor trial folder as one record: its trial result (``result.json``) and its ATIF
    files (``agent/trajectory*.json``: the run, then its continuations and sub-agents, by
    name); the agent's other logs are not read."""
    files = sorted((folder / "agent").glob("trajectory*.json"), key=lambda p: (p.name != "trajectory.json", p.name))
    return {"harbor_trial": read(folder / "result.json"), "trajectories": {p.name: read(p) for p in files}}


def episodes(record: Any, name: str = "") -> Iterator[Episode]:
    if isinstance(record, dict) and "harbor_trial" in record and isinstance(record.get("trajectories"), dict):
        yield from _trial(record["harbor_trial"], record["trajectories"])
    elif not (isinstance(record, dict) and "steps" not in record and record.keys() & HARBOR_FILES):
        yield from _trajectory(record)


def _trial(result: Any, files: dict[str, Any]) -> Iterator[Episode]:
    """A Harbor trial's trajectories, each with the trial's task (``task_name``); the
    verifier's reward (``verifier_result.rewards``: its ``reward``, else its only number)
    is the outcome of the run's last segment (``trajectory.json``, then each
    ``continued_trajectory_ref`` in turn)."""
    result = result if isinstance(result, dict) else {}
    verifier = result.get("verifier_result") if isinstance(result.get("verifier_result"), dict) else {}
    reward = reward_in(verifier.get("rewards"))
    task = result.get("task_name") if isinstance(result.get("task_name"), str) else None
    last, seen = "trajectory.json", set()
    while last not in seen:
        seen.add(last)
        ref = files[last].get("continued_trajectory_ref") if isinstance(files.get(last), dict) else None
        if isinstance(ref, str) and Path(ref).name in files:
            last = Path(ref).name
    yield from several_runs(
        (f"agent/{file}: ", partial(_segment, trajectory, task, reward if file == last else None))
        for file, trajectory in files.items()
    )


def _segment(trajectory: Any, task: str | None, outcome: float | None) -> Iterator[Episode]:
    for ep in _trajectory(trajectory):
        yield replace(ep, task_id=ep.task_id or task, reward=ep.reward if outcome is None else outcome)


def _trajectory(record: Any) -> Iterator[Episode]:
    need(isinstance(record, dict), f"expected a JSON object, got {type(record).__name__}")
    steps = record.get("steps")
    need(isinstance(steps, list), "steps: missing or not a list")
    need(isinstance(record.get("schema_version", ""), str), "schema_version: not a string")
    session = record.get("session_id")
    need(isinstance(session, str) and session != "", "session_id: missing or not a string (the spec requires it)")
    agent = record.get("agent") if isinstance(record.get("agent"), dict) else {}
    agent_name = "/".join(str(agent[k]) for k in ("name", "version") if agent.get(k)) or None
    model = agent.get("model_name") if isinstance(agent.get("model_name"), str) else None
    users: list[str] = []  # the first state: what the user said (and showed) before the first action
    task: str | None = None
    out: list[Step] = []
    pending: list[dict[str, str]] = []
    said: Step | None = None  # an agent's message (no call, no result) waiting for the user's reply
    for index, step in enumerate(steps):
        where = f"steps[{index}]"
        need(isinstance(step, dict), "{}: not an object", where)
        sid = step.get("step_id")
        need(
            (isinstance(sid, int) and not isinstance(sid, bool) and sid >= 1)
            or (isinstance(sid, str) and sid.strip().isascii() and sid.strip().isdigit() and int(sid) >= 1),
            "{}.step_id: {!r} is not an integer from 1",
            where,
            sid,
        )
        source = step.get("source")
        need(source in ("system", "user", "agent"), "{}.source: {!r} is not system, user or agent", where, source)
        message = as_text(step.get("message"))
        if source != "agent":
            if said is not None and source == "user":  # the reply to what the agent said: its observation
                out.append(replace(said, observation=message))
                said = None
            elif not out and source == "user":
                prompt = _terminus_prompt(message)
                said_task, shown = prompt if prompt else (task_of(message), None)
                task = said_task if task is None else task
                users.append(said_task if shown is None else shown)
            elif out or source == "user":
                seen = _all_results(step, where)
                pending.append({"source": source, "message": message, **({"observation": seen} if seen else {})})
            continue
        model = step.get("model_name") if isinstance(step.get("model_name"), str) else model
        if not (step.get("tool_calls") or message or _step_ours(step)) and step.get("observation"):
            # what was observed with no action (ADP's export writes an observation no action
            # came before so): the first state's, else more of what followed the last action
            seen = _all_results(step, where)
            if out:
                out[-1] = replace(out[-1], observation="\n".join(t for t in (out[-1].observation, seen) if t))
            elif seen:
                users.append(seen)
            continue
        in_text = None
        if not (step.get("tool_calls") or step.get("observation") or _step_ours(step)):
            in_text = _call_in_text(message)
        if in_text is not None:  # a call in the text with no output: a transition only where it ends the run
            out.extend([Step(in_text, "", extra={"before": pending} if pending else {})] if ends_run(in_text) else [])
            pending = []
            continue
        said = None if step.get("tool_calls") or step.get("observation") else _said(step, pending)
        if said is None:
            out.extend(_agent_steps(step, where, pending))
        pending = []
    if not out:
        return
    extra = record.get("extra") if isinstance(record.get("extra"), dict) else {}
    ours = extra.get("trajforge") if isinstance(extra.get("trajforge"), dict) else {}
    episode = Episode(
        record_id=session,
        initial="\n\n".join(users),
        steps=out,
        instruction=ours.get("instruction") if "instruction" in ours else task,
        task_id=ours.get("task_id") if isinstance(ours.get("task_id"), str) else None,
        domain=ours.get("domain") if isinstance(ours.get("domain"), str) else None,
        agent=agent_name if not ours else (record.get("agent") or {}).get("name"),
        model=model,
        executed=ours.get("executed") if ours.get("executed") in ("executed", "not_executed", "unknown") else "executed",
        extra={k: record[k] for k in ("notes", "continued_trajectory_ref") if isinstance(record.get(k), str)},
    )
    yield with_ours(episode, ours)


def _results(step: dict, where: str) -> tuple[dict[str, list[str]], list[str]]:
    """A step's observation results as text: those naming a tool call, by its id, and the rest."""
    observation = step.get("observation") or {}
    need(isinstance(observation, dict), "{}.observation: not an object", where)
    results = observation.get("results") or []
    need(isinstance(results, list), "{}.observation.results: not a list", where)
    by_call: dict[str, list[str]] = {}
    loose: list[str] = []
    for j, r in enumerate(results):
        need(isinstance(r, dict), "{}.observation.results[{}]: not an object", where, j)
        text = as_text(r.get("content")) or _page(r)
        refs = r.get("subagent_trajectory_ref") or []
        if isinstance(refs, list):
            for ref in refs:
                if isinstance(ref, dict):
                    line = f"[sub-agent trajectory {ref.get('session_id')}: {ref.get('trajectory_path') or ''}]"
                    text += ("\n" if text else "") + line
        call_id = r.get("source_call_id")
        (by_call.setdefault(call_id, []) if isinstance(call_id, str) else loose).append(text)
    return by_call, loose


def _terminus_prompt(message: str) -> tuple[str, str] | None:
    """Terminus' first prompt (its instructions, ``Task Description:`` and the task, then
    ``Current terminal state:`` and the screen): the task and the screen, the first state
    the environment showed. None where the message is not that prompt."""
    head, found, screen = message.rpartition("\nCurrent terminal state:\n")
    _, marked, task = head.rpartition("\nTask Description:\n")
    return (task.strip(), screen) if found and marked else None


def _all_results(step: dict, where: str) -> str:
    """Every result of a step, as one text."""
    by_call, loose = _results(step, where)
    return "\n".join(loose + [t for v in by_call.values() for t in v])


def _call_in_text(message: str) -> Action | None:
    """A call an agent step writes in its text: OpenHands' XML call (a model without
    function calling), else a Terminus reply; None where it writes none."""
    return xml_action(message) or _terminus(message)


def _typed(calls: list) -> Action | None:
    """Several keystroke calls of one step (Terminus' ``bash_command``, a command each)
    whose results name none of them: the keys typed in turn, as one ``send_keys`` (the
    screen after them is one observation: split, every call but the last would have
    none). None where the step is not that."""
    if len(calls) < 2 or not all(isinstance(c, dict) for c in calls):
        return None
    keys = [(c.get("arguments") or {}).get("keystrokes") if isinstance(c.get("arguments"), dict) else None for c in calls]
    names = {str(c.get("function_name")).lower() for c in calls}
    if not (names <= KEYSTROKE_TOOLS and all(isinstance(k, str) for k in keys)):
        return None
    return canonical_action("bash_command", {"keystrokes": "".join(keys)}, raw=canonical_json(calls))


def _terminus(message: str) -> Action | None:
    """A Terminus reply kept as its text (an ATIF step without tool calls, as Harbor writes
    Terminus 2's with its JSON parser): the ``keystrokes`` of its ``commands``, typed in
    turn, as one ``send_keys``; no command and ``task_complete`` a finish; no command a
    ``wait``. None where the text is not a reply Terminus runs: its required fields
    (``analysis`` and ``plan``; Terminus 1's ``state_analysis`` and ``explanation``) missing,
    as Terminus refuses such a reply and runs nothing."""
    start, end = message.find("{"), message.rfind("}")
    if start < 0 or '"commands"' not in message:
        return None
    try:
        reply = loads(message[start : end + 1])
    except ValueError:
        return None
    commands = reply.get("commands") if isinstance(reply, dict) else None
    required = ({"analysis", "plan"}, {"state_analysis", "explanation"})
    if not (isinstance(commands, list) and any(r <= reply.keys() for r in required)):
        return None
    keys = [c.get("keystrokes") if isinstance(c, dict) else None for c in commands]
    if not all(isinstance(k, str) for k in keys):
        return None
    if "".join(keys):
        return canonical_action("bash_command", {"keystrokes": "".join(keys)}, raw=message)
    if reply.get("task_complete", reply.get("is_task_complete")) is True:
        return Action.make("finish", raw=message, answer="")
    return Action.make("wait", raw=message)


def _page(result: dict) -> str:
    """A result's web page where ADP's ATIF export keeps it (``extra.web``: the
    accessibility tree, else the HTML); empty where there is none."""
    extra = result.get("extra") if isinstance(result.get("extra"), dict) else {}
    web = extra.get("web") if isinstance(extra.get("web"), dict) else {}
    return next((web[k] for k in ("axtree", "html") if isinstance(web.get(k), str) and web[k]), "")


def _step_ours(step: dict) -> dict:
    """What our own export kept of a step (``extra.trajforge``); empty in another's file."""
    ours = (step.get("extra") or {}).get("trajforge") if isinstance(step.get("extra"), dict) else None
    return ours if isinstance(ours, dict) else {}


def _said(step: dict, before: list[dict[str, str]]) -> Step | None:
    """An agent step without tool calls or results that says something: a ``message``
    action, whose observation is the user's reply (a step of its own, next); None where it
    says nothing."""
    ours = _step_ours(step)
    if not as_text(step.get("message")) and not isinstance(ours.get("action"), dict):
        return None
    action = _ours(ours) or text_action(as_text(step.get("message")))
    return Step(action, "", ours.get("error"), _reward(ours), {"before": before} if before else {})


def _agent_steps(step: dict, where: str, before: list[dict[str, str]]) -> Iterator[Step]:
    calls = step.get("tool_calls") or []
    need(isinstance(calls, list), "{}.tool_calls: not a list", where)
    by_call, loose = _results(step, where)
    named = {c["tool_call_id"] for c in calls if isinstance(c, dict) and isinstance(c.get("tool_call_id"), str)}
    loose += [t for cid, texts in by_call.items() if cid not in named for t in texts]  # names no call of this step
    results = by_call or loose
    ours = _step_ours(step)
    extra = {"before": before} if before else {}
    typed = _typed(calls) if loose and not by_call and not ours else None
    if typed is not None:  # keystrokes typed in turn, one screen after them all: one action
        yield Step(typed, "\n".join(loose), extra=extra)
        return
    if not calls:
        if results:
            texts = loose  # with no call, every result names none of its calls
            message = as_text(step.get("message"))
            refused = any(t.startswith("Previous response had parsing errors") for t in texts)  # Terminus ran nothing
            action = _ours(ours) or (None if refused else _call_in_text(message)) or text_action(message)
            yield Step(action, "\n".join(texts), ours.get("error"), _reward(ours), extra)
        return
    for j, call in enumerate(calls):
        need(isinstance(call, dict), "{}.tool_calls[{}]: not an object", where, j)
        name, call_id = call.get("function_name"), call.get("tool_call_id")
        need(isinstance(name, str) and name != "", "{}.tool_calls[{}].function_name: missing", where, j)
        need(isinstance(call_id, str), "{}.tool_calls[{}].tool_call_id: missing", where, j)
        args = call.get("arguments", {})
        args = _json_args(args, f"{where}.tool_calls[{j}].arguments")
        texts = by_call.get(call_id, [])
        answered = call_id in by_call
        if j == len(calls) - 1:
            texts, answered = texts + loose, answered or bool(loose)
        action = _ours(ours) if len(calls) == 1 else None
        action = action or canonical_action(name, args)
        if answered or ends_run(action) or ours:  # a call no result answers has no next state
            yield Step(action, "\n".join(texts), ours.get("error"), _reward(ours), extra if j == 0 else {})


def _json_args(args: Any, where: str) -> Any:
    if args is None:  # a call without arguments, as some producers write it
        return {}
    if isinstance(args, str):  # some producers keep OpenAI's JSON string
        try:
            return loads(args)
        except ValueError:
            return {"input": args}
    need(isinstance(args, dict), f"{where}: not an object")
    return args


def _ours(ours: dict) -> Action | None:
    action = ours.get("action")
    if isinstance(action, dict) and isinstance(action.get("kind"), str):
        return Action(
            action["kind"],
            canonical_json(action),
            ours.get("raw") if isinstance(ours.get("raw"), str) else canonical_json(action),
        )
    return None


def _reward(ours: dict) -> float | None:
    r = ours.get("reward")
    return float(r) if isinstance(r, int | float) and not isinstance(r, bool) else None


def export(trajectory: Sequence[Transition]) -> dict[str, Any]:
    """One trajectory (its transitions in step order) as an ATIF-v1.5 object."""
    first = trajectory[0]
    prov = first.provenance
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": first.state.text}]
    for t in trajectory:
        n = len(steps) + 1
        call_id = f"call_{t.step}"
        name, args = _tool_call(t.action)
        ours: dict[str, Any] = {"action": _action_dict(t.action), "raw": t.action.raw, "step": t.step}
        if t.reward is not None:
            ours["reward"] = t.reward
        if t.action_error:
            ours["error"] = t.action_error
        if t.action.kind == "message":  # said, not done: the agent's message, then the user's reply
            text = t.action.args.get("text")
            steps.append({"step_id": n, "source": "agent", "message": text if isinstance(text, str) else t.action.raw})
            steps[-1]["extra"] = {"trajforge": ours}
            steps.append({"step_id": n + 1, "source": "user", "message": t.next_state.text})
            continue
        steps.append(
            {
                "step_id": n,
                "source": "agent",
                "message": "",
                "tool_calls": [{"tool_call_id": call_id, "function_name": name, "arguments": args}],
                "observation": {"results": [{"source_call_id": call_id, "content": t.next_state.text}]},
                "extra": {"trajforge": ours},
            }
        )
    agent = {"name": prov.agent or prov.policy or "unknown", "version": prov.collector_version or "0"}
    if prov.model:
        agent["model_name"] = prov.model
    return {
        "schema_version": VERSION,
        "session_id": first.trajectory_id,
        "agent": agent,
        "steps": steps,
        "final_metrics": {"total_steps": len(steps)},
        "extra": {"trajforge": ours_of(trajectory)},
    }


def _action_dict(action: Action) -> dict[str, Any]:
    import json

    return json.loads(action.canonical)


def _tool_call(action: Action) -> tuple[str, dict[str, Any]]:
    """Our action as a tool call a reader of ATIF understands."""
    args = action.args
    if action.kind == "call_tool" and isinstance(args.get("name"), str):
        return args["name"], args.get("arguments") if isinstance(args.get("arguments"), dict) else {}
    if action.kind == "run":
        return "bash", {"command": args.get("command", "")}
    return action.kind, args
