"""Search actions, as a search agent calls them: query the index, open a result, find text
in the opened document, answer (which ends the episode)."""

from __future__ import annotations

from dataclasses import dataclass

from collectors.actions import ActionError, ActionSpace, ActionSpec

MAX_TOP_K = 50


def _not_empty(action: ActionSpec, field: str) -> None:
    if not getattr(action, field).strip():
        raise ActionError(f"{action.kind}.{field}: must not be empty")


@dataclass(frozen=True)
class Search(ActionSpec):
    """Search the corpus; returns the top_k results (rank, title, url, id, snippet) by BM25."""

    kind = "search"
    query: str
    top_k: int = 5

    def check(self) -> None:
        _not_empty(self, "query")
        if not 1 <= self.top_k <= MAX_TOP_K:
            raise ActionError(f"search.top_k: must be between 1 and {MAX_TOP_K}, got {self.top_k}")


@dataclass(frozen=True)
class Open(ActionSpec):
    """Open a document by its id or url (as a result list shows them) and read its first page."""

    kind = "open"
    doc: str

    def check(self) -> None:
        _not_empty(self, "doc")


@dataclass(frozen=True)
class Find(ActionSpec):
    """Find text (case-insensitive) in the opened document; shows each match in its context."""

    kind = "find"
    text: str

    def check(self) -> None:
        _not_empty(self, "text")


@dataclass(frozen=True)
class Answer(ActionSpec):
    """Give the final answer to the task's question; ends the episode."""

    kind = "answer"
    text: str

    def check(self) -> None:
        _not_empty(self, "text")


SEARCH_ACTIONS = ActionSpace("search", [Search, Open, Find, Answer])
