"""The field's agent-trajectory formats, in and out.

One module per format (``atif``, ...), each a small converter: ``episodes(record, where)``
turns one source record (a parsed JSON value) into ``formats.episode.Episode`` values (what
the source says, and ``unknown`` for what it cannot tell), and, where the format can hold
ours, ``export(trajectory)`` writes one of our trajectories in it. ``formats.importer``
streams files into a store (stable ids, resumable, malformed records skipped and counted);
``formats.exporter`` writes a selection of a store out.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from schemas.errors import ConfigError

#: format name -> module; a module has ``NAME``, ``episodes`` and, if exportable, ``export``.
IMPORTERS = {
    "atif": "formats.atif",
    "adp": "formats.adp",
    "swe-agent": "formats.swe_agent",
    "openhands": "formats.openhands",
    "openai-messages": "formats.openai_messages",
}
EXPORTERS = {"atif": "formats.atif", "adp": "formats.adp", "openai-messages": "formats.openai_messages"}


def format_module(name: str, *, export: bool = False) -> ModuleType:
    table = EXPORTERS if export else IMPORTERS
    if name not in table:
        raise ConfigError(f"unknown format {name!r} (known: {', '.join(sorted(table))})")
    return importlib.import_module(table[name])
