"""Exploration of a web page without a model: click, type into and select among the page's
own elements (bids from the accessibility tree's text); now and then scroll, go back or
press a key. Links lead only where the page does."""

from __future__ import annotations

import re
from typing import Any

from collectors.explore import WORDS, Explorer
from schemas.transition import Observation


class WebExplorer(Explorer):
    def explore(self, observation: Observation) -> dict[str, Any]:
        r = self.rng
        nodes = re.findall(r"\[([\w-]+)\] (\w+)", observation.text)
        fields = [b for b, role in nodes if role in ("textbox", "searchbox")]
        clickable = [b for b, role in nodes if role in ("link", "button", "checkbox", "radio", "tab", "menuitem")]
        selects = [b for b, role in nodes if role in ("combobox", "listbox")]
        roll = r.random()
        if fields and roll < 0.3:
            return {"action": "fill", "bid": r.choice(fields), "text": f"{r.choice(WORDS)} {r.randint(1, 99)}"}
        if selects and roll < 0.4:
            options = re.findall(r'option "([^"]+)"', observation.text)
            return {"action": "select_option", "bid": r.choice(selects), "value": r.choice(options) if options else ""}
        if clickable and roll < 0.85:
            return {"action": "click", "bid": r.choice(clickable)}
        back = {"action": "go_back"}
        scroll = {"action": "scroll", "dx": 0, "dy": r.choice([300, -300])}
        return r.choice([back, scroll, {"action": "press", "key": r.choice(["Tab", "Enter", "Escape"])}])
