"""ADP, the Agent Data Protocol (neulab/agent-data-protocol): a trajectory is ``id``,
``content`` (actions and observations in order, each with ``class_``) and ``details``.

In: each action (``api_action``: function and kwargs; ``code_action``: language and code;
``message_action``: content, a finish where it is ADP's ``<finish> answer </finish>``)
becomes a transition; the observations after it, up to the next action, are its next state
(``text_observation``: content; ``web_observation``: the accessibility tree, else the
HTML); an action no observation follows is none, unless it is a finish. Observations
before the first action are the first
state; the first user text is the instruction. Web observations make the domain web and
their text an ``a11y_tree``; code actions in bash run as ``run``; BrowserGym calls (click,
fill ...) as our web actions. Whether the source executed anything ADP does not say:
``unknown`` unless the importer is told. ``kwargs`` values that are JSON-quoted strings (as
some converters wrote them) are unquoted.

Out: ``export`` writes one ADP trajectory per line: a shell command as a bash
``code_action``, what the agent says as a ``message_action`` (the user's reply after it),
a tool call as an ``api_action`` of that tool, any other action as an ``api_action`` of
our kind; our observations as ``text_observation`` (source environment; the first state's
source user), a page (``a11y_tree``, ``html``) as a ``web_observation``, and
``details.trajforge`` with what a round trip needs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from formats.episode import (
    Episode,
    Step,
    as_text,
    canonical_action,
    ends_run,
    image_text,
    loads,
    need,
    ours_of,
    unpacked,
    with_ours,
)
from schemas.transition import Action, Observation, Transition, canonical_json

NAME = "adp"
ONE_FILE_PER_TRAJECTORY = False
ACTIONS = ("api_action", "code_action", "message_action")
OBSERVATIONS = ("text_observation", "web_observation", "image_observation")
#: ADP's schema document spells ``class_`` as its models do (``message_action``), but its
#: example as the class names (``MessageAction``, with ``message`` / ``text`` for ``content``):
#: both are read.
CLASS_NAMES = {"".join(w.title() for w in c.split("_")): c for c in ACTIONS + OBSERVATIONS}
#: BrowserGym calls (ADP's web datasets) -> our web actions, argument by argument.
BROWSER = {
    "click": ("click", {"bid": "bid"}),
    "fill": ("fill", {"bid": "bid", "value": "text"}),
    "hover": ("hover", {"bid": "bid"}),
    "select_option": ("select_option", {"bid": "bid", "options": "value"}),
    "goto": ("goto", {"url": "url"}),
    "go_back": ("go_back", {}),
    "send_msg_to_user": ("send_msg_to_user", {"text": "text"}),
    "noop": ("noop", {}),
}


def _unquote(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return loads(value)
        except ValueError:
            return value
    return value


def _content(item: dict) -> Any:
    """An item's ``content`` (the example's ``message`` and ``text`` where it has none)."""
    return item["content"] if "content" in item else item.get("message", item.get("text"))


def _action(item: dict, where: str, web: bool) -> Action:
    kind = CLASS_NAMES.get(item["class_"], item["class_"])
    if kind == "api_action":
        fn = item.get("function")
        need(isinstance(fn, str) and fn != "", f"{where}.function: missing")
        kwargs = item.get("kwargs")
        kwargs = {} if kwargs is None else unpacked(kwargs, f"{where}.kwargs")  # null as absent (a Parquet copy drops it)
        need(isinstance(kwargs, dict), f"{where}.kwargs: not an object")
        kwargs = {k: _unquote(v) for k, v in kwargs.items()}
        if web and fn in BROWSER and set(kwargs) <= set(BROWSER[fn][1]):
            kind_, names = BROWSER[fn]
            args = {names[k]: v for k, v in kwargs.items()}
            return Action.make(kind_, raw=canonical_json({"function": fn, "kwargs": kwargs}), **args)
        return canonical_action(fn, kwargs)
    if kind == "code_action":
        code = _content(item)
        need(isinstance(code, str), f"{where}.content: missing or not a string")
        language = item.get("language") or ""
        if language in ("bash", "shell", "sh"):
            return Action.make("run", raw=code, command=code, timeout=30.0)
        return Action.make("call_tool", raw=code, name=f"execute_{language or 'code'}", arguments={"code": code})
    text = as_text(_content(item))
    said = text.strip()
    if said.startswith("<finish>") and said.endswith("</finish>"):  # ADP's final answer
        return Action.make("finish", raw=text, answer=said.removeprefix("<finish>").removesuffix("</finish>").strip())
    return Action.make("message", raw=text, text=text)


def _observation(item: dict) -> tuple[str, str]:
    """An observation's text and its kind: a web page's accessibility tree (``a11y_tree``),
    else its HTML (``html``); anything else ``text``."""
    kind = CLASS_NAMES.get(item["class_"], item["class_"])
    if kind == "web_observation":
        for key, fmt in (("axtree", "a11y_tree"), ("html", "html")):
            v = item.get(key)
            if isinstance(v, str) and v not in ("", "None"):
                return v, fmt
        return "", "a11y_tree"
    if kind == "image_observation":
        return image_text({"type": "image", "url": _content(item)}) or "[image]", "text"
    return as_text(_content(item)), "text"


def _kind(formats: list[str]) -> str:
    """The kind of a state made of several observations: a page's, where one is a page."""
    return next((f for f in formats if f != "text"), "text")


