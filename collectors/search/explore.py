"""Exploration in the search domain: varied, plausible search sessions without a model.

``explore_action(rng, observation, step)`` picks the next action from what the agent sees:
at first it searches words of the question; on a result list it mostly opens a result
(ids from the observation's ``extra``), sometimes refines the query or asks for more
results; on a page it finds a word of the page, searches words from it, or goes back to
searching; after ``answer_after`` steps (or now and then on a page) it answers with the
page's title, so episodes end, with rewards of both kinds. ``ExplorationPolicy`` calls it
for search tasks (``SearchExplorer``)::

    rng = random.Random(seed)
    action = explore_action(rng, observation, step)   # {"action": "open", "doc": "json.dumps"}
"""

from __future__ import annotations

import random
import re
from typing import Any

from collectors.explore import Explorer
from schemas.transition import Observation

STOPWORDS = {
    "the",
    "and",
    "for",
    "with",
    "which",
    "what",
    "does",
    "this",
    "that",
    "answer",
    "from",
    "module",
    "function",
    "python",
    "standard",
    "library",
    "provides",
    "name",
    "return",
    "returns",
    "open",
    "search",
    "text",
    "find",
    "actions",
    "query",
    "top_k",
    "title",
}


def _words(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}", text):
        if w.lower() not in STOPWORDS:
            seen.setdefault(w, None)
    return list(seen)


def explore_action(rng: random.Random, observation: Observation, step: int, answer_after: int = 8) -> dict[str, Any]:
    """The next exploratory action (a dict the search action space parses)."""
    extra = observation.extra_dict
    words = _words(observation.text) or ["python"]
    query = " ".join(rng.sample(words, min(len(words), rng.randint(1, 3))))
    if step >= answer_after:
        return {"action": "answer", "text": str(extra.get("doc") or rng.choice(words))}
    if observation.format == "search_results":
        ids = [r["id"] for r in extra.get("results", [])]
        roll = rng.random()
        if ids and roll < 0.7:
            return {"action": "open", "doc": rng.choice(ids[:5])}
        if roll < 0.85:
            return {"action": "search", "query": query, "top_k": rng.choice([3, 5, 10])}
        return {"action": "search", "query": str(extra.get("query") or query), "top_k": 20}
    if "doc" in extra:  # an opened page or a find result
        roll = rng.random()
        if roll < 0.45:
            return {"action": "find", "text": rng.choice(words)}
        if roll < 0.85:
            return {"action": "search", "query": query}
        return {"action": "answer", "text": extra["doc"].rsplit(".", 1)[0]}
    return {"action": "search", "query": query}


class SearchExplorer(Explorer):
    """Never cut off: it answers at the last step, so every episode ends with a reward."""

    def act(self, observation: Observation, step: int, max_steps: int) -> dict[str, Any]:
        return explore_action(self.rng, observation, step - 1, answer_after=max_steps - 1)
