"""Documents to search: ``{id, url, title, text}`` records from a user's JSONL or Parquet
file, or the builtin ``pydoc`` corpus, Python's own documentation as found offline on any
machine with Python: the language reference topics of ``pydoc_data`` and the docstrings
of a fixed list of standard library modules (the module and its public functions and
classes). Real text nobody here wrote, in a deterministic order, so that the same Python
gives the same corpus (and the same index version)::

    docs = pydoc_corpus()          # ~2,000 documents
    docs = load_corpus("docs.jsonl")
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import ConfigError

FIELDS = ("id", "url", "title", "text")
PYDOC_URL = "https://docs.python.org/3"
# Pure or long-standing modules that import without side effects; ones that fail are skipped.
STDLIB_MODULES = (
    "abc",
    "argparse",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "colorsys",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "difflib",
    "enum",
    "filecmp",
    "fnmatch",
    "fractions",
    "functools",
    "getopt",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "linecache",
    "logging",
    "math",
    "mimetypes",
    "operator",
    "os",
    "os.path",
    "pathlib",
    "pickle",
    "platform",
    "pprint",
    "queue",
    "random",
    "re",
    "secrets",
    "shlex",
    "shutil",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "timeit",
    "tokenize",
    "traceback",
    "typing",
    "unicodedata",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
    "zlib",
)


@dataclass(frozen=True)
class Doc:
    id: str
    url: str
    title: str
    text: str


def load_corpus(path: str | Path) -> list[Doc]:
    """Documents from a JSONL or Parquet file; a bad line, a missing field or a duplicate id
    is a one-line ConfigError naming the file and the line (or row) and field."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: corpus file not found")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        missing = [f for f in FIELDS if f not in table.column_names]
        if missing:
            raise ConfigError(f"{path}: missing column {missing[0]!r} (a corpus needs {', '.join(FIELDS)})")
        rows = [(f"row {i}", r) for i, r in enumerate(table.select(list(FIELDS)).to_pylist())]
    else:
        rows = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append((f"line {n}", json.loads(line)))
                except ValueError as exc:
                    raise ConfigError(f"{path}:{n}: not valid JSON ({exc})") from None
    docs, seen = [], set()
    for where, row in rows:
        if not isinstance(row, dict):
            raise ConfigError(f"{path} {where}: a document must be a JSON object, got {type(row).__name__}")
        for f in FIELDS:
            if not isinstance(row.get(f), str) or (f in ("id", "text") and not row[f].strip()):
                raise ConfigError(f"{path} {where}: field {f!r} must be a {'non-empty ' if f in ('id', 'text') else ''}string")
        if row["id"] in seen:
            raise ConfigError(f"{path} {where}: duplicate id {row['id']!r}")
        seen.add(row["id"])
        docs.append(Doc(*(row[f] for f in FIELDS)))
    if not docs:
        raise ConfigError(f"{path}: the corpus has no documents")
    return docs


def _clean(text: str) -> str:
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)  # object reprs in signatures differ from run to run


class _Elided:
    def __repr__(self) -> str:
        return "..."


def _literal(value: object) -> bool:
    if isinstance(value, tuple):
        return all(_literal(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, complex, str, bytes))


def _signature(name: str, obj: object) -> str:
    """``name(params)``; a default that is not a literal shows as ``...``: its repr is the
    process's state (``logging.shutdown``'s list of live handlers), not the library's."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    params = [
        p.replace(default=_Elided()) if p.default is not p.empty and not _literal(p.default) else p
        for p in sig.parameters.values()
    ]
    return _clean(f"{name}{sig.replace(parameters=params)}")


def _defined_in(obj: object, module: str) -> bool:
    """Defined by this module or its C accelerator (``_heapq`` for heapq, ``posix`` for os)."""
    owner = getattr(obj, "__module__", None) or ""
    return owner.lstrip("_") == module or (module == "os" and owner == "posix")


def module_docs(name: str) -> list[Doc]:
    """The module's own document (docstring and member list), then one per public function
    or class it defines, sorted by name."""
    mod = importlib.import_module(name)
    page = f"{PYDOC_URL}/library/{name}.html"
    members = []
    for attr in sorted(getattr(mod, "__all__", None) or dir(mod)):
        obj = getattr(mod, attr, None)
        if attr.startswith("_") or not (inspect.isclass(obj) or inspect.isroutine(obj)) or not _defined_in(obj, name):
            continue
        doc = inspect.getdoc(obj) or ""
        if doc.strip():
            kind = "class" if inspect.isclass(obj) else "function"
            text = f"{kind} {name}.{_signature(attr, obj)}\n\n{_clean(doc)}"
            members.append(Doc(f"{name}.{attr}", f"{page}#{name}.{attr}", f"{name}.{attr}", text))
    listing = ", ".join(d.id.rsplit(".", 1)[1] for d in members)
    head = _clean(inspect.getdoc(mod) or f"The {name} module.")
    text = f"module {name}\n\n{head}\n\nFunctions and classes: {listing or 'none'}"
    return [Doc(name, page, f"{name} module", text), *members]


def pydoc_corpus() -> list[Doc]:
    """The builtin corpus: language reference topics, then the stdlib modules in list order."""
    from pydoc_data.topics import topics

    docs = []
    for key in sorted(topics):
        text = topics[key].strip()
        title = text.splitlines()[0].strip() if text else key
        docs.append(Doc(f"topic:{key}", f"{PYDOC_URL}/reference/#{key}", title, text))
    for name in STDLIB_MODULES:
        try:
            docs += module_docs(name)
        except Exception:  # a module missing from this Python build (or failing to import) is skipped
            continue
    return docs
