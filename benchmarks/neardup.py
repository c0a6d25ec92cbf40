"""Near-duplicate removal side by side: trajforge's MinHash stage against datatrove's.

    python benchmarks/neardup.py [--transitions 100000] [--repeats 3] [--datatrove-python PY]

Both get the same documents, one per synthetic trajectory (its masked, normalised step
texts, as trajforge's stage sees them), with 5% exact and 5% near copies planted, in two
JSONL files, and the same two worker processes:

- trajforge: the curation's own near-duplicate code on Beam's in-process runner in
  multi-process mode: shingles (byte 5-grams for terminal/code, word 3-grams for prose
  domains) and datasketch-affine64 MinHash in worker batches, 16 bands x 8 rows, band keys
  grouped, candidate pairs confirmed at estimated Jaccard 0.8, connected components in Beam.
- datatrove (installed for this benchmark only, in its own virtual environment: the
  Makefile's ``bench-neardup`` makes it): its four MinHash steps with its defaults
  (word 5-grams after its text normalisation, its English word tokenizer, 64-bit xxhash,
  14 buckets x 8 hashes) on ``LocalPipelineExecutor`` with 2 workers.

Scored against the planted copies: a group is a source trajectory and its copies; a
removal counts as found while a group has removals left to make (size - 1), anything
else is a false positive. Reports the median seconds of ``--repeats`` runs of each
(alternating), documents/s per core, precision and recall.
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
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


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


def run_trajforge(folder: Path, workers: int) -> tuple[float, set[str]]:
    code = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT)!r})
t0 = time.perf_counter()
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from pipelines.curate.beam import NearDuplicates
from pipelines.curate.config import CurationConfig
from pipelines.curate import minhash

nd = CurationConfig().near_dedup

def signatures(path):
    docs = [json.loads(line) for line in open(path)]
    for start in range(0, len(docs), 256):
        chunk = docs[start:start + 256]
        shingles = [minhash.distinct(minhash.shingles(d["text"], words=d["domain"] in nd.word_domains,
                    n=nd.word_ngram if d["domain"] in nd.word_domains else nd.char_ngram)) for d in chunk]
        for d, sig in zip(chunk, minhash.hasher(nd.num_perm).signatures(shingles)):
            yield d["id"], sig.tobytes()  # (node, signature): the smallest id labels a cluster

opts = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers={workers}"])
with beam.Pipeline(options=opts) as p:
    labels = (p | beam.Create(sorted(str(f) for f in __import__("pathlib").Path({str(folder)!r}).glob("*.jsonl")))
              | beam.Reshuffle() | beam.FlatMap(signatures) | NearDuplicates(nd))
    (labels | beam.FlatMap(lambda kv: [kv[0]] if kv[0] != kv[1] else [])
            | beam.io.WriteToText({str(folder / "tf-removed")!r}))
print(json.dumps({{"seconds": time.perf_counter() - t0}}))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    seconds = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    removed = {line.strip() for f in folder.glob("tf-removed*") for line in f.read_text().splitlines() if line.strip()}
    for f in folder.glob("tf-removed*"):
        f.unlink()
    return seconds, removed


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transitions", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--datatrove-python", default=str(ROOT / ".venv-datatrove" / "bin" / "python"))
    args = ap.parse_args(argv)
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
                    seconds, removed[name] = run_trajforge(tmp / "docs", workers)
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


if __name__ == "__main__":
    main()
