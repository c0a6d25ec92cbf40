"""Search actions, as a search agent calls them: query the index, open a result, find text
in the opened document, answer (which ends the episode)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from collectors.actions import ActionError, ActionSpace, ActionSpec, NonEmpty

MAX_TOP_K = 50


@dataclass(frozen=True)
class Search(ActionSpec):
    """Search the corpus; returns the top_k results (rank, title, url, id, snippet) by BM25."""

    kind = "search"
    query: Annotated[str, NonEmpty()]
    top_k: int = 5

    def check(self) -> None:
        if not 1 <= self.top_k <= MAX_TOP_K:
            raise ActionError(f"search.top_k: must be between 1 and {MAX_TOP_K}, got {self.top_k}")


@dataclass(frozen=True)
class Open(ActionSpec):
    """Open a document by its id or url (as a result list shows them) and read its first page."""

    kind = "open"
    doc: Annotated[str, NonEmpty()]


@dataclass(frozen=True)
class Find(ActionSpec):
    """Find text (case-insensitive) in the opened document; shows each match in its context."""

    kind = "find"
    text: Annotated[str, NonEmpty()]


@dataclass(frozen=True)
class Answer(ActionSpec):
    """Give the final answer to the task's question; ends the episode."""

    kind = "answer"
    text: Annotated[str, NonEmpty()]


SEARCH_ACTIONS = ActionSpace("search", [Search, Open, Find, Answer])
