"""The search environment: a search agent's tools over a local index (tantivy, BM25).

The agent searches (a result list as a web search API returns it: rank, title, url, id
and a snippet with the query terms in <b>), opens a result (the page as a reader shows
it, the first ``page_chars`` characters, flagged ``truncated`` when there is more), finds
text in the opened page (each match in its context) and answers, which ends the episode
with reward 1.0 or 0.0 from the task's answer check (``collectors.search.tasks``). Every
observation's ``extra`` records the index version and ranking parameters, and result
lists their ids and scores, so a transition says exactly which index produced it.

``env_id: pydoc`` searches the builtin corpus (Python's own documentation), indexed once
per corpus version under the cache (``$TRAJFORGE_CACHE/search``). Any other ``env_id``
searches the user's corpus: ``options={"corpus": "docs.jsonl"}`` (JSONL or Parquet of
``{id, url, title, text}``), indexed under ``index_dir`` or the cache.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from collectors.actions import ActionError, ActionSpec
from collectors.env import Environment, EnvOptions, Task
from collectors.search import actions as A
from collectors.search.corpus import Doc, load_corpus, pydoc_corpus
from collectors.search.index import SearchIndex
from collectors.search.tasks import score_answer
from schemas.errors import ConfigError
from schemas.transition import Observation

HINT = "Actions: search(query, top_k), open(doc), find(text), answer(text). Open a result by its id or url."


class SearchOptions(EnvOptions):
    """Settings of search episodes (the job's ``search`` section; its paths are relative to the job file)."""

    paths: ClassVar[tuple[str, ...]] = ("corpus", "index_dir")
    corpus: str | None = None  # JSONL or Parquet of {id, url, title, text}; None with env_id pydoc
    index_dir: str | None = None  # default: <cache>/search/<env_id>
    page_chars: int = Field(4000, ge=200)
    snippet_chars: int = Field(200, ge=50)
    find_context: int = Field(80, ge=0)
    max_find: int = Field(10, ge=1)


def default_index_dir(env_id: str) -> Path:
    from sandboxes.paths import cache_dir

    return cache_dir() / "search" / env_id


def open_index(env_id: str, options: SearchOptions) -> SearchIndex:
    """The index of this env_id's corpus, built when missing or stale."""
    if options.corpus:
        docs, source = load_corpus(options.corpus), str(options.corpus)
    elif env_id == "pydoc":
        docs, source = pydoc_corpus(), "pydoc"
    else:
        raise ConfigError(f"search env_id {env_id!r}: needs options.corpus (a JSONL or Parquet file); only 'pydoc' is builtin")
    return SearchIndex.ensure(docs, options.index_dir or default_index_dir(env_id), source=source)


class SearchEnv(Environment):
    domain = "search"
    sandbox_backend = "tantivy"

    def __init__(self, sandbox: Any = None, env_id: str = "pydoc", options: SearchOptions | dict | None = None) -> None:
        super().__init__(env_id, options)
        self.index = open_index(env_id, self.options)
        self.image_digest = f"search-index {self.index.version}"
        self.doc: Doc | None = None
        self.reward: float | None = None

    def _extra(self, **fields: Any) -> dict[str, Any]:
        return {"index_version": self.index.version, "ranking": self.index.meta["ranking"], **fields}

    def _reset(self, seed: int | None, task: Task | None) -> tuple[Observation, dict[str, Any]]:
        t0 = time.perf_counter()
        self.doc, self.reward = None, None
        question = task.instruction if task else "Search the corpus."
        obs = Observation.make(f"Question: {question}\n\n{HINT}", "text", extra=self._extra())
        return obs, {"instruction": question, "reset_ms": (time.perf_counter() - t0) * 1000}

    # -- the actions -----------------------------------------------------------------------------
    def _search(self, a: A.Search) -> Observation:
        hits, total = self.index.search(a.query, a.top_k, self.options.snippet_chars)
        lines = [f'Search results for "{a.query}" ({len(hits)} of {total}):', ""]
        for h in hits:
            lines += [f"{h.rank}. {h.title}", f"   {h.url}  [id: {h.id}]", f"   {h.snippet}", ""]
        if not hits:
            lines.append("No results.")
        results = [{"id": h.id, "score": h.score} for h in hits]
        return Observation.make(
            "\n".join(lines).rstrip(), "search_results", extra=self._extra(query=a.query, total=total, results=results)
        )

    def _page(self, doc: Doc) -> Observation:
        cap = self.options.page_chars
        body = doc.text[:cap]
        more = len(doc.text) - len(body)
        text = f"Title: {doc.title}\nURL: {doc.url}\nId: {doc.id}\n\n{body}"
        if more:
            text += f"\n[... {more} more characters; use find(text) to look further ...]"
        return Observation.make(
            text, "text", extra=self._extra(doc=doc.id, url=doc.url, chars=len(doc.text)), truncated=bool(more)
        )

    def _find(self, a: A.Find) -> Observation:
        if self.doc is None:
            raise ActionError("find: no document is open (open a search result first)")
        doc, ctx = self.doc, self.options.find_context
        starts = [m.start() for m in re.finditer(re.escape(a.text), doc.text, re.IGNORECASE)]
        lines = [f'Find "{a.text}" in {doc.id}: {len(starts)} match{"es" if len(starts) != 1 else ""}']
        for i, s in enumerate(starts[: self.options.max_find], 1):
            lo, hi = max(0, s - ctx), min(len(doc.text), s + len(a.text) + ctx)
            snippet = " ".join(doc.text[lo:hi].split())
            lines.append(f"[{i}] at {s}: {'...' if lo else ''}{snippet}{'...' if hi < len(doc.text) else ''}")
        extra = self._extra(doc=doc.id, find=a.text, matches=starts[: self.options.max_find], total=len(starts))
        return Observation.make("\n".join(lines), "text", extra=extra, truncated=len(starts) > self.options.max_find)

    def _answer(self, a: A.Answer) -> tuple[Observation, float | None, dict[str, Any]]:
        expected = (self.task.extra if self.task else {}).get("answer")
        if expected is None:
            return Observation.make(f"Answer recorded: {a.text}", "text", extra=self._extra(answer=a.text)), None, {}
        reward, f1 = score_answer(a.text, str(expected), [str(x) for x in self.task.extra.get("aliases") or ()])
        self.reward = reward
        obs = Observation.make(f"Answer recorded: {a.text}", "text", extra=self._extra(answer=a.text, match=reward == 1.0, f1=f1))
        return obs, reward, {"answer_f1": f1, "answer_match": reward == 1.0}

    def _step(self, action: ActionSpec) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        if isinstance(action, A.Search):
            return self._search(action), None, False, {}
        if isinstance(action, A.Open):
            doc = self.index.get(action.doc.strip())
            if doc is None:
                raise ActionError(f"open: no document with id or url {action.doc!r} (open one a search result shows)")
            self.doc = doc
            return self._page(doc), None, False, {}
        if isinstance(action, A.Find):
            return self._find(action), None, False, {}
        obs, reward, info = self._answer(action)
        return obs, reward, True, info

    def check_task(self, task: Task) -> tuple[float | None, str]:
        """The runner's end-of-episode check (a task with ``check: answer``): an episode that
        ended without an answer scores 0.0."""
        if self.reward is None:
            return 0.0, "no answer given"
        return self.reward, "answer checked"

    def _close(self) -> None:
        self.doc = None
