"""Exploration on an Android device without a model: seeded random but plausible
JSONActions on what the UI tree shows. Mostly taps on clickable nodes and text into edit
fields (by node index, so they land on real elements); now and then a scroll of a
scrollable list, Back, Home, or opening one of the device's apps."""

from __future__ import annotations

import random
import re
from typing import Any

from collectors.explore import Explorer
from schemas.transition import Observation

APPS = ["Settings", "Contacts", "Notes"]
WORDS = ["hello", "groceries", "meeting", "Grace", "555-0142", "todo", "alpha", "draft", "review", "Lin"]
_NODE = re.compile(r"^\s*\[(\d+)\] (\S+)(.*) @\[", re.M)


def nodes(text: str) -> list[dict[str, Any]]:
    """The tree text's nodes: index, class and the rest of the line (text, states)."""
    return [{"index": int(i), "class": cls, "rest": rest} for i, cls, rest in _NODE.findall(text)]


def explore_action(rng: random.Random, observation: Observation, apps: list[str] | None = None) -> dict[str, Any]:
    """One action for the current screen."""
    found = [n for n in nodes(observation.text) if " disabled" not in n["rest"]]
    fields = [n for n in found if n["class"] == "EditText"]
    clickable = [n for n in found if " clickable" in n["rest"] and n["class"] != "EditText"]
    scrollable = [n for n in found if " scrollable" in n["rest"]]
    roll = rng.random()
    if fields and roll < 0.35:
        return {"action": "input_text", "index": rng.choice(fields)["index"], "text": rng.choice(WORDS)}
    if clickable and roll < 0.8:
        return {"action": "click", "index": rng.choice(clickable)["index"]}
    if scrollable and roll < 0.85:
        return {"action": "scroll", "index": rng.choice(scrollable)["index"], "direction": rng.choice(["up", "down"])}
    if roll < 0.92:
        return {"action": "open_app", "app_name": rng.choice(apps or APPS)}
    return {"action": rng.choice(["navigate_back", "navigate_home"])}


class AndroidExplorer(Explorer):
    """The device's explorer for ``ExplorationPolicy`` (``schemas.domains``)."""

    def explore(self, observation: Observation) -> dict[str, Any]:
        return explore_action(self.rng, observation)
