"""The one registry of domains: what each domain is, described in one place.

A ``DomainSpec`` holds a domain's cheap static facts (its name, the observation formats its
environment emits with the usual one first, the actions that end an episode, the sentence
that tells a world model what the environment is) and *entry points* (``"module:attr"``,
as Gymnasium's ``register(id, entry_point=...)``) for the heavy parts: the environment
class, its options model (one pydantic model: the environment's options and the job
file's section of that domain), its action space, the synthetic generator and the
exploration policy's explorer. Entry points are resolved when first asked for, so this
bottom layer never imports the collectors that implement them::

    spec = domain("web")
    spec.format                    # "a11y_tree"
    env = spec.make(env_id="sites", options={"screenshot": True})

Every other module asks the registry (``DOMAINS``, ``domain(name)``); adding a domain is
one package and one ``register`` line (docs/domains.md).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from schemas.errors import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # it names store folders and export files


def load_entry_point(ref: str) -> Any:
    """The object ``"package.module:attr"`` names (imported on first use)."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ConfigError(f"entry point {ref!r}: expected 'module:attr'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class DomainSpec:
    """One domain: static facts here, heavy parts by entry point (resolved by the methods)."""

    name: str
    description: str  # what the environment is, in the world model's system prompt (release samples)
    formats: tuple[str, ...]  # the observation formats its environment emits, the usual one first
    env: str  # the Environment class
    actions: str  # the ActionSpace
    options: str | None = None  # the pydantic options model: the environment's options, the job's `<name>:` section
    synthetic: str | None = None  # the synthetic generator (collectors.synth)
    explorer: str | None = None  # the exploration policy's explorer, called as explorer(rng)
    end_actions: frozenset[str] = frozenset()  # action kinds after which the environment ends the episode

    @property
    def format(self) -> str:
        """The usual format of the domain's step observations."""
        return self.formats[0]

    def env_class(self) -> type:
        return load_entry_point(self.env)

    def make(self, **kwargs: Any) -> Any:
        """A new environment of this domain (Gymnasium's ``make``): ``sandbox``, ``env_id``, ``options``."""
        return self.env_class()(**kwargs)

    def options_model(self) -> type | None:
        return load_entry_point(self.options) if self.options else None

    def action_space(self) -> Any:
        return load_entry_point(self.actions)

    def synthesizer(self) -> Any:
        if self.synthetic is None:
            raise ConfigError(f"domain {self.name!r} has no synthetic generator")
        return load_entry_point(self.synthetic)

    def explorer_class(self) -> Any:
        if self.explorer is None:
            raise ConfigError(f"domain {self.name!r} has no exploration policy")
        return load_entry_point(self.explorer)


_SPECS: dict[str, DomainSpec] = {}

#: name -> DomainSpec, in registration order (a read-only, live view of the registry).
DOMAINS: Mapping[str, DomainSpec] = MappingProxyType(_SPECS)


class _Names(Sequence[str]):
    """The registered domain names in order: a live, read-only sequence (``random.choice`` works)."""

    def __getitem__(self, index):  # type: ignore[override]
        return tuple(_SPECS)[index]

    def __len__(self) -> int:
        return len(_SPECS)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_SPECS))

    def __contains__(self, name: object) -> bool:
        return name in _SPECS

    def __repr__(self) -> str:
        return repr(tuple(_SPECS))


NAMES: Sequence[str] = _Names()


class _Descriptions(Mapping[str, str]):
    """name -> the sentence that tells a world model what the environment is (live)."""

    def __getitem__(self, name: str) -> str:
        return _SPECS[name].description

    def __len__(self) -> int:
        return len(_SPECS)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_SPECS))


DESCRIPTIONS: Mapping[str, str] = _Descriptions()


def domain(name: str) -> DomainSpec:
    """The spec of ``name``, or a one-line ConfigError naming the known domains."""
    try:
        return _SPECS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown domain {name!r} (expected one of {', '.join(_SPECS)})") from None


