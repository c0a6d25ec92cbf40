"""The real-text corpus for ``benchmarks/neardup.py``: Debian's own text, planted copies, exact truth.

Near-duplicate removal is only tested when the text is real: man pages, ``/usr/share/doc``
files and Python's standard library exist on every Debian machine, and nobody here wrote
them. Their template families (``EVP_CIPHER-*``, ``gcloud ... list``, ``runc-pause`` /
``runc-resume``, ``ctan`` / ``ctanh``) are distinct pages that look alike, which is exactly
what a near-duplicate stage must keep; they are left as they are and sampled whole.

    corpus = build_corpus(4000, seed=11)   # documents, planted copies, hard negatives
    truth = Shingles(corpus.texts)         # exact word 5-gram Jaccard, scipy.sparse

Documents are chunks of about 150-800 words cut at paragraph boundaries. About 10% of the
documents are planted copies of distinct source documents (nine edit kinds, equally many
of each), about 4% are hard negatives (a page whose middle 20-50% of lines come from
another page); each is placed after its source, so the earlier document is the one to keep.
"""

from __future__ import annotations

import gzip
import hashlib
import random
import re
import string
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

MAN = Path("/usr/share/man")
DOC = Path("/usr/share/doc")
PYLIB = Path("/usr/lib/python3.11")
MIN_WORDS, SOFT_WORDS, MAX_WORDS = 150, 300, 800  # a chunk closes past SOFT_WORDS; no paragraph is cut below MAX_WORDS
MIN_PAGE_WORDS = 80  # a whole short page (true, false) is kept as one document
MAX_FAMILY = 12  # pages taken together from one family; larger families give a window of siblings
KINDS = (
    "exact",
    "rewrap",
    "dropped_lines",
    "swapped_words",
    "changed_numbers",
    "volatile_lines",
    "scattered_edits",
    "block_edit",
    "mix",
)
# Pairs the issue names that share no prefix; everything else is grouped by name prefix.
NAMED_FAMILIES = {("man1", "true"): "man1:true|false", ("man1", "false"): "man1:true|false"}

# --- roff to text -------------------------------------------------------------------------

_ESCAPES = [
    (re.compile(r"\\f(\[[^]]*\]|\(..|.)"), ""),  # font changes
    (re.compile(r"\\s[-+]?\d+|\\s\[[^]]*\]|\\s\(..|\\s'[^']*'"), ""),  # size changes
    (re.compile(r"\\\*(\[[^]]*\]|\(..|.)"), ""),  # string registers
    (re.compile(r"\\[nkg](\[[^]]*\]|\(..|.)"), ""),  # number registers
    (re.compile(r"\\\((em|en|hy|mi)"), "-"),
    (re.compile(r"\\\((lq|rq|dq|Lq|Rq)"), '"'),
    (re.compile(r"\\\((oq|cq|aq)"), "'"),
    (re.compile(r"\\\(bu"), "*"),
    (re.compile(r"\\\(co"), "(c)"),
    (re.compile(r"\\\(..|\\\[[^]]*\]"), ""),  # other special characters
    (re.compile(r"\\[hvwlLoDbxXZR]'[^']*'"), ""),  # motions and drawing
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\[&|^%c:/,)dupraztj{}]"), ""),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\(.)"), r"\1"),
]
_TEXT_MACROS = {"SH", "SS", "B", "I", "SM", "SB", "BR", "BI", "IB", "IR", "RB", "RI", "Nm", "Nd", "Dt", "Sh", "Ss"}
_BREAK_MACROS = {"PP", "LP", "P", "SH", "SS", "TP", "IP", "HP", "sp", "Sh", "Ss", "Pp", "TQ", "RS", "RE", "EX"}
_ARG = re.compile(r'"([^"]*)"|(\S+)')


