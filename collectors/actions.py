"""Typed actions: checked at construction, one canonical JSON string each, and a
description for agent prompts generated from the code.

Each domain declares its actions as frozen dataclasses with an ``action`` kind and a
docstring; a field's limits are declared with its type (``Annotated[str, NonEmpty()]``,
``Between``, ``Length``, ``OneOf``) and checked with it, ``check`` holds the rest. A
subclass that adds no fields needs no decorator. An ``ActionSpace`` parses what a policy emitted (a dict, JSON text, or an
action object) into one of them, or says why it cannot, in one line. That line becomes the
step's ``action_error``: a malformed action is data, not a crash::

    space = ActionSpace("terminal", [RunCommand, SendKeys, WriteFile])
    space.parse('{"action": "run", "command": "ls"}')  # RunCommand(command='ls', timeout=30.0)
    space.describe()                                   # text for the agent's system prompt
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from typing import Annotated, Any, ClassVar

from schemas.transition import Action, canonical_json


class ActionError(ValueError):
    """An agent's action is malformed or not allowed; becomes ``action_error``."""


@dataclasses.dataclass(frozen=True)
class NonEmpty:
    """The text (or list) must not be empty or blank."""

    def check(self, where: str, value: Any) -> None:
        if not (value.strip() if isinstance(value, str) else value):
            raise ActionError(f"{where}: must not be empty")


@dataclasses.dataclass(frozen=True)
class Between:
    """A number from ``lo`` to ``hi``, both included."""

    lo: float
    hi: float

    def check(self, where: str, value: Any) -> None:
        if not self.lo <= value <= self.hi:
            raise ActionError(f"{where}: expected {self.lo} to {self.hi}, got {value}")


@dataclasses.dataclass(frozen=True)
class Length:
    """A text of ``lo`` to ``hi`` characters."""

    lo: int
    hi: int

    def check(self, where: str, value: Any) -> None:
        if not self.lo <= len(value) <= self.hi:
            raise ActionError(f"{where}: expected {self.lo} to {self.hi} characters")


@dataclasses.dataclass(frozen=True)
class OneOf:
    """One of a few names."""

    choices: tuple[str, ...]

    def check(self, where: str, value: Any) -> None:
        if value not in self.choices:
            *head, last = self.choices
            raise ActionError(f"{where}: expected {', '.join(head)} or {last}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """Base of typed actions. Subclasses set ``kind`` and declare fields with types."""

    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        fields = dataclasses.fields(self)
        for f in fields:  # every type first, then the limits: a limit may assume its type
            value = getattr(self, f.name)
            expected = _plain(hints[f.name])
            if not _matches(value, expected):
                raise ActionError(f"{self.kind}.{f.name}: expected {_type_name(expected)}, got {value!r}")
        for f in fields:
            for limit in getattr(hints[f.name], "__metadata__", ()):
                limit.check(f"{self.kind}.{f.name}", getattr(self, f.name))
        self.check()

    def check(self) -> None:
        """Extra validation of field values; raise ActionError."""

    def to_action(self, raw: str | None = None) -> Action:
        args = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return Action.make(self.kind, raw=raw, **args)

    @property
    def canonical(self) -> str:
        return canonical_json({"kind": self.kind, **dataclasses.asdict(self)})

    @classmethod
    def describe(cls) -> str:
        hints = typing.get_type_hints(cls)
        params = []
        for f in dataclasses.fields(cls):
            default = "" if f.default is dataclasses.MISSING else f" = {f.default!r}"
            if f.default_factory is not dataclasses.MISSING:
                default = f" = {f.default_factory()!r}"
            params.append(f"{f.name}: {_type_name(hints[f.name])}{default}")
        doc = " ".join((cls.__doc__ or "").split())
        return f"{cls.kind}({', '.join(params)}): {doc}"

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """A JSON schema of the arguments (for tool-calling chat APIs)."""
        hints = typing.get_type_hints(cls)
        props, required = {}, []
        for f in dataclasses.fields(cls):
            props[f.name] = _schema(hints[f.name])
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A class's field types with their limits, evaluated once (each action checks them)."""
    return typing.get_type_hints(cls, include_extras=True)


def _plain(t: Any) -> Any:
    """The type without its ``Annotated`` limits."""
    return typing.get_args(t)[0] if typing.get_origin(t) is Annotated else t


def _matches(value: Any, expected: Any) -> bool:
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(expected))
    if expected is type(None):
        return value is None
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        (item,) = typing.get_args(expected)[:1] or (Any,)
        return isinstance(value, list | tuple) and all(_matches(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    if expected is Any:
        return True
    return isinstance(value, expected)


def _type_name(t: Any) -> str:
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(t))
    if origin in (list, tuple):
        return f"list[{_type_name(typing.get_args(t)[0])}]"
    if origin is dict or t is dict:
        return "object"
    return getattr(t, "__name__", str(t)).replace("NoneType", "null")


def _schema(t: Any) -> dict[str, Any]:
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema(a) for a in typing.get_args(t)]}
    if origin in (list, tuple):
        return {"type": "array", "items": _schema(typing.get_args(t)[0])}
    if origin is dict:
        return {"type": "object"}
    return {
        str: {"type": "string"},
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
        dict: {"type": "object"},
        type(None): {"type": "null"},
    }.get(t, {})


@dataclasses.dataclass(frozen=True)
class Wait(ActionSpec):
    """Wait for the screen to update (an app starting, a dialog opening): 0 to 10 seconds."""

    kind = "wait"
    seconds: Annotated[float, Between(0, 10)] = 1.0


class ActionSpace:
    """The actions of one domain."""

    def __init__(self, domain: str, actions: list[type[ActionSpec]]) -> None:
        self.domain = domain
        self.actions = {a.kind: a for a in actions}

    def parse(self, raw: Any) -> ActionSpec:
        """An action object from a dict, JSON text or an ActionSpec; ActionError otherwise."""
        if isinstance(raw, ActionSpec):
            if raw.kind not in self.actions:
                raise ActionError(f"action {raw.kind!r} is not in the {self.domain} action space")
            return raw
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                raise ActionError(f"not JSON: {raw[:80]!r}") from None
        if not isinstance(raw, dict):
            raise ActionError(f"an action must be a JSON object, got {type(raw).__name__}")
        body = dict(raw)
        kind = body.pop("action", None) or body.pop("kind", None)
        if kind not in self.actions:
            raise ActionError(f"unknown action {kind!r} (known: {', '.join(self.actions)})")
        cls = self.actions[kind]
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(body) - names)
        if unknown:
            raise ActionError(f"{kind}: unknown argument {unknown[0]!r}")
        try:
            return cls(**body)
        except TypeError as exc:  # missing required arguments
            raise ActionError(f"{kind}: {str(exc).split('() ', 1)[-1]}") from None

    def describe(self) -> str:
        return "\n".join(f"- {cls.describe()}" for cls in self.actions.values())

    def tools(self) -> list[dict[str, Any]]:
        """OpenAI-style tool definitions, one per action."""
        return [
            {
                "type": "function",
                "function": {
                    "name": kind,
                    "description": " ".join((cls.__doc__ or "").split()),
                    "parameters": cls.json_schema(),
                },
            }
            for kind, cls in self.actions.items()
        ]