def register(name: str, **fields: Any) -> DomainSpec:
    """Add a domain (the fields of ``DomainSpec``); a name is registered once."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"domain name {name!r}: lower-case letters, digits and _ (at most 32), starting with a letter")
    if name in _SPECS:
        raise ConfigError(f"domain {name!r} is registered already")
    fields["formats"] = tuple(fields.get("formats", ()))
    fields["end_actions"] = frozenset(fields.get("end_actions", ()))
    if not fields["formats"]:
        raise ConfigError(f"domain {name!r}: needs at least one observation format")
    spec = _SPECS[name] = DomainSpec(name, **fields)
    return spec


def unregister(name: str) -> DomainSpec:
    """Remove a domain (tests and plugins that registered one for a while)."""
    return _SPECS.pop(domain(name).name)


# -- the domains (registration order is the order of DOMAINS: synthetic stores cycle through it) --
register(
    "mcp",
    description="A server of MCP tools. An observation is the JSON result of the tool call.",
    formats=("text",),
    env="collectors.mcp.env:MCPEnv",
    actions="collectors.mcp.actions:MCP_ACTIONS",
    options="collectors.mcp.env:MCPOptions",
    synthetic="collectors.synth:MCP",
    explorer="collectors.mcp.explore:MCPExplorer",
    end_actions={"finish"},
)
register(
    "search",
    description="A search engine. An observation is a page of results.",
    formats=("text", "search_results"),
    env="collectors.search.env:SearchEnv",
    actions="collectors.search.actions:SEARCH_ACTIONS",
    options="collectors.search.env:SearchOptions",
    synthetic="collectors.synth:SEARCH",
    explorer="collectors.search.explore:SearchExplorer",
    end_actions={"answer"},
)
register(
    "terminal",
    description="A Linux terminal running bash. An observation is the output of the command followed by the prompt "
    "line `[exit N] CWD$`.",
    formats=("terminal",),
    env="collectors.terminal:TerminalEnv",
    actions="collectors.terminal:TERMINAL_ACTIONS",
    synthetic="collectors.synth:TERMINAL",
    explorer="collectors.explore:TerminalExplorer",
)
register(
    "swe",
    description="A software repository with tools to view, search and edit files and to run tests. An observation is "
    "the tool's result.",
    formats=("text", "file_view"),
    env="collectors.swe:SWEEnv",
    actions="collectors.swe:SWE_ACTIONS",
    synthetic="collectors.synth:SWE",
    explorer="collectors.explore:SWEExplorer",
    end_actions={"submit"},
)
register(
    "web",
    description="A web browser. An observation is the accessibility tree of the page.",
    formats=("a11y_tree",),
    env="collectors.web.env:WebEnv",
    actions="collectors.web.actions:WEB_ACTIONS",
    options="collectors.web.env:WebOptions",
    synthetic="collectors.synth:WEB",
    explorer="collectors.web.explore:WebExplorer",
    end_actions={"send_msg_to_user"},
)
register(
    "os",
    description="A Linux desktop. An observation is the accessibility tree of the open windows.",
    formats=("a11y_tree",),
    env="collectors.os.env:OSEnv",
    actions="collectors.os.actions:OS_ACTIONS",
    options="collectors.os.env:OSOptions",
    synthetic="collectors.synth:OS",
    explorer="collectors.os.explore:OSExplorer",
    end_actions={"done", "fail"},
)
register(
    "android",
    description="An Android phone. An observation is the screen's UI hierarchy (UIAutomator XML).",
    formats=("uiautomator_xml",),
    env="collectors.android.env:AndroidEnv",
    actions="collectors.android.actions:ANDROID_ACTIONS",
    options="collectors.android.env:AndroidOptions",
    synthetic="collectors.synth:ANDROID",
    explorer="collectors.android.explore:AndroidExplorer",
    end_actions={"answer", "status"},
)
