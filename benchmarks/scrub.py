"""Secret scrubber benchmark: recall on planted secrets, changed lines on ordinary text,
and throughput, today's scrubber against the one it replaced.

    python benchmarks/scrub.py [--per-kind 20] [--transitions 4000] [--man-pages 200]

- Recall per kind on the planted corpus of ``tests/security/test_scrub.py`` (seeded values
  of 31 kinds in terminal, SWE, web and MCP text): a secret is caught when no 8-character
  piece of it survives.
- Lines changed on ordinary text with no secrets: the generated lines, the synthetic
  collector's seven domains, Python's documentation (``pydoc``), rendered man pages, and the
  real agent trajectories in ``../shared/fixtures/agent-data`` (every changed line printed).
  Email addresses are counted apart: they are redacted on purpose, not by mistake.
- Throughput of curation's path (the RE2 row pre-filter, then ``scrub_transition`` on the
  rows it flags) over synthetic transitions with 1% holding a planted secret, and of the new
  scrubber on every text with no pre-filter.

The old scrubber is ``pipelines/curate/logic.py`` at commit ``BASELINE``, loaded from git.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.curate import scrub  # noqa: E402
from schemas.arrow import from_record_batch, to_record_batch  # noqa: E402
from tests.security import test_scrub as gen  # noqa: E402

BASELINE = "f61f9a7"  # the last commit with the old scrubber in pipelines/curate/logic.py
FIXTURES = ROOT.parent / "shared" / "fixtures" / "agent-data"


def old_scrubber():
    """The old module (its scrub_text, scrub_transition, secret_rows) and its default kinds."""
    source = subprocess.run(
        ["git", "show", f"{BASELINE}:pipelines/curate/logic.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_logic.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_logic", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_logic"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module, list(module.SECRET_PATTERNS)


# -- ordinary corpora ---------------------------------------------------------------------------
def man_pages(n: int) -> list[str]:
    """``n`` rendered man pages: the tools that take credentials first, then a fixed sample."""
    wanted = [
        "curl",
        "wget",
        "ssh",
        "scp",
        "sftp",
        "ssh-keygen",
        "ssh-agent",
        "sshpass",
        "openssl",
        "gpg",
        "git-config",
        "git-credential",
        "git-clone",
        "zip",
        "unzip",
        "7z",
        "ldapsearch",
        "smbclient",
        "htpasswd",
        "podman-login",
        "redis-cli",
        "psql",
        "mysql",
        "sudo",
        "su",
        "passwd",
        "chpasswd",
        "login",
        "env",
        "bash",
    ]
    names = sorted({p.name.split(".")[0] for p in Path("/usr/share/man/man1").glob("*.1*")})
    rest = [x for x in names if x not in wanted]
    chosen = [x for x in wanted if x in names] + random.Random(0).sample(rest, min(len(rest), n))
    env = {**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": "0"}

    def render(name: str) -> str:
        r = subprocess.run(["man", "-P", "cat", name], capture_output=True, text=True, env=env, timeout=60)
        return r.stdout

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return [t for t in pool.map(render, chosen[:n]) if t]


def fixture_texts() -> list[tuple[str, str]]:
    """(file, text) for every string in the real agent data: JSON strings one by one, other
    files whole."""
    out: list[tuple[str, str]] = []

    def strings(x, file: str) -> None:
        if isinstance(x, str):
            out.append((file, x))
        elif isinstance(x, dict):
            for v in x.values():
                strings(v, file)
        elif isinstance(x, list):
            for v in x:
                strings(v, file)

    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file():
            continue
        rel = str(path.relative_to(FIXTURES))
        text = path.read_text(errors="replace")
        if path.suffix in (".json", ".traj"):
            try:
                strings(json.loads(text), rel)
                continue
            except json.JSONDecodeError:
                pass
        out.append((rel, text))
    return out


def count_changes(texts: list[str], kinds) -> tuple[int, int, Counter, list[tuple[str, str]]]:
    """(lines changed, lines, placeholders by kind, examples)."""
    changed, total, kinds_seen, examples = 0, 0, Counter(), []
    for text in texts:
        out, counts = scrub.scrub_text(text, kinds)
        kinds_seen.update(counts)
        before, after = text.splitlines(), out.splitlines()
        total += len(before)
        for b, a in zip(before, after, strict=True):
            if a != b:
                changed += 1
                examples.append((b, a))
    return changed, total, kinds_seen, examples


# -- throughput ---------------------------------------------------------------------------------
def curation_batch(n: int, seed: int = 11):
    """Synthetic transitions of every domain, 1% with a planted secret in the next state."""
    from collectors.synth import Synthesizer

    planted = gen.planted_corpus(seed=seed, per_kind=max(1, n // 100 // len(gen.VALUES) + 1))
    rows = list(Synthesizer(seed).transitions(n))
    r = random.Random(seed)
    for i, p in zip(r.sample(range(n), min(n // 100, len(planted))), planted, strict=False):
        t = rows[i]
        rows[i] = t.evolve(next_state=replace(t.next_state, text=t.next_state.text + "\n" + p.text, volatile_spans=()))
    return to_record_batch(rows)


def text_bytes(batch) -> int:
    """Bytes of the text the scrubber reads: states, next states, actions, instructions."""
    state, next_state, action = (batch.column(c) for c in ("state", "next_state", "action"))
    columns = [
        state.field("text"),
        next_state.field("text"),
        action.field("canonical"),
        action.field("raw"),
        batch.column("instruction"),
    ]
    return sum(len((x or "").encode()) for column in columns for x in column.to_pylist())


def curation_path(secret_rows: Callable, scrub_transition: Callable, kinds) -> Callable:
    def run(batch) -> int:
        dirty = [i for i, d in enumerate(secret_rows(batch, kinds)) if d]
        import pyarrow as pa

        for t in from_record_batch(batch.take(pa.array(dirty, pa.int64()))):
            scrub_transition(t, kinds)
        return len(dirty)

    return run


def every_text(kinds) -> Callable:
    def run(batch) -> int:
        for t in from_record_batch(batch):
            scrub.scrub_transition(t, kinds)
        return batch.num_rows

    return run


def timed(fn: Callable, batch, repeat: int = 3) -> tuple[float, int]:
    best, flagged = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        flagged = fn(batch)
        best = min(best, time.perf_counter() - start)
    return best, flagged


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kind", type=int, default=20)
    ap.add_argument("--transitions", type=int, default=4000)
    ap.add_argument("--man-pages", type=int, default=200)
    args = ap.parse_args(argv)
    old, old_kinds = old_scrubber()
    new_kinds = [k for k in scrub.KINDS if k != "email"]
    print(f"scrubber benchmark, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; old = logic.py at {BASELINE}\n")

    corpus = gen.planted_corpus(seed=0, per_kind=args.per_kind)
    new_recall = gen.recall_by_kind(corpus, lambda t: scrub.scrub_text(t, new_kinds)[0])
    old_recall = gen.recall_by_kind(corpus, lambda t: old.scrub_text(t, old_kinds)[0])
    print(f"recall on {len(corpus)} planted secrets of {len(new_recall)} kinds")
    print(f"  {'kind':<20} {'old':>9} {'new':>9}")
    for kind, (c, n) in new_recall.items():
        print(f"  {kind:<20} {old_recall[kind][0]:>4}/{n:<4} {c:>4}/{n:<4}")
    for name, recall in (("old", old_recall), ("new", new_recall)):
        caught = sum(c for c, _ in recall.values())
        print(f"  overall {name}: {caught}/{len(corpus)} = {caught / len(corpus):.2%}")
    for p in corpus:
        if gen.survives(p.value, scrub.scrub_text(p.text, new_kinds)[0]):
            print(f"  missed ({p.kind}, {p.domain}): {p.value[:60]!r}")

    print("\nordinary text: lines changed (secret kinds; emails apart)")
    corpora = {
        "generated lines": ["\n".join(gen.ordinary_lines(1, 50_000))],
        "synthetic, 7 domains": gen.synth_texts(n=args.transitions),
        "pydoc corpus": gen.pydoc_texts(),
        f"man pages ({args.man_pages})": man_pages(args.man_pages),
        "agent-data fixtures": [t for _, t in fixture_texts()] if FIXTURES.is_dir() else [],
    }
    for name, texts in corpora.items():
        changed, total, kinds, examples = count_changes(texts, new_kinds)
        old_changed = count_old(texts, old, [k for k in old_kinds if k != "email"])
        emails = count_changes(texts, ["email"])[0]
        rate = changed / total if total else 0.0
        print(
            f"  {name:<22} new {changed:>4}/{total:<7} ({rate * 1000:.2f} per 1,000)  old {old_changed:>4}  "
            f"email lines {emails}  {dict(kinds)}"
        )
        for b, a in examples[:40]:
            print(f"      - {b.strip()[:140]}\n      + {a.strip()[:140]}")

    print(f"\nthroughput: {args.transitions} synthetic transitions, 1% with a planted secret")
    batch = curation_batch(args.transitions)
    mb = text_bytes(batch) / 1e6
    runs = {
        "old (literal pre-filter + old patterns)": curation_path(old.secret_rows, old.scrub_transition, old_kinds),
        "new (RE2 pre-filter + detectors)": curation_path(scrub.secret_rows, scrub.scrub_transition, list(scrub.KINDS)),
        "new, every row scrubbed (no pre-filter)": every_text(list(scrub.KINDS)),
    }
    results = {}
    for name, fn in runs.items():
        seconds, flagged = timed(fn, batch)
        results[name] = seconds
        print(
            f"  {name:<42} {batch.num_rows / seconds:>9,.0f} transitions/s  {mb / seconds:>6.1f} MB/s  "
            f"rows flagged {flagged}/{batch.num_rows}"
        )
    first, second = list(results.values())[:2]
    print(f"  new / old throughput: {first / second:.2f}x  ({mb:.1f} MB of text)")

    print("\nhostile text (every kind, 200 KB each): seconds")
    for name, text in hostile_texts().items():
        start = time.perf_counter()
        scrub.scrub_text(text, list(scrub.KINDS))
        print(f"  {name:<22} {time.perf_counter() - start:6.3f}")


def hostile_texts(n: int = 200_000) -> dict[str, str]:
    """Texts an agent could print to make a regex scan quadratic: long runs of what the rules
    start on, with nothing that completes a match."""
    return {
        "mysql words": "mysql " * (n // 6),
        "pass run": "pass" * (n // 4),
        "sk- run": "sk-" * (n // 3),
        "dashes": "--" + "-" * n,
        "eyJ run": "eyJ" * (n // 3),
        "eyJab. run": "eyJab." * (n // 6),
        "email local part": "a." * (n // 2) + "@",
        "aws key, spaces": "aws_secret_access_key" + " " * n,
        "BEGIN, no END": "-----BEGIN RSA PRIVATE KEY-----\n" * (n // 32),
        ":// run": "://" + "a" * n + ":",
        "Authorization, spaces": "Authorization:" + " " * n,
        "password, quotes": "password: " + '"' * n,
        "backslashes": "\\" * n,
        "key= run": "key=" * (n // 4),
        "escaped token run": 'token\\": \\"' * (n // 12),
        "curl -u run": "curl " + "-u a:" * (n // 5),
        "://a:b@ run": "://a:b@" * (n // 7),
        "xoxb run": "xoxb-1-" * (n // 7),
        "AKIA run": "AKIA" * (n // 4),
        "digits and colons": "1234567890:" * (n // 11),
        "bearer run": "bearer " * (n // 7),
        "--password run": "--password " * (n // 11),
    }


def count_old(texts: list[str], old, kinds) -> int:
    changed = 0
    for text in texts:
        out = old.scrub_text(text, kinds)[0]
        changed += sum(a != b for a, b in zip(text.splitlines(), out.splitlines(), strict=True))
    return changed


if __name__ == "__main__":
    main()
