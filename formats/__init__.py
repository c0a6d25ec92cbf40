"""The field's agent-trajectory formats, in and out.

One module per format (``atif``, ...), each a small converter: ``episodes(record, where)``
turns one source record (a parsed JSON value) into ``formats.episode.Episode`` values (what
the source says, and ``unknown`` for what it cannot tell), and, where the format can hold
ours, ``export(trajectory)`` writes one of our trajectories in it. ``formats.importer``
streams files into a store (stable ids, resumable, malformed records skipped and counted);
``formats.exporter`` writes a selection of a store out.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
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
#: New containers between two collections of the youngest generation in ``fewer_collections``.
GC_THRESHOLD = 50_000


def format_module(name: str, *, export: bool = False) -> ModuleType:
    table = EXPORTERS if export else IMPORTERS
    if name not in table:
        raise ConfigError(f"unknown format {name!r} (known: {', '.join(sorted(table))})")
    return importlib.import_module(table[name])


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Python's cycle collector tuned for a bulk import or export: what is alive when it
    starts (the modules, the ids already imported) is frozen out of its scans, and a
    collection runs every ``GC_THRESHOLD`` new containers instead of every 700. Each parsed
    record (or row read back) is hundreds of dicts and lists that die with it (reference
    counting frees them: records and transitions hold no cycles), and the default scanned
    them, and everything older, again and again: a tenth of an import's time, 5% of an
    export's. Cycles (a failed record's traceback) are still collected, just less often.
    A process that froze objects of its own keeps them as they are (nothing is frozen or
    unfrozen then)."""
    old, freeze = gc.get_threshold(), gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if freeze:
            gc.unfreeze()
