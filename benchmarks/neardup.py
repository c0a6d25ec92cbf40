"""Near-duplicate removal side by side: trajforge's stage against datatrove's, on real text.

    python benchmarks/neardup.py [--documents 4000] [--repeats 3] [--datatrove-python PY]
    python benchmarks/neardup.py --study [--documents 4000]      # which shingling, which threshold
    python benchmarks/neardup.py --mode synthetic [--transitions 100000]   # the old benchmark

Real-text mode (the default, issue 24): the corpus is Debian's own text, built by
``benchmarks/neardup_corpus.py``: man pages, ``/usr/share/doc`` files and Python's
standard library in chunks of 150-800 words, template families sampled whole and left as
they are, about 10% planted copies of nine edit kinds and about 4% hard negatives, each
after its source. Truth is exact: the Jaccard of the word 5-gram sets of the
whitespace-split text (scipy.sparse), a true near-duplicate at ``--truth-threshold``.

Both systems get the same two JSONL files and the same cores, runs alternating, timed from
a fresh interpreter before their imports:

- trajforge: ``pipelines.curate.documents.dedup_documents(docs, NearDedup(), runner=...)`` with
  the documents in corpus order (earlier wins); it returns each removal's kept partner and
  similarity.
- datatrove (installed for this benchmark only, in its own virtual environment: the
  Makefile's ``bench-neardup`` makes it): its four MinHash steps with its defaults
  (word 5-grams after its text normalisation, its English word tokenizer, 64-bit xxhash,
  14 buckets x 8 hashes) on ``LocalPipelineExecutor`` with 2 workers.

Scored per planted kind (a pair of source and copy counts as found when either of them is
removed while the pair still needs its one removal: a source dropped as the near duplicate
of an earlier document leaves the copy to stand for the pair), plus removals of documents with no true
near-duplicate anywhere, hard negatives removed, and for trajforge whether each named
partner is a true near-duplicate. Prints a Markdown section for RESULTS.md with the
issue's goals met or missed.

Synthetic mode is the earlier benchmark (issue 5): one document per synthetic trajectory,
5% exact and 5% lightly perturbed copies, trajforge's stage on Beam.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from neardup_corpus import KINDS, Corpus, Shingles, build_corpus  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- synthetic mode (issue 5) ---------------------------------------------------------------


def make_documents(n: int, seed: int, folder: Path, files: int = 2) -> dict[str, str]:
    """Two JSONL files of {id, text, domain}, in collection order; the planted copies."""
    from collectors.synth import Synthesizer
    from pipelines.curate.logic import masked

    gen = Synthesizer(seed, duplicates=0.1)
    docs: dict[str, list[str]] = {}
    domains: dict[str, str] = {}
    for t in gen.transitions(n):
        parts = docs.setdefault(t.trajectory_id, [])
        if t.step == 0:
            parts.append(masked(t.state))
        parts += [t.action.canonical, masked(t.next_state)]
        domains[t.trajectory_id] = t.domain
    ids = list(docs)
    folder.mkdir(parents=True, exist_ok=True)
    per_file = -(-len(ids) // files)
    for f in range(files):
        with open(folder / f"docs-{f}.jsonl", "w") as out:
            for i in ids[f * per_file : (f + 1) * per_file]:
                out.write(json.dumps({"id": i, "text": "\n".join(docs[i]), "domain": domains[i]}) + "\n")
    return gen.summary.planted


def score(removed: set[str], planted: dict[str, str]) -> tuple[float, float]:
    group_of = {copy: source for copy, source in planted.items()}
    group_of.update({source: source for source in planted.values()})
    room = Counter(planted.values())  # removals each group needs: its copies
    found = 0
    for doc in sorted(removed):
        g = group_of.get(doc)
        if g is not None and room[g] > 0:
            room[g] -= 1
            found += 1
    return found / max(1, len(removed)), found / max(1, len(planted))


DATATROVE = """
import json, sys, time
t0 = time.perf_counter()
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig

docs, work, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = MinhashConfig(hash_config=HashConfig(precision=64))
read = lambda: JsonlReader(docs, glob_pattern="*.jsonl", id_key="id", text_key="text")
run = lambda steps, tasks, name: LocalPipelineExecutor(steps, tasks=tasks, workers=min(workers, tasks),
                                                       logging_dir=f"{work}/logs/{name}").run()