def episodes(record: Any, name: str = "") -> Iterator[Episode]:
    need(isinstance(record, dict), f"expected a JSON object, got {type(record).__name__}")
    content = record.get("content")
    need(isinstance(content, list), "content: missing or not a list")
    rid = record.get("id")
    need(isinstance(rid, str | int) and not isinstance(rid, bool) and rid != "", "id: missing or not a string (ADP requires it)")
    details = record.get("details") if isinstance(record.get("details"), dict) else {}
    ours = details.get("trajforge") if isinstance(details.get("trajforge"), dict) else {}
    web = any(isinstance(c, dict) and c.get("class_") in ("web_observation", "WebObservation") for c in content)
    first: list[str] = []
    instruction: str | None = None
    steps: list[Step] = []
    action: Action | None = None
    seen: list[str] = []
    kinds: tuple[list[str], list[str]] = ([], [])  # of the first state, of the observations seen
    for i, item in enumerate(content):
        where = f"content[{i}]"
        need(isinstance(item, dict), f"{where}: not an object")
        cls = item.get("class_")
        cls = CLASS_NAMES.get(cls, cls) if isinstance(cls, str) else cls
        need(cls in ACTIONS + OBSERVATIONS, f"{where}.class_: {cls!r} is not an ADP action or observation")
        if cls in ACTIONS:
            if action is not None and (seen or ends_run(action)):
                steps.append(Step(action, "\n".join(seen), format=_kind(kinds[1])))
            action, seen = _action(item, where, web), []
            kinds[1].clear()
            continue
        text, fmt = _observation(item)
        if instruction is None and item.get("source") == "user":
            instruction = text
        (seen if action is not None else first).append(text)
        kinds[action is not None].append(fmt)
    if action is not None and (seen or ends_run(action)):
        steps.append(Step(action, "\n".join(seen), format=_kind(kinds[1])))
    if not steps:
        return
    rid = str(rid)
    episode = Episode(
        record_id=rid,
        initial="\n".join(first),
        steps=steps,
        instruction=ours.get("instruction", instruction),
        task_id=ours.get("task_id") if isinstance(ours.get("task_id"), str) else None,
        domain=ours.get("domain") if isinstance(ours.get("domain"), str) else ("web" if web else None),
        agent=ours.get("agent") if isinstance(ours.get("agent"), str) else None,
        model=_model(details),
        executed=ours.get("executed") if ours.get("executed") in ("executed", "not_executed", "unknown") else "unknown",
        extra={"details": {k: v for k, v in details.items() if k != "trajforge"}} if details else {},
        initial_format=_kind(kinds[0]),
    )
    yield with_ours(episode, ours)


def _model(details: dict) -> str | None:
    for k in ("model_name", "model"):
        if isinstance(details.get(k), str):
            return details[k]
    return None


#: Our observation kinds that are ADP web observations, and the field that holds them.
_WEB_FIELDS = {"a11y_tree": "axtree", "html": "html"}


def _observed(obs: Observation, source: str) -> dict[str, Any]:
    """An observation as ADP's: a page (accessibility tree or HTML, with its ``url`` where
    we know it) as a ``web_observation``, anything else as a ``text_observation``."""
    if obs.format in _WEB_FIELDS:
        url = obs.extra_dict.get("url")
        return {"class_": "web_observation", _WEB_FIELDS[obs.format]: obs.text, "url": url if isinstance(url, str) else None}
    return {"class_": "text_observation", "content": obs.text, "name": None, "source": source}


def _acted(action: Action) -> dict[str, Any]:
    """An action as ADP's: a shell command as a bash ``code_action``, what the agent says as
    a ``message_action``, a tool call as an ``api_action`` of that tool, any other action
    as an ``api_action`` of our kind (the exact action rides in ``details.trajforge``)."""
    args = action.args
    if action.kind == "run" and isinstance(args.get("command"), str):
        return {"class_": "code_action", "language": "bash", "content": args["command"], "description": None}
    if action.kind == "message" and isinstance(args.get("text"), str):
        return {"class_": "message_action", "content": args["text"], "description": None}
    if action.kind == "call_tool" and isinstance(args.get("name"), str) and isinstance(args.get("arguments"), dict):
        return {"class_": "api_action", "function": args["name"], "kwargs": args["arguments"], "description": None}
    return {"class_": "api_action", "function": action.kind, "kwargs": args, "description": None}


def export(trajectory: Sequence[Transition]) -> dict[str, Any]:
    first = trajectory[0]
    content: list[dict[str, Any]] = [_observed(first.state, "user")]
    for t in trajectory:
        content.append(_acted(t.action))
        content.append(_observed(t.next_state, "user" if t.action.kind == "message" else "environment"))
    prov = first.provenance
    return {
        "id": first.trajectory_id,
        "content": content,
        "details": {"trajforge": ours_of(trajectory), **({"model_name": prov.model} if prov.model else {})},
    }