def roff_text(src: str) -> str | None:
    """Man page source to plain text, one source line per line, blank lines at paragraphs.

    Regexes only (groff per page would take minutes for 20,000 pages). None for a ``.so``
    redirect page."""
    out: list[str] = []
    skip_until_dots = False
    in_table_format = False
    for raw in src.splitlines():
        line = raw.rstrip()
        if skip_until_dots:
            skip_until_dots = line.strip() != ".."
            continue
        if in_table_format:
            in_table_format = not line.endswith(".")
            continue
        if line.startswith(('.\\"', "'\\\"", '.\\"', '\\"')) or line in (".", "'"):
            continue
        if line.startswith((".", "'")) and len(line) > 1:
            name, _, rest = line[1:].strip().partition(" ")
            if name == "so" and not [x for x in out if x.strip()]:
                return None
            if name in ("de", "de1", "ig", "am"):
                skip_until_dots = True
                continue
            if name == "TS":
                in_table_format = True
                continue
            if name in _BREAK_MACROS:
                out.append("")
            if name in _TEXT_MACROS and rest:
                args = [a or b for a, b in _ARG.findall(rest)]
                joined = " ".join(args) if name in ("SH", "SS", "B", "I", "SM", "SB", "Sh", "Ss") else "".join(args)
                out.append(_unescape(joined))
            continue
        out.append(_unescape(line.replace("\t", " ")))
    return "\n".join(out)


def _unescape(s: str) -> str:
    for rx, rep in _ESCAPES:
        s = rx.sub(rep, s)
    return s


# --- sources --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One file of text: where it came from, the family it is sampled with, and its reader."""

    id: str
    family: str
    path: Path
    read: Callable[[Path], str | None]


def _read_man(path: Path) -> str | None:
    try:
        raw = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
    except (OSError, EOFError):
        return None
    return roff_text(raw)


