"""Exploration on a desktop without a model: seeded random but plausible actions on what
the accessibility tree shows. Mostly clicks on visible, enabled interactive nodes and
typing into text fields (by node id, so they resolve to real elements); now and then a
key (Tab, Escape, Enter, arrows), a scroll or a click at a point inside the active window.
"""

from __future__ import annotations

import random
import re
from typing import Any

from collectors.explore import Explorer
from collectors.os.tree import INTERACTIVE
from schemas.transition import Observation

# what a click does something to: the interactive roles less those that take typing or only show
CLICKABLE = INTERACTIVE - {"text", "entry", "password text", "spin button", "icon"}
FIELDS = {"text", "entry", "password text", "spin button"}
WORDS = ["hello", "notes", "draft", "report", "budget", "todo", "meeting", "alpha", "kettle", "review"]
KEYS = ["tab", "escape", "enter", "down", "up", "ctrl+a", "backspace"]
_NODE = re.compile(
    r"^\s*\[([^\]]+)\] ([a-z ]+?)(?: \"[^\"]*\")?((?: [a-z]+)*)(?: value=.*?)? @\((-?\d+),(-?\d+) (\d+)x(\d+)\)$", re.M
)
_ACTIVE = re.compile(r"^Active window: \[([^\]]+)\]", re.M)


def nodes(text: str) -> list[dict[str, Any]]:
    """The nodes of an observation's tree text that have a box: id, role, states, box."""
    out = []
    for m in _NODE.finditer(text):
        node_id, role, states, x, y, w, h = m.groups()
        out.append({"id": node_id, "role": role, "states": states.split(), "box": (int(x), int(y), int(w), int(h))})
    return out


def explore_action(rng: random.Random, observation: Observation) -> dict[str, Any]:
    """One action for the current desktop."""
    screen = observation.extra_dict.get("screen") or (1280, 800)
    found = [n for n in nodes(observation.text) if "disabled" not in n["states"]]
    fields = [n for n in found if n["role"] in FIELDS and "editable" in n["states"]]
    clickable = [n for n in found if n["role"] in CLICKABLE]
    roll = rng.random()
    if fields and roll < 0.3:
        node = rng.choice(fields)
        text = f"{rng.choice(WORDS)} {rng.randint(1, 99)}"
        if rng.random() < 0.5:
            return {"action": "set_text", "id": node["id"], "text": text}
        return {"action": "type_text", "text": text}
    if clickable and roll < 0.8:
        return {"action": "click_node", "id": rng.choice(clickable)["id"]}
    if roll < 0.9:
        return {"action": "press", "key": rng.choice(KEYS)}
    active = _ACTIVE.search(observation.text)
    window = next((n for n in found if active and n["id"] == active.group(1)), None)
    x, y, w, h = window["box"] if window else (0, 0, *screen)
    x, y = max(x, 0), max(y, 0)
    w, h = min(w, screen[0] - x), min(h, screen[1] - y)
    px, py = x + rng.randrange(max(w, 1)), y + rng.randrange(max(h, 1))
    if rng.random() < 0.5:
        return {"action": "scroll", "clicks": rng.choice([-3, 3]), "x": px, "y": py}
    return {"action": "click", "x": px, "y": py}


class OSExplorer(Explorer):
    """The desktop's explorer for ``ExplorationPolicy`` (``schemas.domains``)."""

    def explore(self, observation: Observation) -> dict[str, Any]:
        return explore_action(self.rng, observation)