run([read(), MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg)], 2, "sigs")
run([MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets", config=cfg)], cfg.num_buckets, "buckets")
run([MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove", config=cfg)], 1, "cluster")
removed = JsonlWriter(f"{work}/removed", compression=None)
run([read(), MinhashDedupFilter(input_folder=f"{work}/remove", exclusion_writer=removed)], 2, "filter")
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def run_datatrove(folder: Path, workers: int, python: str) -> tuple[float, set[str]]:
    work = folder.parent / "datatrove-work"
    shutil.rmtree(work, ignore_errors=True)
    out = subprocess.run([python, "-c", DATATROVE, str(folder), str(work), str(workers)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"datatrove failed:\n{out.stderr[-3000:]}")
    seconds = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    removed = {json.loads(line)["id"] for f in (work / "removed").glob("*.jsonl") for line in f.read_text().splitlines()}
    shutil.rmtree(work)
    return seconds, removed


def main_synthetic(args: argparse.Namespace) -> None:
    workers = os.cpu_count() or 1
    tmp = Path(tempfile.mkdtemp(prefix="trajforge-neardup-"))
    try:
        t0 = time.perf_counter()
        planted = make_documents(args.transitions, args.seed, tmp / "docs")
        n_docs = sum(len(f.read_text().splitlines()) for f in (tmp / "docs").glob("*.jsonl"))
        print(
            f"{n_docs} documents ({args.transitions} transitions), {len(planted)} planted copies, "
            f"made in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
        runs: dict[str, list[float]] = {"trajforge": [], "datatrove": []}
        removed: dict[str, set[str]] = {}
        for r in range(args.repeats):
            for name in ("trajforge", "datatrove") if r % 2 == 0 else ("datatrove", "trajforge"):
                if name == "trajforge":
                    seconds, found = run_trajforge(tmp / "docs", "beam")
                    removed[name] = set(found)
                else:
                    seconds, removed[name] = run_datatrove(tmp / "docs", workers, args.datatrove_python)
                runs[name].append(seconds)
                print(f"  {name} run {r + 1}: {seconds:.1f} s, {len(removed[name])} removed", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(runs["datatrove"])
    print(
        f"\n### Near-duplicate stage vs datatrove ({time.strftime('%Y-%m-%d')}, {workers} cores, {n_docs:,} documents "
        f"from {args.transitions:,} transitions, {len(planted):,} planted copies, median of {args.repeats})\n"
    )
    print("| system | median s | runs s | documents/s per core | time vs datatrove | precision | recall |")
    print("|---|---|---|---|---|---|---|")
    for name, secs in runs.items():
        med = statistics.median(secs)
        precision, recall = score(removed[name], planted)
        print(
            f"| {name} | {med:.1f} | {', '.join(f'{s:.1f}' for s in secs)} | {n_docs / med / workers:.0f} "
            f"| {med / base:.2f}x | {precision:.3f} | {recall:.3f} |"
        )


# --- real-text mode (issue 24) --------------------------------------------------------------


def write_corpus(corpus: Corpus, folder: Path, files: int = 2) -> None:
    """The documents in corpus order, split over ``files`` JSONL files (file 0 first)."""
    folder.mkdir(parents=True, exist_ok=True)
    per_file = -(-len(corpus.ids) // files)
    for f in range(files):
        with open(folder / f"docs-{f}.jsonl", "w") as out:
            for i in range(f * per_file, min(len(corpus.ids), (f + 1) * per_file)):
                out.write(json.dumps({"id": corpus.ids[i], "text": corpus.texts[i]}) + "\n")


TRAJFORGE = """
import json, sys, time
t0 = time.perf_counter()
root, folder, runner, out = sys.argv[1:5]
sys.path.insert(0, root)
from pipelines.curate.config import NearDedup
from pipelines.curate.documents import dedup_documents
docs = []
for name in sorted(__import__("os").listdir(folder)):
    if name.endswith(".jsonl"):
        docs += [(d["id"], d["text"]) for d in map(json.loads, open(f"{folder}/{name}"))]
removed = dedup_documents(docs, NearDedup(), runner=runner)
seconds = time.perf_counter() - t0
json.dump({"seconds": seconds, "removed": {k: list(v) for k, v in removed.items()}}, open(out, "w"))
"""


def run_trajforge(folder: Path, runner: str) -> tuple[float, dict[str, tuple[str, float]]]:
    out_file = folder.parent / "trajforge-removed.json"
    out = subprocess.run(
        [sys.executable, "-c", TRAJFORGE, str(ROOT), str(folder), runner, str(out_file)],
        capture_output=True,
        text=True,
    )
    if out.returncode:
        sys.exit(f"trajforge failed:\n{out.stderr[-3000:]}")
    result = json.loads(out_file.read_text())
    out_file.unlink()
    return result["seconds"], {k: (v[0], float(v[1])) for k, v in result["removed"].items()}


def pct(part: float, whole: float) -> str:
    return f"{100 * part / max(1, whole):.2f}%"


class Scorer:
    """Scores removals against the corpus's planted copies and exact reference Jaccard."""

    def __init__(self, corpus: Corpus, threshold: float) -> None:
        self.corpus, self.threshold = corpus, threshold
        self.index = {d: i for i, d in enumerate(corpus.ids)}
        self.truth = Shingles(corpus.texts)
        self._best: dict[str, tuple[float, str]] = {}
        copies = list(corpus.planted)
        self.planted_j = dict(zip(copies, self.pairs(copies, [corpus.planted[c][0] for c in copies]), strict=True))
        negs = list(corpus.negatives)
        self.negative_j = dict(zip(negs, self.pairs(negs, [corpus.negatives[c] for c in negs]), strict=True))

    def pairs(self, a: list[str], b: list[str]) -> list[float]:
        return [float(x) for x in self.truth.pairs([self.index[x] for x in a], [self.index[x] for x in b])]

    def best(self, ids: set[str]) -> dict[str, tuple[float, str]]:
        """Each document's most similar other document anywhere in the corpus (cached)."""
        todo = sorted(ids - set(self._best))
        if todo:
            j, i = self.truth.best([self.index[d] for d in todo])
            for d, jj, ii in zip(todo, j, i, strict=True):
                self._best[d] = (float(jj), self.corpus.ids[ii] if ii >= 0 else "")
        return {d: self._best[d] for d in ids}

    def score(self, removed: set[str], partners: dict[str, tuple[str, float]] | None) -> dict:
        c = self.corpus
        group_of: dict[str, str] = {}
        for copy, (source, _kind) in c.planted.items():
            group_of[copy] = copy
            # a pair needs one removal, whichever member goes: a source dropped as the near
            # duplicate of an earlier document leaves its copy to stand for the pair
            group_of[source] = copy
        room = {copy: 1 for copy in c.planted}
        found: Counter[str] = Counter()
        touched: Counter[str] = Counter()
        for doc in sorted(removed):
            g = group_of.get(doc)
            if g is None:
                continue
            kind = c.planted[g][1]
            touched[kind] += 1
            if room[g]:
                room[g] -= 1
                found[kind] += 1
        best = self.best(removed)
        lonely = sorted(d for d in removed if best[d][0] < self.threshold)
        negs = [d for d in removed if d in c.negatives]
        out = {
            "removed": len(removed),
            "found": found,
            "touched": touched,
            "recall": sum(found.values()) / max(1, len(c.planted)),
            "lonely": lonely,
            "lonely_best": {d: best[d] for d in lonely},
            "negatives": len(negs),
        }
        if partners is not None:
            named = [d for d in removed if partners.get(d, ("", 0.0))[0] in self.index]
            js = self.pairs(named, [partners[d][0] for d in named])
            out["partners_named"] = len(named)
            out["partners_true"] = sum(j >= self.threshold for j in js)
            out["partners_kept"] = sum(partners[d][0] not in removed for d in named)
        return out


def corpus_summary(corpus: Corpus, scorer: Scorer, seconds: float) -> str:
    s = corpus.stats
    natural = (
        sum(
            1
            for d, (j, _) in scorer.best(set(corpus.ids) - set(corpus.planted) - set(corpus.negatives)).items()
            if j >= scorer.threshold and d not in {src for src, _ in corpus.planted.values()}
        )
        if len(corpus.ids) <= 20_000
        else None
    )
    return (
        f"{s['documents']:,} documents: {s['base']:,} distinct chunks (man pages: {s.get('man_chunks', 0):,} chunks "
        f"from {s.get('man_pages', 0):,} pages read; /usr/share/doc: {s.get('doc_chunks', 0):,} from "
        f"{s.get('doc_pages', 0):,} files; Python stdlib: {s.get('py_chunks', 0):,} from {s.get('py_pages', 0):,} "
        f"modules; {s['duplicate_chunks_skipped']:,} repeated chunks skipped; {s['listed_pages']:,} files listed), "
        f"{s['planted']:,} planted copies ({len(corpus.planted) // len(KINDS)} per kind), {s['negatives']:,} hard "
        f"negatives; built in {seconds:.1f} s"
        + (f"; {natural:,} unplanted documents already have a true near-duplicate in the corpus" if natural else "")
    )


def report(
    args: argparse.Namespace,
    corpus: Corpus,
    scorer: Scorer,
    runs: dict[str, list[float]],
    scores: dict[str, dict],
    summary: str,
) -> None:
    n, workers, t = len(corpus.ids), os.cpu_count() or 1, args.truth_threshold
    print(
        f"\n### Near-duplicate stage vs datatrove on real text ({time.strftime('%Y-%m-%d')}, {workers} cores, "
        f"{n:,} documents, seed {args.seed}, median of {args.repeats})\n"
    )
    print(f"Command: `python benchmarks/neardup.py --documents {n} --repeats {args.repeats} --seed {args.seed}`. {summary}.")
    print(f"Truth: exact word 5-gram Jaccard >= {t}; trajforge runner `{args.runner}`.\n")
    base = statistics.median(runs["datatrove"]) if runs.get("datatrove") else None
    print(
        "| system | median s | runs s | documents/s per core | time vs datatrove | removed | planted recall "
        "| removed with no true near-dup | hard negatives removed | partner named | partner a true near-dup | partner kept |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, secs in runs.items():
        med, sc = statistics.median(secs), scores[name]
        named = sc.get("partners_named")
        print(
            f"| {name} | {med:.1f} | {', '.join(f'{x:.1f}' for x in secs)} | {n / med / workers:.0f} "
            f"| {f'{med / base:.2f}x' if base else '-'} | {sc['removed']:,} | {sc['recall']:.3f} "
            f"| {len(sc['lonely'])} ({pct(len(sc['lonely']), n)}) "
            f"| {sc['negatives']} / {len(corpus.negatives)} ({pct(sc['negatives'], len(corpus.negatives))}) "
            + (
                f"| {named} / {sc['removed']} | {pct(sc['partners_true'], named)} | {pct(sc['partners_kept'], named)} |"
                if named is not None
                else "| - | - | - |"
            )
        )
    print("\nPer planted kind (found / planted = recall; precision = found / removals touching the kind's groups):\n")
    names = list(runs)
    print(
        "| kind | planted | reference Jaccard min / median | below truth | "
        + " | ".join(f"{x} found | {x} precision" for x in names)
        + " |"
    )
    print("|---|---|---|---|" + "---|---|" * len(names))
    for kind in KINDS:
        copies = [cp for cp, (_, k) in corpus.planted.items() if k == kind]
        js = [scorer.planted_j[cp] for cp in copies]
        cells = []
        for x in names:
            f, tch = scores[x]["found"][kind], scores[x]["touched"][kind]
            cells.append(f"{f} ({f / max(1, len(copies)):.3f}) | {f / tch:.3f}" if tch else f"{f} (0.000) | -")
        print(
            f"| {kind} | {len(copies)} | {min(js):.3f} / {statistics.median(js):.3f} "
            f"| {sum(j < t for j in js)} | " + " | ".join(cells) + " |"
        )
    nj = list(scorer.negative_j.values())
    print(
        f"| hard negatives (not duplicates) | {len(nj)} | max {max(nj):.3f}, median {statistics.median(nj):.3f} "
        f"| {sum(j < t for j in nj)} below | " + " | ".join(f"{scores[x]['negatives']} removed | -" for x in names) + " |"
    )
    for x in names:
        lonely = scores[x]["lonely"]
        if lonely:
            shown = ", ".join(f"`{d}` ({scores[x]['lonely_best'][d][0]:.2f})" for d in lonely[:10])
            print(f"\n{x}: removals with no true near-duplicate (best reference Jaccard), first 10: {shown}")
    if "trajforge" in scores and "datatrove" in scores:
        tf, dt = scores["trajforge"], scores["datatrove"]
        ratio = statistics.median(runs["trajforge"]) / statistics.median(runs["datatrove"])
        goal_t = 0.5 if n <= 20_000 else 0.2
        named = tf.get("partners_named", 0)
        goals = [
            (f"planted recall >= datatrove's ({tf['recall']:.3f} vs {dt['recall']:.3f})", tf["recall"] >= dt["recall"]),
            (
                f"removals with no true near-duplicate <= 0.3% of documents ({pct(len(tf['lonely']), n)})",
                len(tf["lonely"]) <= 0.003 * n,
            ),
            (
                f"every removal names a partner ({named} / {tf['removed']}) and >= 97% are true "
                f"({pct(tf.get('partners_true', 0), named)})",
                named == tf["removed"] and tf.get("partners_true", 0) >= 0.97 * max(1, named),
            ),
            (
                f"hard negatives removed <= 1% ({pct(tf['negatives'], len(corpus.negatives))})",
                tf["negatives"] <= 0.01 * len(corpus.negatives),
            ),
            (f"time <= {goal_t}x datatrove's at {n:,} documents ({ratio:.2f}x)", ratio <= goal_t),
        ]
        print("\nGoals (issue 24):\n")
        for text, ok in goals:
            print(f"- {'met' if ok else 'MISSED'}: {text}")


def main_real(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    corpus = build_corpus(args.documents, args.seed)
    built = time.perf_counter() - t0
    scorer = Scorer(corpus, args.truth_threshold)
    summary = corpus_summary(corpus, scorer, built)
    log(summary)
    below = {
        k: sum(scorer.planted_j[c] < args.truth_threshold for c, (_, kk) in corpus.planted.items() if kk == k) for k in KINDS
    }
    if any(below.values()):
        log(f"planted copies below the truth threshold: {dict((k, v) for k, v in below.items() if v)}")
    systems = [s for s in args.systems.split(",") if s]
    tmp = Path(tempfile.mkdtemp(prefix="trajforge-neardup-"))
    runs: dict[str, list[float]] = {s: [] for s in systems}
    removed: dict[str, set[str]] = {}
    partners: dict[str, tuple[str, float]] | None = None
    try:
        write_corpus(corpus, tmp / "docs")
        workers = os.cpu_count() or 1
        for r in range(args.repeats):
            for name in systems if r % 2 == 0 else systems[::-1]:
                if name == "trajforge":
                    seconds, partners = run_trajforge(tmp / "docs", args.runner)
                    removed[name] = set(partners)
                else:
                    seconds, removed[name] = run_datatrove(tmp / "docs", workers, args.datatrove_python)
                runs[name].append(seconds)
                log(f"  {name} run {r + 1}: {seconds:.1f} s, {len(removed[name])} removed")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    scores = {name: scorer.score(removed[name], partners if name == "trajforge" else None) for name in systems}
    report(args, corpus, scorer, runs, scores, summary)


# --- shingling study ---------------------------------------------------------------------------

SHINGLINGS = [("word", 1), ("word", 2), ("word", 3), ("word", 4), ("word", 5), ("char", 5), ("char", 7), ("char", 9)]
CANDIDATES = (0.6, 0.65, 0.7, 0.75, 0.8)


def family_pairs(corpus: Corpus) -> list[tuple[int, list[int]]]:
    """Each family document with the family's documents from its other pages (distinct pages)."""
    index = {d: i for i, d in enumerate(corpus.ids)}
    members: dict[str, list[str]] = defaultdict(list)
    for d, fam in corpus.family.items():
        members[fam].append(d)
    out = []
    for docs in members.values():
        for d in docs:
            others = [index[o] for o in docs if corpus.page[o] != corpus.page[d]]
            if others:
                out.append((index[d], others))
    return out


def main_study(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    corpus = build_corpus(args.documents, args.seed)
    log(f"corpus: {len(corpus.ids):,} documents in {time.perf_counter() - t0:.1f} s")
    index = {d: i for i, d in enumerate(corpus.ids)}
    fam = family_pairs(corpus)
    # a whitespace-collapsed text: layout never counts (the layout-blind normalisation)
    texts = [" ".join(t.split()) for t in corpus.texts]
    rows = []
    for kind_name, n in SHINGLINGS:
        sh = Shingles(texts, kind_name, n)
        planted: dict[str, np.ndarray] = {}
        for kind in KINDS:
            cps = [c for c, (_, k) in corpus.planted.items() if k == kind]
            planted[kind] = sh.pairs([index[c] for c in cps], [index[corpus.planted[c][0]] for c in cps])
        neg = sh.pairs([index[c] for c in corpus.negatives], [index[s] for s in corpus.negatives.values()])
        fj = np.array([sh.pairs([d] * len(o), o).max() for d, o in fam]) if fam else np.zeros(1)
        allp = np.concatenate(list(planted.values()))
        margin = np.percentile(allp, 5) - max(np.percentile(neg, 99), np.percentile(fj, 99))
        margin_neg = np.percentile(allp, 5) - np.percentile(neg, 99)
        rows.append((f"{kind_name} {n}-grams", planted, neg, fj, allp, (margin, margin_neg)))
        log(f"  {kind_name} {n}-grams done ({time.perf_counter() - t0:.0f} s)")
    print(
        f"\n### Shingling study ({time.strftime('%Y-%m-%d')}, {len(corpus.ids):,} documents, seed {args.seed}, "
        f"{len(corpus.planted)} planted, {len(corpus.negatives)} hard negatives, {len(fam)} template-family pages)\n"
    )
    print(
        f"Command: `python benchmarks/neardup.py --study --documents {args.documents} --seed {args.seed}`. Exact "
        "Jaccard on the whitespace-collapsed text (char n-grams are UTF-8 byte n-grams). Family: each page of a "
        "template family with its most similar page of the same family (distinct pages).\n"
    )
    print("Planted copies against their source, 5th percentile / median:\n")
    print("| shingling | " + " | ".join(KINDS) + " |")
    print("|---|" + "---|" * len(KINDS))
    for name, planted, *_ in rows:
        cells = [f"{np.percentile(planted[k], 5):.2f} / {np.median(planted[k]):.2f}" for k in KINDS]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        "\nNegatives, margin, and per threshold: planted pairs below it / hard negatives at or above it / "
        "family pairs at or above it:\n"
    )
    head = " | ".join(f"at {c}" for c in CANDIDATES)
    print(f"| shingling | hard neg. max | hard neg. p95 | family p95 | family max | margin | margin, hard neg. only | {head} |")
    print("|---|---|---|---|---|---|---|" + "---|" * len(CANDIDATES))
    for name, _, neg, fj, allp, margin in rows:
        cells = [f"{int((allp < c).sum())} / {int((neg >= c).sum())} / {int((fj >= c).sum())}" for c in CANDIDATES]
        print(
            f"| {name} | {neg.max():.2f} | {np.percentile(neg, 95):.2f} | {np.percentile(fj, 95):.2f} "
            f"| {fj.max():.2f} | {margin[0]:+.2f} | {margin[1]:+.2f} | " + " | ".join(cells) + " |"
        )
    print(
        "\nMargin: 5th percentile of all planted pairs minus the larger 99th percentile of hard negatives and "
        "family pairs (positive: one threshold separates most of both). Family pairs at or above the truth "
        "threshold on word 5-grams are, by the reference, near-duplicates themselves (shared boilerplate chunks)."
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("real", "synthetic", "study"), default="real")
    ap.add_argument("--study", action="store_true", help="the shingling study (same as --mode study)")
    ap.add_argument("--documents", type=int, default=4000, help="real text: documents in the corpus")
    ap.add_argument("--truth-threshold", type=float, default=0.7, help="word 5-gram Jaccard of a true near-dup")
    ap.add_argument("--runner", default="auto", choices=("auto", "local", "beam"), help="trajforge's runner")
    ap.add_argument("--systems", default="trajforge,datatrove", help="comma-separated, in run order")
    ap.add_argument("--transitions", type=int, default=100_000, help="synthetic mode: transitions")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--datatrove-python", default=str(ROOT / ".venv-datatrove" / "bin" / "python"))
    args = ap.parse_args(argv)
    mode = "study" if args.study else args.mode
    {"real": main_real, "synthetic": main_synthetic, "study": main_study}[mode](args)


if __name__ == "__main__":
    main()