def _read_plain(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
    except (OSError, EOFError):
        return None
    if b"\0" in data[:4096]:
        return None
    text = data.decode("utf-8", "replace")
    head = text[:4096]
    printable = sum(c in string.printable or c.isalpha() for c in head)
    if not head or printable < 0.95 * len(head) or "<html" in head.lower() or head.lstrip().startswith("<?xml"):
        return None
    return text


def _read_python(path: Path) -> str | None:
    """A module's source as it is: docstrings, comments and code."""
    try:
        return path.read_text("utf-8", "replace")
    except OSError:
        return None


def _family_key(section: str, name: str) -> str:
    named = NAMED_FAMILIES.get((section, name))
    if named:
        return named
    cut = max(name.rfind("-"), name.rfind("_"))
    if cut > 0:
        return f"{section}:{name[:cut]}"
    # ctan / ctanh / ctanf: a name and the same name with a short suffix are one family
    return f"{section}:{name}"


def list_pages() -> list[Page]:
    """Every candidate file, sorted, with its family. Cheap: nothing is read yet."""
    pages: list[Page] = []
    for sec_dir in sorted(MAN.glob("man[0-9]*")):
        names = sorted(p.name[: -len(".gz")] for p in sec_dir.glob("*.gz"))
        stems = {n.rsplit(".", 1)[0] for n in names}
        for n in names:
            stem = n.rsplit(".", 1)[0]
            base = next((stem[:k] for k in (len(stem) - 1, len(stem) - 2) if k >= 3 and stem[:k] in stems), stem)
            fam = _family_key(sec_dir.name, stem if base == stem else base)
            path = sec_dir / f"{n}.gz"
            if path.is_symlink():  # another name for a page listed under its own name
                continue
            pages.append(Page(f"man/{sec_dir.name}/{stem}", fam, path, _read_man))
    seen: set[Path] = set()
    skip = (".html", ".htm", ".pdf", ".png", ".jpg", ".svg", ".gif", ".js", ".css", ".json", ".xml", ".py", ".pl", ".sh")
    for path in sorted(DOC.rglob("*")):
        real = path.resolve()
        if real in seen or not path.is_file() or path.name.lower().endswith(skip) or ".gz." in path.name:
            continue
        seen.add(real)
        rel = path.relative_to(DOC)
        pages.append(Page(f"doc/{rel}", f"doc:{rel}", path, _read_plain))
    for path in sorted(PYLIB.rglob("*.py")):
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        rel = path.relative_to(PYLIB)
        pages.append(Page(f"py/{rel}", f"py:{rel}", path, _read_python))
    return pages


def chunks(text: str, limit: int = 10**9) -> list[str]:
    """A page's text in chunks of MIN_WORDS-MAX_WORDS words, cut at paragraph boundaries; the first ``limit``."""
    paragraphs = [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]
    pieces: list[tuple[str, int]] = []
    for p in paragraphs:
        n = len(p.split())
        if n <= MAX_WORDS:
            pieces.append((p, n))
            continue
        lines, count = [], 0  # an over-long paragraph is cut at line boundaries
        for ln in p.splitlines():
            lines.append(ln)
            count += len(ln.split())
            if count >= SOFT_WORDS:
                pieces.append(("\n".join(lines), count))
                lines, count = [], 0
        if lines:
            pieces.append(("\n".join(lines), count))
    total = sum(n for _, n in pieces)
    if total < MIN_WORDS:
        return ["\n\n".join(p for p, _ in pieces)] if total >= MIN_PAGE_WORDS else []
    out: list[tuple[list[str], int]] = []
    cur: list[str] = []
    words = 0
    for p, n in pieces:
        if cur and words + n > SOFT_WORDS and words >= MIN_WORDS:
            out.append((cur, words))
            cur, words = [], 0
        cur.append(p)
        words += n
    if cur:
        if out and words < MIN_WORDS:
            out[-1] = (out[-1][0] + cur, out[-1][1] + words)
        else:
            out.append((cur, words))
    return ["\n\n".join(c) for c, _ in out[:limit]]


# --- planted copies ---------------------------------------------------------------------


_WS = re.compile(r"(\s+)")
_NUM = re.compile(r"\d+")


def _tokens(text: str) -> list[str]:
    """Words at even positions, the whitespace between them at odd ones."""
    toks = _WS.split(text)
    return toks if toks and toks[0] else toks[1:] if len(toks) > 1 else [text]


def _word_positions(toks: list[str]) -> list[int]:
    return [i for i, t in enumerate(toks) if t and not t.isspace()]


def rewrap(text: str, rng: random.Random) -> str:
    """The same words with new line breaks, indentation and runs of blank lines."""
    words = text.split()
    lines: list[str] = []
    i = 0
    indent = " " * rng.choice((0, 0, 2, 4, 8))
    while i < len(words):
        width = rng.randint(40, 100)
        line, i0 = [], i
        while i < len(words) and (not line or len(" ".join(line)) + len(words[i]) < width):
            line.append(words[i])
            i += 1
        lines.append(indent + " ".join(line) + " " * rng.choice((0, 0, 1, 3)))
        if rng.random() < 0.12 and i > i0:
            lines.extend([""] * rng.randint(1, 3))
            indent = " " * rng.choice((0, 0, 2, 4, 8)) if rng.random() < 0.5 else "\t"
    return "\n".join(lines)


def dropped_lines(text: str, rng: random.Random, rate: tuple[float, float] = (0.02, 0.05)) -> str:
    lines = text.split("\n")
    full = [i for i, ln in enumerate(lines) if ln.strip()]
    k = max(1, round(rng.uniform(*rate) * len(full)))
    gone = set(rng.sample(full, min(k, len(full) - 1)))
    return "\n".join(ln for i, ln in enumerate(lines) if i not in gone)


def swapped_words(text: str, rng: random.Random, rate: tuple[float, float] = (0.01, 0.03)) -> str:
    toks = _tokens(text)
    pos = _word_positions(toks)
    k = max(1, round(rng.uniform(*rate) * (len(pos) - 1)))
    starts = rng.sample(range(0, len(pos) - 1, 2), min(k, len(pos) // 2))  # even starts: pairs never overlap
    for s in starts:
        a, b = pos[s], pos[s + 1]
        toks[a], toks[b] = toks[b], toks[a]
    return "".join(toks)


def changed_numbers(text: str, rng: random.Random) -> str:
    def other(m: re.Match[str]) -> str:
        digits = len(m.group())
        while True:
            new = str(rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits))
            if new != m.group():
                return new

    return _NUM.sub(other, text)


def noise_line(rng: random.Random) -> str:
    """A line of run-time noise: what a rerun of the same command prints differently."""
    day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    ts = f"{day}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    tmp = "/tmp/tmp" + "".join(rng.choices(string.ascii_lowercase + string.digits + "_", k=8))
    uid = "-".join("".join(rng.choices("0123456789abcdef", k=n)) for n in (8, 4, 4, 4, 12))
    return rng.choice(
        (
            f"{ts} INFO worker pid {rng.randint(100, 99999)} finished in {rng.uniform(0.01, 9.99):.2f}s",
            f"wrote {tmp}/out.log ({rng.randint(1, 9999)} bytes) at {ts}",
            f"request {uid} took {rng.randint(1, 999)}ms",
            f"[{ts}] pid {rng.randint(100, 99999)}: cache {tmp} ready",
            f"elapsed {rng.uniform(0.01, 99):.2f}s, run id {uid}",
        )
    )


def volatile_lines(text: str, rng: random.Random, count: tuple[int, int] = (2, 5)) -> str:
    lines = text.split("\n")
    for _ in range(rng.randint(*count)):
        lines.insert(rng.randint(0, len(lines)), noise_line(rng))
    return "\n".join(lines)


def scattered_edits(text: str, rng: random.Random, vocab: list[str], rate: tuple[float, float] = (0.01, 0.03)) -> str:
    toks = _tokens(text)
    pos = _word_positions(toks)
    for p in rng.sample(pos, max(1, round(rng.uniform(*rate) * len(pos)))):
        toks[p] = rng.choice(vocab)
    return "".join(toks)


def block_edit(text: str, rng: random.Random, donor: str) -> str:
    toks = _tokens(text)
    pos = _word_positions(toks)
    other = donor.split()
    m = max(1, min(round(rng.uniform(0.05, 0.15) * len(pos)), len(other)))
    start, dstart = rng.randint(0, len(pos) - m), rng.randint(0, len(other) - m)
    for j in range(m):
        toks[pos[start + j]] = other[dstart + j]
    return "".join(toks)


def mix(text: str, rng: random.Random, vocab: list[str]) -> tuple[str, str]:
    """Two or three of the lighter edits at the low end of their ranges; the names applied."""
    light = {
        "dropped_lines": lambda t: dropped_lines(t, rng, (0.02, 0.03)),
        "swapped_words": lambda t: swapped_words(t, rng, (0.01, 0.015)),
        "volatile_lines": lambda t: volatile_lines(t, rng, (2, 3)),
        "scattered_edits": lambda t: scattered_edits(t, rng, vocab, (0.01, 0.015)),
        "rewrap": lambda t: rewrap(t, rng),
    }
    names = rng.sample(sorted(light), rng.choice((2, 3)))
    names.sort(key=lambda n: n == "rewrap")  # re-wrap last: the line edits need the lines
    for n in names:
        text = light[n](text)
    return text, "+".join(names)


def hard_negative(text: str, rng: random.Random, donor: str) -> str:
    """The page with 20-50% of its words, in middle lines, replaced by as many of another page's."""
    lines, other = text.split("\n"), [ln for ln in donor.split("\n") if ln.strip()]
    words = [len(ln.split()) for ln in lines]
    want = rng.uniform(0.2, 0.5) * sum(words)
    start = end = max(0, len(lines) // 2 + rng.randint(-len(lines) // 8, len(lines) // 8))
    cut = 0
    while cut < want and (start > 0 or end < len(lines)):  # grow the window around the middle
        if end < len(lines) and (start == 0 or (end - start) % 2 == 0):
            cut += words[end]
            end += 1
        else:
            start -= 1
            cut += words[start]
    d = rng.randint(0, max(0, len(other) - 1))
    new: list[str] = []
    got = 0
    while got < cut and len(new) < len(other):
        new.append(other[(d + len(new)) % len(other)])
        got += len(new[-1].split())
    return "\n".join(lines[:start] + new + lines[end:])


def jaccard5(a: str, b: str) -> float:
    """Exact word 5-gram Jaccard of two texts (the reference similarity), for one pair."""
    wa, wb = a.split(), b.split()
    sa = {tuple(wa[i : i + 5]) for i in range(max(1, len(wa) - 4))}
    sb = {tuple(wb[i : i + 5]) for i in range(max(1, len(wb) - 4))}
    return len(sa & sb) / max(1, len(sa | sb))


# --- the corpus -------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Documents in keep-priority order and what was planted in them."""

    ids: list[str]
    texts: list[str]
    family: dict[str, str]  # base document id -> family
    page: dict[str, str]  # base document id -> page id (its chunks share it)
    planted: dict[str, tuple[str, str]] = field(default_factory=dict)  # copy id -> (source id, kind)
    mix_parts: dict[str, str] = field(default_factory=dict)  # mix copy id -> the edits applied
    negatives: dict[str, str] = field(default_factory=dict)  # hard negative id -> source id
    stats: dict[str, object] = field(default_factory=dict)


def _sample_units(pages: list[Page], rng: random.Random) -> Iterator[list[Page]]:
    """Families in a seeded order, drawn with weight by size so template families come whole."""
    fams: dict[str, list[Page]] = defaultdict(list)
    for p in pages:
        fams[p.family].append(p)
    keyed = []
    for name in sorted(fams):
        members = fams[name]
        if len(members) > MAX_FAMILY:
            s = rng.randrange(len(members) - MAX_FAMILY + 1)
            members = members[s : s + MAX_FAMILY]
        keyed.append((rng.random() ** (1.0 / len(members)), name, members))
    keyed.sort(reverse=True)
    for _, _, members in keyed:
        yield members


def _base_documents(n: int, seed: int, log: Callable[[str], None]) -> tuple[list[tuple[str, str, str, str]], dict]:
    """n distinct chunks (id, text, family, page), whole families first; counts by source."""
    rng = random.Random(seed)
    pages = list_pages()
    # a 2 MB changelog gives thousands of chunks: a small corpus takes only its first few
    per_file = max(20, n // 50)
    docs: list[tuple[str, str, str, str]] = []
    seen: set[str] = set()
    counts: dict[str, int] = defaultdict(int)
    dup = 0
    for members in _sample_units(pages, rng):
        for p in members:
            text = p.read(p.path)
            counts[p.id.split("/", 1)[0] + "_pages"] += 1
            if not text:
                continue
            for i, c in enumerate(chunks(text, per_file)):
                key = hashlib.blake2b(" ".join(c.split()).encode(), digest_size=16).hexdigest()
                if key in seen:  # the same chunk in two packages: only planted copies are exact
                    dup += 1
                    continue
                seen.add(key)
                docs.append((f"{p.id}#{i}", c, p.family, p.id))
                counts[p.id.split("/", 1)[0] + "_chunks"] += 1
        if len(docs) >= n:
            break
    stats = {"listed_pages": len(pages), **counts, "duplicate_chunks_skipped": dup, "chunks": len(docs)}
    return docs[:n], stats


def build_corpus(n: int, seed: int, log: Callable[[str], None] = lambda s: None) -> Corpus:
    """n documents: ~86% distinct chunks, ~10% planted copies (9 kinds), ~4% hard negatives."""
    per_kind = max(1, round(0.10 * n / len(KINDS)))
    n_neg = max(1, round(0.04 * n))
    n_base = n - per_kind * len(KINDS) - n_neg
    base, stats = _base_documents(n_base, seed, log)
    if len(base) < n_base:
        raise SystemExit(
            f"only {stats['chunks']:,} distinct chunks found on this machine "
            f"({stats['listed_pages']:,} pages listed); {n:,} documents need {n_base:,}"
        )
    rng = random.Random(seed + 1)
    rng.shuffle(base)
    corpus = Corpus([], [], {d[0]: d[2] for d in base}, {d[0]: d[3] for d in base}, stats=stats)
    text_of = {d[0]: d[1] for d in base}
    order = [d[0] for d in base]
    vocab = sorted({w for d in base[:2000] for w in d[1].split() if w.isalpha() and 2 < len(w) < 12})
    free = list(order)
    rng.shuffle(free)
    used: set[str] = set()
    scanned: dict[str, int] = defaultdict(int)  # per test: how far down ``free`` it has looked

    def take(test: str) -> str:
        """The next unused document passing ``test``; each test scans ``free`` once in all."""
        while scanned[test] < len(free):
            doc = free[scanned[test]]
            scanned[test] += 1
            t = text_of[doc]
            words = len(t.split())
            ok = nonblank(t) >= 10 and words >= MIN_WORDS
            if test == "numbers":  # at least 3 numbers, at most 3% of the words: a copy, not a new table
                ok = ok and 3 <= len(_NUM.findall(t)) <= 0.03 * words
            if ok and doc not in used:
                used.add(doc)
                return doc
        raise SystemExit("not enough source documents for the planted copies")

    def nonblank(t: str) -> int:
        return sum(1 for ln in t.split("\n") if ln.strip())

    extra: list[tuple[str, str, str]] = []  # (id, text, source)
    for kind in KINDS:
        for j in range(per_kind):
            r = random.Random(f"{seed}:{kind}:{j}")
            src = take("numbers") if kind == "changed_numbers" else take("page")
            t = text_of[src]
            if kind == "exact":
                new = t
            elif kind == "rewrap":
                new = rewrap(t, r)
            elif kind == "dropped_lines":
                new = dropped_lines(t, r)
            elif kind == "swapped_words":
                new = swapped_words(t, r)
            elif kind == "changed_numbers":
                new = changed_numbers(t, r)
            elif kind == "volatile_lines":
                new = volatile_lines(t, r)
            elif kind == "scattered_edits":
                new = scattered_edits(t, r, vocab)
            elif kind == "block_edit":
                new = block_edit(t, r, text_of[r.choice(order)])
            else:
                new, parts = mix(t, r, vocab)
                corpus.mix_parts[f"{src}~{kind}"] = parts
            cid = f"{src}~{kind}"
            corpus.planted[cid] = (src, kind)
            extra.append((cid, new, src))
    for j in range(n_neg):
        r = random.Random(f"{seed}:negative:{j}")
        src = take("page")
        for attempt in range(10**6):
            if attempt and attempt % 200 == 0:  # no donor makes this page a negative: another page
                src = take("page")
            donor = r.choice(order)
            ok = corpus.family[donor] != corpus.family[src]
            ok = ok and len(text_of[donor].split()) >= len(text_of[src].split()) // 2
            if not (ok and jaccard5(text_of[donor], text_of[src]) < 0.3):  # another page, not a sibling's copy
                continue
            new = hard_negative(text_of[src], r, text_of[donor])
            if jaccard5(new, text_of[src]) < 0.65:  # shared licence text can put a donor's lines back
                break
        cid = f"{src}~negative"
        corpus.negatives[cid] = src
        extra.append((cid, new, src))
    # each copy goes at a random place after its source: the source is the one to keep
    position = {doc: i for i, doc in enumerate(order)}
    slots: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for cid, new, src in extra:
        slots[rng.randint(position[src], len(order) - 1)].append((cid, new))
    for i, doc in enumerate(order):
        corpus.ids.append(doc)
        corpus.texts.append(text_of[doc])
        for cid, new in slots.get(i, ()):
            corpus.ids.append(cid)
            corpus.texts.append(new)
    corpus.stats.update(documents=len(corpus.ids), base=len(base), planted=len(corpus.planted), negatives=n_neg)
    return corpus


# --- exact similarity ------------------------------------------------------------------------

_P = np.uint64(0x100000001B3)


def _hash_tokens(tokens: Iterable[str], table: dict[str, int]) -> np.ndarray:
    return np.fromiter((table.setdefault(t, len(table) + 1) for t in tokens), dtype=np.uint64)


def _ngram_hashes(ids: np.ndarray, n: int) -> np.ndarray:
    if len(ids) < n:
        n = max(1, len(ids))
    if len(ids) == 0:
        return np.zeros(1, dtype=np.uint64)
    h = np.zeros(len(ids) - n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            h = h * _P + ids[k : len(ids) - n + 1 + k] * np.uint64(0x9E3779B97F4A7C15)
    return h


class Shingles:
    """A binary document x shingle matrix (scipy.sparse CSR) and exact Jaccard from it.

    ``kind="word"`` shingles are n-grams of ``text.split()`` (case kept); ``kind="char"`` are
    n-grams of the text's UTF-8 bytes after whitespace runs collapse to one space. Shingles
    are 64-bit polynomial hashes of token ids: a collision needs two equal 64-bit values."""

    def __init__(self, texts: list[str], kind: str = "word", n: int = 5) -> None:
        table: dict[str, int] = {}
        rows, cols = [], []
        for i, t in enumerate(texts):
            if kind == "word":
                ids = _hash_tokens(t.split(), table)
            else:
                ids = np.frombuffer(" ".join(t.split()).encode(), dtype=np.uint8).astype(np.uint64) + np.uint64(1)
            h = np.unique(_ngram_hashes(ids, n))
            rows.append(np.full(len(h), i, dtype=np.int32))
            cols.append(h)
        allc = np.concatenate(cols)
        uniq, inv = np.unique(allc, return_inverse=True)
        r = np.concatenate(rows)
        self.x = sp.csr_matrix((np.ones(len(r), dtype=np.float32), (r, inv)), shape=(len(texts), len(uniq)))
        self.size = np.asarray(self.x.sum(axis=1)).ravel()

    def pairs(self, a: list[int], b: list[int]) -> np.ndarray:
        """Exact Jaccard of documents a[i] and b[i]."""
        if not a:
            return np.zeros(0)
        inter = np.asarray(self.x[a].multiply(self.x[b]).sum(axis=1)).ravel()
        return inter / np.maximum(1, self.size[a] + self.size[b] - inter)

    def best(self, rows: list[int], block: int = 1000) -> tuple[np.ndarray, np.ndarray]:
        """For each row: its most similar other document anywhere, and that Jaccard."""
        best_j = np.zeros(len(rows))
        best_i = np.full(len(rows), -1)
        xt = self.x.T.tocsc()
        for s in range(0, len(rows), block):
            chunk = rows[s : s + block]
            inter = (self.x[chunk] @ xt).tocoo()
            r, c, v = inter.row, inter.col, inter.data
            keep = c != np.asarray(chunk)[r]
            r, c, v = r[keep], c[keep], v[keep]
            j = v / (self.size[np.asarray(chunk)[r]] + self.size[c] - v)
            order = np.lexsort((-j, r))
            r, c, j = r[order], c[order], j[order]
            first = np.r_[True, r[1:] != r[:-1]] if len(r) else np.zeros(0, bool)
            best_j[s + r[first]] = j[first]
            best_i[s + r[first]] = c[first]
        return best_j, best_i
