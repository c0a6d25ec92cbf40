"""Search tasks generated from the corpus, and the check of an agent's answer.

Two kinds of question, both answered by one document of the corpus (its ``source_doc``):

- ``module-of``: "Which Python standard library module provides the function `heappushpop`?"
  -> ``heapq``, for names that exactly one module of the corpus defines;
- ``function-for``: "Which function of the `json` module does this: "Serialize obj to a
  JSON formatted str."?" -> ``dumps``, from first docstring sentences found only once.

Each task carries a scripted solution (search, open the source, answer) for
``ScriptedPolicy`` and ``check_env``. An answer scores 1.0 when the normalised answer (or
an alias) occurs in the normalised text (lower case, punctuation and articles dropped,
whole words), else 0.0; SQuAD's token F1 is recorded beside it.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from collectors.search.corpus import Doc

ARTICLES = {"a", "an", "the"}


def normalize(text: str) -> str:
    """Lower case, punctuation to spaces, articles dropped, whitespace collapsed."""
    return " ".join(w for w in re.sub(r"[^\w\s]", " ", text.lower()).split() if w not in ARTICLES)


def token_f1(given: str, answers: list[str]) -> float:
    """The best token F1 of ``given`` against any of ``answers``."""
    best, got = 0.0, normalize(given).split()
    for answer in answers:
        want = normalize(answer).split()
        common = sum((Counter(got) & Counter(want)).values())
        if common:
            p, r = common / len(got), common / len(want)
            best = max(best, 2 * p * r / (p + r))
    return round(best, 4)


def score_answer(given: str, answer: str, aliases: list[str] | tuple[str, ...] = ()) -> tuple[float, float]:
    """(reward, token F1): reward 1.0 when the answer or an alias is in the given text."""
    text = f" {normalize(given)} "
    answers = [answer, *aliases]
    hit = any(norm and f" {norm} " in text for norm in map(normalize, answers))
    return (1.0 if hit else 0.0), token_f1(given, answers)


def _first_sentence(doc: Doc) -> str:
    """The first sentence of a member's docstring (the text after its signature line)."""
    body = doc.text.split("\n\n", 2)[1] if doc.text.count("\n\n") >= 1 else ""
    para = " ".join(body.split("\n\n", 1)[0].split())
    m = re.match(r"(.+?\.)(\s|$)", para)
    return m.group(1) if m else ""


def _task(
    kind: str, name: str, instruction: str, query: str, doc: Doc, answer: str, aliases: list[str], env_id: str
) -> dict[str, Any]:
    return {
        "id": f"search/{kind}-{doc.id.replace('.', '-').lower()}",
        "domain": "search",
        "env_id": env_id,
        "seed": 0,
        "instruction": instruction,
        "check": "answer",
        "actions": [
            {"action": "search", "query": query},
            {"action": "open", "doc": doc.id},
            {"action": "answer", "text": answer},
        ],
        "extra": {"answer": answer, "aliases": aliases, "source_doc": doc.id, "query": query, "kind": kind},
    }


def make_tasks(docs: list[Doc], n: int = 8, seed: int = 0, env_id: str = "pydoc") -> list[dict[str, Any]]:
    """``n`` task bodies (half of each kind) from the module members of a pydoc-style corpus
    (``module.name`` ids, "function module.name(...)" first lines), in a seeded order."""
    members = [d for d in docs if "." in d.id and d.text.startswith(("function ", "class "))]
    names = Counter(d.id.rsplit(".", 1)[1] for d in members)
    sentences = Counter(_first_sentence(d) for d in members)
    module_of, function_for = [], []
    for d in members:
        module, name = d.id.rsplit(".", 1)
        what = d.text.split(" ", 1)[0]
        if names[name] == 1 and len(name) >= 6:
            module_of.append(
                _task(
                    "module-of",
                    name,
                    f"Which Python standard library module provides the {what} `{name}`? Answer with the module name.",
                    name,
                    d,
                    module,
                    [d.id],
                    env_id,
                )
            )
        sentence = _first_sentence(d)
        if what == "function" and sentences[sentence] == 1 and 6 <= len(sentence.split()) <= 25 and name not in sentence:
            function_for.append(
                _task(
                    "function-for",
                    name,
                    f'Which function of the Python `{module}` module does this: "{sentence}"? Answer with the function name.',
                    f"{module} {sentence}",
                    d,
                    name,
                    [d.id, f"{name}()"],
                    env_id,
                )
            )
    rng = random.Random(seed)
    rng.shuffle(module_of)
    rng.shuffle(function_for)
    picked = module_of[: n - n // 2] + function_for[: n // 2]
    return sorted(picked, key=lambda t: t["id"])


def write_suite(tasks: list[dict[str, Any]], path: str | Path, header: str = "") -> Path:
    """A task suite YAML that ``collectors.env.load_suite`` reads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    path.write_text(comment + yaml.safe_dump({"tasks": tasks}, sort_keys=False, width=130, allow_unicode=True))
    return path
