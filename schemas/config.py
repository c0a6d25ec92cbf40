"""The one loader of YAML configs: every job, curation, mixture and training config goes
through ``load_yaml_model``, so each is checked the same way before any work starts.

cfg = load_yaml_model("cur.yaml", CurationConfig, "curation config")
# ConfigError("cur.yaml: near_dedup.threshold: Input should be less than or equal to 1")

A config file is hostile input. It must be a regular, readable file of at most
``MAX_CONFIG_BYTES`` of UTF-8 YAML whose top is a non-empty mapping; duplicate keys,
aliases that expand past ``MAX_CONFIG_NODES`` values (or into a loop), nesting deeper
than ``MAX_CONFIG_DEPTH``, non-finite floats and integers beyond 64 bits are refused
before the model sees the data. Every refusal is one ``ConfigError`` line naming the file
and the key.
"""

from __future__ import annotations

import math
import stat
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from schemas.errors import ConfigError, one_line

M = TypeVar("M", bound=BaseModel)

MAX_CONFIG_BYTES = 1 << 20  # configs are hand-written: a MiB is far beyond any real one
MAX_CONFIG_NODES = 100_000  # values after aliases are expanded (a "billion laughs" stops here)
MAX_CONFIG_DEPTH = 64
INT_LIMIT = 1 << 63


class StrictConfig(BaseModel):
    """Base of config sections: unknown keys refused, NaN and infinity refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Loader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping (YAML says keys are unique;
    PyYAML silently keeps the last) and nesting deeper than ``MAX_CONFIG_DEPTH`` (PyYAML
    composes recursively: a file of brackets would otherwise exhaust the stack, slowly)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(f"line {mark.line + 1}: nested deeper than {MAX_CONFIG_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable: SafeLoader's own error says so below
            if duplicate:
                mark = key_node.start_mark
                raise ConfigError(f"line {mark.line + 1}: duplicate key {key!r}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_config_text(path: str | Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """The text of a config file, or a one-line error: missing, a folder, not a regular
    file, unreadable, larger than ``max_bytes`` or not UTF-8."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{path}: is a folder, not a {what} file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: not a regular file (a {what} must be a YAML file)")
    if st.st_size > max_bytes:
        raise ConfigError(f"{path}: {st.st_size} bytes is too large for a {what} (at most {max_bytes})")
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{path}: too large for a {what} (at most {max_bytes} bytes)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): a {what} is a YAML file"
        ) from None


def parse_yaml(text: str, path: str | Path) -> Any:
    """Safe-load YAML text; syntax errors, duplicate keys and Python tags are one line."""
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = exc.problem or exc.context or "unreadable"
        raise ConfigError(f"{path}: not valid YAML: {problem}{where}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0] if str(exc) else 'unreadable'}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML: nested too deeply") from None


def check_values(data: Any, path: str | Path, max_nodes: int = MAX_CONFIG_NODES) -> None:
    """Refuse what YAML allows and no config needs: aliases that expand past ``max_nodes``
    values or into themselves, deep nesting, NaN, infinities and integers beyond 64 bits.
    Walks the data as a model would (aliases expanded)."""
    count = 0
    stack: list[tuple[Any, str, int, tuple[int, ...]]] = [(data, "", 0, ())]
    while stack:
        value, key, depth, parents = stack.pop()
        count += 1
        if count > max_nodes:
            raise ConfigError(f"{path}: more than {max_nodes} values once aliases are expanded")
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{path}: {key or '(top)'}: nested deeper than {MAX_CONFIG_DEPTH} levels")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}: {key or '(top)'}: must be a finite number, got {value}")
        if isinstance(value, int) and not isinstance(value, bool) and not -INT_LIMIT <= value < INT_LIMIT:
            raise ConfigError(f"{path}: {key or '(top)'}: an integer of {value.bit_length()} bits is out of range")
        if isinstance(value, dict | list):
            if id(value) in parents:
                raise ConfigError(f"{path}: {key or '(top)'}: an alias refers to itself")
            inner = (*parents, id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                stack.append((v, f"{key}.{k}" if key else str(k), depth + 1, inner))


def read_yaml(path: str | Path, what: str, max_bytes: int = MAX_CONFIG_BYTES) -> Any:
    """A YAML file's data, read, parsed and checked as above (any top-level type)."""
    text = read_config_text(path, what, max_bytes)
    data = parse_yaml(text, path)
    check_values(data, path, MAX_CONFIG_NODES + len(text))  # no bigger than its text, beyond a margin
    return data


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """The checked top-level mapping of a YAML config file; an empty one is an error."""
    data = read_yaml(path, what)
    if data is None or data == {}:
        raise ConfigError(f"{path}: the {what} is empty (no keys)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} must be a mapping of keys, got a {type(data).__name__}")
    return data


def validation_message(exc: ValidationError, *, show_input: bool = False) -> str:
    """The first problem of a pydantic error as ``key: message[, got value]`` (one line)."""
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"] if not _is_type_tag(p))
    more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
    if err["type"] == "extra_forbidden":
        return one_line(f"{key}: unknown key{more}")
    key = f"{key}: " if key else ""  # a check of the whole config has no key
    got = ""
    if show_input and "input" in err and err["type"] != "missing":
        got = f", got {one_line(repr(err['input']), 80)}"
    return one_line(f"{key}{err['msg'].removeprefix('Value error, ')}{got}{more}")


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "tuple", "none", "is-instance"}


def _is_type_tag(part: object) -> bool:
    """Whether a part of a pydantic error location names a union member, not a key."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part)


def load_yaml_model(path: str | Path, model: type[M], what: str, *, show_input: bool = False) -> M:
    """Load, check and validate a YAML config into ``model``; ``show_input`` adds the
    offending value (``, got 'many'``) to the message."""
    data = read_yaml_mapping(path, what)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {validation_message(exc, show_input=show_input)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
