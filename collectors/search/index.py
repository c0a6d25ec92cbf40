"""The on-disk search index: tantivy, BM25 ranking, snippets with the query terms in <b>.

An index lives in one directory: tantivy's files under ``tantivy/`` and a ``meta.json``: the index
``version`` (a content hash of the corpus and the builder settings, so the same corpus
and settings always give the same version), the document count, build time and the
ranking parameters. Building writes into a temporary sibling and renames it into place,
so a reader never sees half an index and two workers building the same version at once
both end up with one whole index::

    index = SearchIndex.ensure(docs, cache / "pydoc")   # build when missing or stale, else open
    hits = index.search("heappushpop", top_k=5)         # [Hit(rank=1, id='heapq.heappushpop', ...)]
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.search.corpus import Doc
from schemas.errors import ConfigError, require

INDEX_FORMAT = 1
# tantivy's BM25 constants (fixed in the engine, recorded so a result says how it was ranked)
BM25 = {"model": "bm25", "k1": 1.2, "b": 0.75}


@dataclass(frozen=True)
class IndexSettings:
    """What the builder does with a corpus; part of the index version."""

    tokenizer: str = "en_stem"  # lower case, English stemming ("sorted" finds "sort")
    title_boost: float = 2.0


@dataclass(frozen=True)
class Hit:
    rank: int
    id: str
    url: str
    title: str
    score: float
    snippet: str


def corpus_version(docs: list[Doc], settings: IndexSettings) -> str:
    """A content hash of the documents (in order) and the builder settings."""
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps({"format": INDEX_FORMAT, **asdict(settings)}, sort_keys=True).encode())
    for d in docs:
        h.update(json.dumps([d.id, d.url, d.title, d.text], ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _schema(tantivy: Any, settings: IndexSettings) -> Any:
    b = tantivy.SchemaBuilder()
    b.add_text_field("id", stored=True, tokenizer_name="raw")
    b.add_text_field("url", stored=True, tokenizer_name="raw")
    b.add_text_field("title", stored=True, tokenizer_name=settings.tokenizer)
    b.add_text_field("text", stored=True, tokenizer_name=settings.tokenizer)
    return b.build()


class SearchIndex:
    """An opened index; ``meta`` is its meta.json."""

    def __init__(self, path: str | Path) -> None:
        self.tantivy = require("tantivy", "search")
        self.path = Path(path)
        try:
            self.meta = json.loads((self.path / "meta.json").read_text())
        except (OSError, ValueError):
            raise ConfigError(f"{self.path}: not a search index (no readable meta.json); build it with build-index") from None
        self.settings = IndexSettings(**self.meta["settings"])
        self.schema = _schema(self.tantivy, self.settings)
        self.index = self.tantivy.Index(self.schema, path=str(self.path / "tantivy"), reuse=True)
        self.searcher = self.index.searcher()

    @property
    def version(self) -> str:
        return self.meta["version"]

    @classmethod
    def build(cls, docs: list[Doc], path: str | Path, settings: IndexSettings | None = None, source: str = "") -> SearchIndex:
        """Index ``docs`` into ``path`` (replacing what is there) and open it."""
        tantivy = require("tantivy", "search")
        settings = settings or IndexSettings()
        path, t0 = Path(path), time.perf_counter()
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "tantivy").mkdir(parents=True)
        index = tantivy.Index(_schema(tantivy, settings), path=str(tmp / "tantivy"), reuse=False)
        writer = index.writer(heap_size=64_000_000, num_threads=1)  # one segment in corpus order: stable doc addresses
        for d in docs:
            writer.add_document(tantivy.Document(id=d.id, url=d.url, title=d.title, text=d.text))
        writer.commit()
        writer.wait_merging_threads()
        meta = {
            "format": INDEX_FORMAT,
            "version": corpus_version(docs, settings),
            "documents": len(docs),
            "source": source,
            "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "build_seconds": round(time.perf_counter() - t0, 3),
            "ranking": {**BM25, "title_boost": settings.title_boost},
            "settings": asdict(settings),
            "engine": getattr(tantivy, "__version__", "tantivy"),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if _version_at(path) == meta["version"]:  # another worker put the same index in place meanwhile: keep it
            shutil.rmtree(tmp, ignore_errors=True)
            return cls(path)
        shutil.rmtree(path, ignore_errors=True)
        try:
            tmp.rename(path)
        except OSError:  # another process put an index in place first
            shutil.rmtree(tmp, ignore_errors=True)
        return cls(path)

    @classmethod
    def ensure(cls, docs: list[Doc], path: str | Path, settings: IndexSettings | None = None, source: str = "") -> SearchIndex:
        """Open the index at ``path`` when it holds this corpus's version, else (re)build it."""
        settings = settings or IndexSettings()
        if _version_at(path) == corpus_version(docs, settings):
            return cls(path)
        return cls.build(docs, path, settings, source)

    # -- queries ---------------------------------------------------------------------------------
    def _doc(self, address: Any) -> Doc:
        d = self.searcher.doc(address)
        return Doc(*(d.get_first(f) or "" for f in ("id", "url", "title", "text")))

    def search(self, query: str, top_k: int = 5, snippet_chars: int = 200) -> tuple[list[Hit], int]:
        """The top_k hits by BM25 (ties by id) and the number of matching documents."""
        boosts = {"title": self.settings.title_boost}
        q, errors = self.index.parse_query_lenient(query, ["title", "text"], field_boosts=boosts)
        if errors:  # query syntax the agent did not mean (a stray colon or quote): search the words instead
            q, _ = self.index.parse_query_lenient(re.sub(r"[^\w\s]", " ", query), ["title", "text"], field_boosts=boosts)
        result = self.searcher.search(q, top_k + 10, count=True)
        gen = self.tantivy.SnippetGenerator.create(self.searcher, q, self.schema, "text")
        gen.set_max_num_chars(snippet_chars)
        found = sorted(((round(score, 4), self._doc(addr), addr) for score, addr in result.hits), key=lambda x: (-x[0], x[1].id))
        hits = []
        for rank, (score, doc, addr) in enumerate(found[:top_k], 1):
            snippet = _marked(gen.snippet_from_doc(self.searcher.doc(addr))) or doc.text[:snippet_chars]
            hits.append(Hit(rank, doc.id, doc.url, doc.title, score, " ".join(snippet.split())))
        return hits, result.count

    def get(self, doc: str) -> Doc | None:
        """The document with this id or url."""
        for field in ("id", "url"):
            found = self.searcher.search(self.tantivy.Query.term_query(self.schema, field, doc), 1).hits
            if found:
                return self._doc(found[0][1])
        return None


def _version_at(path: str | Path) -> str | None:
    """The version of the index at ``path``, None when there is none."""
    try:
        return json.loads((Path(path) / "meta.json").read_text()).get("version")
    except (OSError, ValueError, AttributeError):
        return None


def _marked(snippet: Any) -> str:
    """The snippet's fragment with each highlighted query term in <b>, as web search APIs mark them."""
    text, out, pos = snippet.fragment(), [], 0
    for r in sorted(snippet.highlighted(), key=lambda r: r.start):
        out += [text[pos : r.start], "<b>", text[r.start : r.end], "</b>"]
        pos = r.end
    return "".join(out) + text[pos:]
