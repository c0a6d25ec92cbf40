"""What a converter hands over: an episode as the source tells it, and its transitions.

A source trajectory becomes an ``Episode``: the text the agent saw before its first action
(``initial``), then ``Step`` s, each an action and the observation that followed. The
transition of step k has the observation before it as its state (``initial`` for the
first) and the one after as its next state. Ids are derived from the source and its
record id, so importing the same record again gives the same ids::

    ep = Episode(record_id="run-7", initial="Fix the bug", steps=[Step(canonical_action("bash", {"command": "ls"}), "a.py")])
    transitions = to_transitions(ep, Origin(source="acme-runs", format="atif", file="runs.jsonl"))
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import re2

from schemas.record_files import parse
from schemas.transition import (
    FORMATS,
    VOLATILE_KINDS,
    Action,
    Observation,
    Provenance,
    Transition,
    VolatileSpan,
    canonical_json,
    content_hash,
    transition_id,
)
from schemas.volatile import detect_spans

#: Tool names that run a shell command (the agent frameworks' spellings) -> trajforge's ``run``.
SHELL_TOOLS = frozenset({"bash", "execute_bash", "run", "shell", "terminal", "run_command", "execute_command", "cmd", "exec"})
#: Tool names of the file editor OpenHands and SWE-agent share (``command``: view, create, ...).
EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "edit_file", "file_editor"})
#: Tools that type into a terminal (Terminus: ``bash_command`` with ``keystrokes``) -> ``send_keys``.
KEYSTROKE_TOOLS = frozenset({"bash_command", "send_keys", "keystrokes"})
#: Tools that end the episode -> ``finish``.
FINISH_TOOLS = frozenset({"submit", "finish", "mark_task_complete", "task_complete"})
#: What a finish call's arguments may hold: the answer (``answer``, ``message``, ``result``,
#: ToolBench's ``final_answer``) and how the run ended (OpenHands' ``task_completed``,
#: ToolBench's ``return_type``).
FINISH_ARGS = frozenset({"message", "answer", "result", "outputs", "task_completed", "final_answer", "return_type"})
#: Arguments that describe a call and change nothing it does: OpenHands asks the model for
#: the call's ``security_risk`` and, since its software-agent-sdk, a ``summary`` of it.
ANNOTATIONS = frozenset({"security_risk", "summary"})


class RecordError(ValueError):
    """A record that does not follow its format: the message names the field."""


def need(cond: bool, message: str, *parts: Any) -> None:
    """Refuse a record (``RecordError``) unless ``cond``. With ``parts``, the message is
    ``message.format(*parts)``, made only for a record refused (a converter checks every
    step of every record: formatting each check's message costs more than the check)."""
    if not cond:
        raise RecordError(message.format(*parts) if parts else message)


def several_runs(runs: Iterable[tuple[str, Callable[[], Iterable[Episode]]]]) -> Iterator[Episode]:
    """The episodes of a record that holds several runs (tau2-bench's ``simulations``, a
    Harbor trial's trajectories): ``runs`` gives each run's place in the record, the prefix
    of its problems (``simulations[2].``), and its episodes. A run that breaks its format's
    rules is skipped; after the others, the first such is raised with how many more, so one
    bad run does not take its neighbours with it."""
    refused: list[str] = []
    for where, episodes in runs:
        try:
            yield from episodes()
        except RecordError as exc:
            refused.append(f"{where}{exc}")
    if refused:
        raise RecordError(refused[0] + (f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""))


def ours_of(trajectory: Sequence[Transition]) -> dict[str, Any]:
    """What an export keeps, in its format's extension field, for a round trip to read back:
    the record's identity and provenance, each step's exact action, reward and error, and
    the observations' kinds and volatile spans (a collector marks spans no detector finds,
    a process id, and the content hash masks them: read back, they hash as before)."""
    first, prov = trajectory[0], trajectory[0].provenance
    observations = (first.state, *(t.next_state for t in trajectory))
    spans = [[[v.start, v.end, v.kind] for v in o.volatile_spans] for o in observations]
    return {
        "trajectory_id": first.trajectory_id,
        "domain": first.domain,
        "task_id": first.task_id,
        "instruction": first.instruction,
        "agent": prov.agent or prov.policy,
        "executed": prov.executed,
        "origin": prov.origin,
        "source": prov.source,
        "license": prov.license,
        "actions": [json.loads(t.action.canonical) for t in trajectory],
        "rewards": [t.reward for t in trajectory],
        "errors": [t.action_error for t in trajectory],
        "formats": [o.format for o in observations],
        "truncated": trajectory[-1].truncated,
    } | ({"volatile": spans} if any(spans) else {})


def with_ours(ep: Episode, ours: dict[str, Any]) -> Episode:
    """An episode with what our own export kept (``ours_of``) read back, each list where it
    has one entry a step: the exact actions, rewards and errors, the observations' kinds and
    volatile spans (and the first state's), and whether the episode was cut short."""
    if not ours:  # the common case: another project's record
        return ep
    steps, n = list(ep.steps), len(ep.steps)

    def each(key: str, size: int = n) -> list | None:
        v = ours.get(key)
        return v if isinstance(v, list) and len(v) == size else None

    if actions := each("actions"):
        steps = [
            replace(s, action=Action(a["kind"], canonical_json(a), s.action.raw))
            if isinstance(a, dict) and isinstance(a.get("kind"), str)
            else s
            for a, s in zip(actions, steps, strict=True)
        ]
    if (rewards := each("rewards")) is not None:
        steps = [
            replace(s, reward=r if isinstance(r, int | float) and not isinstance(r, bool) else None)
            for r, s in zip(rewards, steps, strict=True)
        ]
    if (errors := each("errors")) is not None:
        steps = [replace(s, error=e if isinstance(e, str) else None) for e, s in zip(errors, steps, strict=True)]
    kinds = each("formats", n + 1)
    if kinds is not None and all(isinstance(k, str) and k in FORMATS for k in kinds):
        steps = [replace(s, format=k) for k, s in zip(kinds[1:], steps, strict=True)]
        ep = replace(ep, initial_format=kinds[0])
    if (marked := each("volatile", n + 1)) is not None:
        spans = [_spans(v, t) for v, t in zip(marked, [ep.initial, *(s.observation for s in steps)], strict=True)]
        steps = [replace(s, spans=v) for v, s in zip(spans[1:], steps, strict=True)]
        ep = replace(ep, initial_spans=spans[0])
    return replace(ep, steps=steps, truncated=ours.get("truncated") is True)


def _spans(value: Any, text: Any) -> tuple[VolatileSpan, ...] | None:
    """An observation's volatile spans as our export keeps them (``[start, end, kind]``
    each, in order, apart, inside the text, of a known kind); None, where they are not, so
    that the importer detects them as in any record."""
    if not isinstance(value, list) or not isinstance(text, str):
        return None
    spans, end = [], 0
    for v in value:
        if not (isinstance(v, list) and len(v) == 3 and type(v[0]) is int and type(v[1]) is int):
            return None
        if not (end <= v[0] < v[1] <= len(text) and v[2] in VOLATILE_KINDS):
            return None
        spans.append(VolatileSpan(v[0], v[1], v[2]))
        end = v[1]
    return tuple(spans)


@dataclass(frozen=True)
class Step:
    """One action and what followed it. ``error``: the source says the action failed."""

    action: Action
    observation: str
    error: str | None = None
    reward: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    format: str = "text"  # the observation's kind (schemas.transition.FORMATS): a11y_tree, html ...
    spans: tuple[VolatileSpan, ...] | None = None  # its volatile spans where a source marks them (else detected)


@dataclass(frozen=True)
class Episode:
    """One trajectory as a source tells it."""

    record_id: str
    initial: str
    steps: list[Step]
    instruction: str | None = None
    task_id: str | None = None
    domain: str | None = None  # None: the importer's --domain, else inferred from the actions
    agent: str | None = None
    model: str | None = None
    executed: str = "unknown"
    reward: float | None = None  # the episode's outcome, on its last step
    extra: dict[str, Any] = field(default_factory=dict)
    initial_format: str = "text"  # the first state's kind, as ``Step.format``
    truncated: bool = False  # cut short (a step or time limit), not ended by the agent or the task
    initial_spans: tuple[VolatileSpan, ...] | None = None  # as ``Step.spans``


@dataclass(frozen=True)
class Origin:
    """Where an import reads from: the source dataset's name, the format, the file, and
    the licence (SPDX) when known."""

    source: str
    format: str
    file: str
    license: str | None = None
    run_id: str = "import"
    domain: str | None = None  # forced by the user


def stable_id(*parts: str) -> str:
    return hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


#: The record id of a record that has none of its own (no id field, and a file of many
#: records): ``to_transitions`` names it by its content, ``sha-`` and the digest of what its
#: transitions hold (``fingerprint``). Two copies of it that differ only in what no
#: transition keeps (a timestamp in its metadata, a field null in a Parquet copy, the
#: spelling of its JSON) are one record.
CONTENT_ID = "sha-"


def canonical_action(name: str, arguments: Any, raw: str | None = None) -> Action:
    """A tool call as trajforge's action where it maps to a known one (a shell command ->
    ``run``; the file editor's create / view / str_replace / insert -> the SWE actions; a
    finish or submit), else the generic ``call_tool`` with the name and arguments."""
    args = arguments if isinstance(arguments, dict) else {"input": arguments}
    raw = raw if raw is not None else canonical_json({"name": name, "arguments": arguments})
    lname = name.lower()
    command = args.get("command") if isinstance(args.get("command"), str) else None
    keys = set(args) - ANNOTATIONS
    if lname in SHELL_TOOLS and command is not None and keys <= {"command", "timeout", "is_input"}:
        return Action.make("run", raw=raw, command=command, timeout=30.0)
    if lname in EDITOR_TOOLS and isinstance(args.get("path"), str):
        path = args["path"]
        if command == "create" and isinstance(args.get("file_text"), str):
            return Action.make("create", raw=raw, path=path, content=args["file_text"])
        if command == "str_replace" and isinstance(args.get("old_str"), str):
            return Action.make("str_replace", raw=raw, path=path, old=args["old_str"], new=str(args.get("new_str") or ""))
        if command == "insert" and isinstance(args.get("insert_line"), int) and isinstance(args.get("new_str"), str):
            return Action.make("insert", raw=raw, path=path, line=args["insert_line"], text=args["new_str"])
        if command == "view" and not args.get("view_range"):
            return Action.make("view", raw=raw, path=path, start=1, end=None)
    if lname in KEYSTROKE_TOOLS and isinstance(args.get("keystrokes"), str) and keys <= {"keystrokes", "duration"}:
        keys = args["keystrokes"]
        return Action.make("send_keys", raw=raw, keys=keys.removesuffix("\n"), enter=keys.endswith("\n"), special=False)
    if lname in FINISH_TOOLS and keys <= FINISH_ARGS:
        answer = next((args[k] for k in ("answer", "message", "result", "final_answer") if k in args), "")
        return Action.make("finish", raw=raw, answer=answer if isinstance(answer, str) else canonical_json(answer))
    return Action.make("call_tool", raw=raw, name=name, arguments=args)


def ends_run(action: Action) -> bool:
    """A finish or a submit: an action that needs no answer to be a transition. Any other
    action is one only where something answered it (a call nothing answered has no next
    state: a world model trained on it would learn that tools answer with nothing)."""
    return action.kind in ("finish", "submit")


def text_action(text: str) -> Action:
    """An action the source gives as free text only (no tool call)."""
    return Action.make("message", raw=text, text=text)


#: Options of the converters' RE2 patterns (linear time: Python's ``re`` rescans the rest of
#: the text from every opener that is never closed, so an agent's message of repeated
#: openers would take hours).
LINEAR = re2.Options()
LINEAR.log_errors = False
_XML_CALL = re2.compile(r"(?s)<function=([^>\s]+)>(.*?)</function>", LINEAR)
_XML_PARAM = re2.compile(r"(?s)<parameter=([^>\s]+)>(.*?)</parameter>", LINEAR)
#: What OpenHands writes after a call's output when the model has no function calling.
_RESULT = re2.compile(r"(?s)EXECUTION RESULT of \[(.*?)\]:\n(.*)", LINEAR)
_TASK_START = "--------------------- NEW TASK DESCRIPTION ---------------------\n"
_TASK_END = "\n--------------------- END OF NEW TASK DESCRIPTION ---------------------"


def xml_call(text: str) -> tuple[str, dict[str, str]] | None:
    """A call written in a message's text as OpenHands prompts a model without function
    calling to write it (and SWE-smith trains on): ``<function=NAME>``, a
    ``<parameter=P>value</parameter>`` each, ``</function>``. A text with one call that
    lacks the closing tag (the model stopped at it: it is the stop word) gets it, as
    OpenHands' parser gives it. The name and the values as written; None: no call."""
    if "<function=" not in text:
        return None
    if "</function>" not in text and text.count("<function=") == 1:
        text = text.rstrip() + "function>" if text.endswith("</") else text + "\n</function>"
    found = _XML_CALL.search(text)
    return (found.group(1), dict(_XML_PARAM.findall(found.group(2)))) if found else None


def xml_action(text: str) -> Action | None:
    """The action of a call written as ``xml_call`` reads it; None: no call."""
    call = xml_call(text)
    return None if call is None else xml_call_action(*call)


def xml_call_action(name: str, params: dict[str, str]) -> Action:
    """A call ``xml_call`` read, as OpenHands reads it: each value without the blanks
    around it, ``insert_line`` a number and ``view_range`` a list where they read as one
    (the editor's typed parameters)."""
    args: dict[str, Any] = {k: v.strip() for k, v in params.items()}
    if isinstance(args.get("insert_line"), str) and args["insert_line"].isdigit():
        args["insert_line"] = int(args["insert_line"])
    if isinstance(args.get("view_range"), str) and args["view_range"].startswith("["):
        with contextlib.suppress(ValueError):
            args["view_range"] = loads(args["view_range"])
    return canonical_action(name, args)


def execution_result(text: str) -> tuple[str, str] | None:
    """A call's output as OpenHands gives it back to a model without function calling: a
    user message ``EXECUTION RESULT of [NAME]:`` and the output. The tool's name and the
    output (without the blanks around it, as OpenHands reads it); None: not one."""
    found = _RESULT.search(text) if "EXECUTION RESULT of [" in text else None
    return (found.group(1), found.group(2).strip()) if found else None


def task_of(text: str) -> str:
    """A first user message without the worked example OpenHands puts around the task for
    a model without function calling (``NEW TASK DESCRIPTION`` markers): the task alone.
    Any other text as it is."""
    start = text.find(_TASK_START)
    if start < 0:
        return text
    task = text[start + len(_TASK_START) :]
    end = task.rfind(_TASK_END)
    return task[:end] if end >= 0 else task


#: SWE-agent's interface commands, as tools (ADP's SWE datasets call them so).
SWE_TOOLS = frozenset(
    {"open", "goto", "scroll_up", "scroll_down", "create", "edit", "search_dir", "search_file", "find_file", "submit"}
)


def infer_domain(ep: Episode) -> str:
    """swe when the agent edits files or uses SWE-agent's commands, terminal when it only
    runs shell commands, else mcp (tool calls)."""
    kinds = {s.action.kind for s in ep.steps}
    if kinds & {"create", "str_replace", "insert", "view", "run_tests", "submit"}:
        return "swe"
    tools = {s.action.args.get("name") for s in ep.steps if s.action.kind == "call_tool"}
    if tools & SWE_TOOLS:
        return "swe"
    if kinds & {"run", "send_keys"} and kinds <= {"run", "send_keys", "interrupt", "wait", "finish", "message"}:
        return "terminal"
    return "mcp"


def to_transitions(
    ep: Episode, origin: Origin, *, trajectory_key: tuple[str, ...] = (), collected_at: datetime | None = None
) -> list[Transition]:
    """An episode's transitions (empty for an episode without steps). The trajectory id
    comes from the source's name, the record id, ``trajectory_key`` (the importer passes
    the episode's place in its record) and the episode's ``fingerprint``: two different
    records that share an id, as files from one run often do, stay apart, and the same
    record read again, from any file, in any spelling of its JSON, gets the same ids."""
    if not ep.steps:
        return []
    _check(ep)
    domain = origin.domain or ep.domain or infer_domain(ep)
    observations = [
        _observation(ep.initial, None, ep.initial_format, ep.initial_spans),
        *(_observation(s.observation, s.extra, s.format, s.spans) for s in ep.steps),
    ]
    hashes = [content_hash(observations[i], s.action, observations[i + 1]) for i, s in enumerate(ep.steps)]
    last = len(ep.steps) - 1
    rewards = [s.reward if s.reward is not None else (ep.reward if i == last else None) for i, s in enumerate(ep.steps)]
    if rewards.count(None) < len(rewards):
        rewards = [None if r is None else _reward(r, i) for i, r in enumerate(rewards)]
    key = fingerprint(ep, observations, hashes, rewards)
    record_id = CONTENT_ID + key[:24] if ep.record_id == CONTENT_ID else ep.record_id
    trajectory_id = "imp-" + stable_id(origin.source, record_id, *trajectory_key, key)
    task_id = ep.task_id if ep.task_id and ep.task_id != CONTENT_ID else record_id
    provenance = Provenance(
        run_id=origin.run_id,
        collector=f"import:{origin.format}",
        collector_version="1",
        policy=ep.agent or "unknown",
        model=ep.model,
        job_id=origin.run_id,
        collected_at=collected_at or datetime.now(UTC),
        extra=canonical_json(ep.extra) if ep.extra else "{}",
        origin="imported",
        executed=ep.executed,
        source=origin.source,
        source_format=origin.format,
        source_file=origin.file,
        source_record=record_id,
        license=origin.license,
        agent=ep.agent,
    )
    env_id = f"import:{origin.format}"
    return [
        Transition(
            transition_id=transition_id(trajectory_id, i),
            trajectory_id=trajectory_id,
            step=i,
            domain=domain,
            env_id=env_id,
            task_id=task_id,
            instruction=ep.instruction,
            state=observations[i],
            action=step.action,
            next_state=observations[i + 1],
            reward=rewards[i],
            terminated=i == last and not ep.truncated,
            truncated=i == last and ep.truncated,
            action_error=step.error,
            action_ms=0.0,
            observe_ms=0.0,
            settle_ms=0.0,
            provenance=provenance,
            content_hash=hashes[i],
        )
        for i, step in enumerate(ep.steps)
    ]


def _check(ep: Episode) -> None:
    """An episode's fields are of the types its transitions hold (a source's extension
    fields, such as ``extra.trajforge``, can hold anything): ``RecordError`` naming the
    field where one is not."""
    texts = (ep.instruction, ep.task_id, ep.agent, ep.model)
    if type(ep.initial) is str and texts.count(None) + [type(v) for v in texts].count(str) == 4:
        for step in ep.steps:  # (every record is checked: the checks below only name what is wrong)
            if type(step.action.kind) is not str or type(step.observation) is not str:
                break
            if step.error is not None and type(step.error) is not str:
                break
        else:
            return
    for name in ("instruction", "task_id", "agent", "model"):
        value = getattr(ep, name)
        need(value is None or isinstance(value, str), "{}: not a string ({})", name, type(value).__name__)
    need(isinstance(ep.initial, str), "initial state: not a string ({})", type(ep.initial).__name__)
    for i, step in enumerate(ep.steps):
        need(isinstance(step.action.kind, str), "steps[{}].action.kind: not a string", i)
        need(isinstance(step.observation, str), "steps[{}].observation: not a string", i)
        need(step.error is None or isinstance(step.error, str), "steps[{}].error: not a string", i)


def _reward(value: Any, step: int) -> float | None:
    """A reward as a transition holds it: a finite number, or None (NaN, which Python's
    ``json`` writes for "no value", is None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    need(isinstance(value, int | float) and not isinstance(value, bool), "steps[{}].reward: not a number", step)
    try:
        reward = float(value)
    except OverflowError:
        reward = math.inf
    need(math.isfinite(reward), "steps[{}].reward: not a finite number ({})", step, value)
    return reward


def fingerprint(ep: Episode, observations: list[Observation], hashes: list[str], rewards: list[float | None]) -> str:
    """What an episode's transitions hold, digested: each step's content hash (its
    normalised, volatile-masked state, canonical action and next state), reward, error and
    observation fields and kinds, and the episode's instruction, task, agent, model, extra
    and whether it was cut short. Not
    what the importer's options set (``--domain``, ``--executed``) nor where the record was
    read from: re-importing with other options, or from another copy of the file, adds
    nothing. Records that differ only in what the content hash leaves out (volatile spans,
    trailing blanks, a tool call's spelling where its canonical action is the same) are
    one trajectory."""
    parts = [ep.instruction or "", ep.task_id or "", ep.agent or "", ep.model or "", canonical_json(ep.extra) if ep.extra else ""]
    for h, obs, step, reward in zip(hashes, observations[1:], ep.steps, rewards, strict=True):
        parts += (h, obs.extra, step.error or "", "" if reward is None else repr(reward))
        if obs.format != "text":  # (only then: the ids of runs of text stay as they were)
            parts.append(obs.format)
    if ep.initial_format != "text":
        parts.append(f"initial {ep.initial_format}")
    if ep.truncated:
        parts.append("truncated")
    return stable_id(*parts)


def _observation(
    text: str, extra: dict[str, Any] | None = None, fmt: str = "text", spans: tuple[VolatileSpan, ...] | None = None
) -> Observation:
    return Observation(
        text, fmt, None, canonical_json(extra) if extra else "{}", False, detect_spans(text) if spans is None else spans
    )


def loads(text: str | bytes) -> Any:
    """JSON text embedded in a record (a tool call's arguments), read as the record's own
    lines are: orjson (five times faster), else Python's parser where orjson refuses the
    text (lone surrogate escapes, NaN, a number beyond a double). Like the lines, an integer
    beyond 64 bits comes back as a float, and a lone surrogate escape as U+FFFD (no UTF-8
    text can hold it). ``ValueError`` when it is not JSON."""
    return parse(text)


def unpacked(value: Any, field: str) -> Any:
    """A field that datasets keep either as JSON or as JSON text (a column of strings):
    the text parsed; ``RecordError`` naming the field where it is not JSON."""
    if not isinstance(value, str):
        return value
    try:
        return loads(value)
    except ValueError:
        raise RecordError(f"{field}: not JSON") from None


def as_text(value: Any) -> str:
    """A source's content as text: strings as they are, lists of content parts joined (an
    image part as a short ``[image: ...]`` line, ``image_text``), anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        parts = [
            p["text"] if isinstance(p.get("text"), str) else image_text(p) or json.dumps(p, ensure_ascii=False) for p in value
        ]
        return "\n".join(parts)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def image_text(part: dict[str, Any]) -> str | None:
    """An image content part as the line a text observation keeps of it: where the image
    is (a path or URL) and its media type, never its bytes (a base64 ``data`` field or a
    ``data:`` URI is megabytes no world model should learn to write). The spellings of
    OpenAI (``image_url``: a URL or ``{"url"}``), Anthropic and ATIF (``image``:
    ``source`` with ``data``, ``url`` or ``path``, and ``media_type``). None: not an image."""
    kind = part.get("type")
    if not (isinstance(kind, str) and kind.startswith(("image", "input_image"))):
        return None
    source = part.get("source", part.get("image_url", part.get("url")))
    source = {"url": source} if isinstance(source, str) else source if isinstance(source, dict) else {}
    where = next((source[k] for k in ("path", "url") if isinstance(source.get(k), str)), None)
    media = source.get("media_type") if isinstance(source.get("media_type"), str) else None
    if where is not None and where.startswith("data:"):  # data:image/png;base64,...
        media, where = media or where[5:].split(";", 1)[0].split(",", 1)[0], None
    elif where is not None and len(where) > 2048:  # no path or URL is this long: the bytes themselves
        where = None
    said = [w for w in (where, f"({media})" if media else None) if w]
    return "[image" + (": " + " ".join(said) if said else "") + "]"
