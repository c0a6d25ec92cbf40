"""``trajforge curate CONFIG.yaml --store STORE [beam options]``: the curation driver.

1. Inputs: the finished raw shards not covered by an earlier curation (filtered by
   domain). The curation id is a content hash of the config and those shards (paths and
   sha256), so rerunning a finished curation is a no-op.
2. Pass 1, on Beam (``pipelines.curate.beam``): one decision per transition, written as
   JSON lines under ``curated/<id>/_work/``, plus summaries of the kept trajectories.
3. Pass 2, here: stream the inputs in their (sorted) order, scrub what is kept, and write
   ``curated/<id>/<domain>/`` and ``rejected/<id>/<domain>/`` shards with the same writer
   as collection, plus per-transition attributes (``attributes.parquet``: stage, reason,
   duplicate_of, cluster, flags) beside each tree. The same input and config give
   byte-identical output.
4. The kept trajectories' keys and signatures go into ``curated/_index/<id>.parquet``, so a
   later curation of new runs dedupes against everything curated before.

Beam runs on this machine with its portable in-process runner in multi-process mode
(the default runner otherwise fetches a binary at run time); ``--runner`` and any other
Beam options are passed through, so the same pipeline runs on Dataflow, Flink or Spark.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.curate.config import CurationConfig
from pipelines.curate.logic import scrub_transition
from pipelines.store import Store, StoreWriter, read_shard
from pipelines.store.fs import StoreFS
from schemas.arrow import from_record_batch

ATTRIBUTES = pa.schema(
    [
        ("transition_id", pa.string()), ("trajectory_id", pa.string()), ("domain", pa.string()),
        ("status", pa.string()), ("stage", pa.string()), ("reason", pa.string()), ("duplicate_of", pa.string()),
        ("cluster", pa.string()), ("flags", pa.list_(pa.string())), ("exclude_as_target", pa.bool_()),
    ]
)  # fmt: skip
INDEX = pa.schema([("traj", pa.string()), ("domain", pa.string()), ("order", pa.string()), ("key", pa.string()),
                   ("sig", pa.binary())])  # fmt: skip
STAGES = ("validate", "decontaminate", "quality", "exact_dedup", "near_dedup")


@dataclass
class CurationReport:
    curation_id: str
    config: str
    inputs: int = 0
    transitions_in: int = 0
    kept: int = 0
    rejected: int = 0
    by_stage: dict[str, int] = field(default_factory=dict)
    by_reason: dict[str, int] = field(default_factory=dict)
    by_domain: dict[str, dict[str, int]] = field(default_factory=dict)
    marked_duplicate_steps: int = 0
    flags: dict[str, int] = field(default_factory=dict)
    scrubbed: dict[str, int] = field(default_factory=dict)
    cluster_sizes: dict[str, int] = field(default_factory=dict)  # size -> clusters
    seconds: dict[str, float] = field(default_factory=dict)
    noop: bool = False

    def table(self) -> str:
        lines = [f"curation {self.curation_id}: {self.transitions_in} transitions in, {self.kept} kept, "
                 f"{self.rejected} rejected{' (already done)' if self.noop else ''}"]  # fmt: skip
        for stage in STAGES:
            if self.by_stage.get(stage):
                lines.append(f"  {stage:<14} dropped {self.by_stage[stage]}")
        for reason, n in sorted(self.by_reason.items(), key=lambda kv: -kv[1])[:10]:
            lines.append(f"    {n:>8}  {reason[:100]}")
        if self.marked_duplicate_steps:
            lines.append(f"  repeated steps marked (kept as history, not targets): {self.marked_duplicate_steps}")
        for what, counts in (("flags", self.flags), ("scrubbed", self.scrubbed)):
            if counts:
                lines.append(f"  {what}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if self.cluster_sizes:
            lines.append("  near-duplicate clusters by size: " + ", ".join(f"{k}: {v}" for k, v in sorted(
                self.cluster_sizes.items(), key=lambda kv: int(kv[0]))))  # fmt: skip
        lines.append("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items()))
        return "\n".join(lines)


def _curated_inputs(sfs: StoreFS) -> set[str]:
    done: set[str] = set()
    for path in glob.glob(os.path.join(sfs.join("curated", "_index"), "*.json")):
        done.update(json.loads(Path(path).read_text())["inputs"])
    return done


def plan_inputs(store: Store, cfg: CurationConfig) -> list[tuple[str, str, int, str]]:
    """(path relative to the store, sha256, rows, first collected_at) of the raw shards this
    curation takes."""
    done = _curated_inputs(store.sfs)
    picked = []
    for shard in store.readable_shards("raw"):
        if cfg.domains and shard.run.domain not in cfg.domains:
            continue
        rel = os.path.relpath(shard.path, store.sfs.root)
        if rel not in done:
            picked.append((rel, shard.entry.sha256, shard.entry.rows, shard.entry.min_collected_at or ""))
    return sorted(picked)


def pass_groups(inputs: list[tuple[str, str, int, str]], limit: int) -> list[list[int]]:
    """Input indices in groups of at most ``limit`` transitions, each group one bounded Beam
    pass. Run folders stay whole (a trajectory never spans two runs) and go in the order of
    their first transition, so what a pass keeps wins against later passes as the earliest
    copy should."""
    first: dict[str, str] = {}
    for rel, _, _, started in inputs:
        folder = os.path.dirname(rel)
        first[folder] = min(first.get(folder, started), started)
    groups: list[list[int]] = []
    size = 0
    for folder in sorted(first, key=lambda f: (first[f], f)):
        members = [i for i, item in enumerate(inputs) if os.path.dirname(item[0]) == folder]
        rows = sum(inputs[i][2] for i in members)
        if not groups or size + rows > limit:
            groups.append([])
            size = 0
        groups[-1].extend(members)
        size += rows
    return [sorted(g) for g in groups]


def curation_id(cfg: CurationConfig, inputs: list[tuple[str, str, int, str]]) -> str:
    body = json.dumps({"config": cfg.model_dump(mode="json"), "inputs": [i[:2] for i in inputs]}, sort_keys=True)
    return f"{cfg.name}-{hashlib.sha256(body.encode()).hexdigest()[:12]}"


def beam_options(beam_args: list[str] | None):
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(beam_args or [])
    if not any(a.startswith("--runner") for a in args):
        args += ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                 f"--direct_num_workers={os.cpu_count() or 1}"]  # fmt: skip
    return PipelineOptions(args)


def _as_previous(r: dict[str, Any]) -> dict[str, Any]:
    """A kept trajectory of an earlier curation or pass: rank 0, it always wins."""
    sig = r["sig"] if isinstance(r["sig"], bytes) else bytes.fromhex(r["sig"])
    return {"traj": r["traj"], "domain": r["domain"], "order": "0|" + r["order"].split("|", 1)[1], "key": r["key"],
            "sig": sig, "problem": None}  # fmt: skip


def _previous(sfs: StoreFS) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(glob.glob(os.path.join(sfs.join("curated", "_index"), "*.parquet"))):
        rows += [_as_previous(r) for r in pq.read_table(path).to_pylist()]
    return rows


def curate(cfg: CurationConfig, store_uri: str, *, beam_args: list[str] | None = None, log=print) -> CurationReport:
    import apache_beam as beam

    from pipelines.curate.beam import WriteDecisionFiles, build

    store = Store(store_uri)
    sfs = store.sfs
    inputs = plan_inputs(store, cfg)
    cid = curation_id(cfg, inputs)
    out_dir = Path(sfs.join("curated", cid))
    report_path = out_dir / "report.json"
    if report_path.exists():
        report = CurationReport(**json.loads(report_path.read_text()))
        report.noop = True
        return report
    if not inputs:  # everything is curated already: a rerun is a no-op
        return CurationReport(cid, cfg.name, noop=True)
    report = CurationReport(cid, cfg.name, inputs=len(inputs))
    work = out_dir / "_work"
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(Path(sfs.join("rejected", cid)), ignore_errors=True)
    work.mkdir(parents=True)
    config = cfg.model_dump(mode="json")
    paths = [sfs.join(item[0]) for item in inputs]

    t0 = time.monotonic()
    (work / "decisions").mkdir()
    previous = _previous(sfs)
    groups = pass_groups(inputs, cfg.max_transitions_per_pass)
    for g, group in enumerate(groups):
        log(f"curation {cid}: pass 1 (Beam) {g + 1}/{len(groups)} over {len(group)} shards")
        with beam.Pipeline(options=beam_options(beam_args)) as p:
            decisions, kept = build(p, {i: paths[i] for i in group}, store_uri, config, previous)
            decisions | "WriteDecisions" >> WriteDecisionFiles(str(work / "decisions"))
            kept | "KeptJson" >> beam.Map(to_json_summary) | "KeptText" >> beam.io.WriteToText(str(work / f"kept-{g:04d}"))
        # what this pass kept wins against later passes, as earlier curations do
        previous += [_as_previous(s) for s in _json_lines(work / f"kept-{g:04d}*")]
    report.seconds["pass1_beam"] = time.monotonic() - t0

    t1 = time.monotonic()
    log(f"curation {cid}: pass 2 (scrub and write), one input shard at a time")
    tally = _Tally()
    writers = {}
    for tree in ("curated", "rejected"):
        Path(sfs.join(tree, cid)).mkdir(parents=True, exist_ok=True)
        writers[tree] = pq.ParquetWriter(sfs.join(tree, cid, "attributes.parquet"), ATTRIBUTES, compression="zstd")
    with StoreWriter(sfs, cid, kind="curated") as kept_w, StoreWriter(sfs, cid, kind="rejected") as rej_w:
        for i, path in enumerate(paths):
            decision_file = work / "decisions" / f"{i:06d}.jsonl"
            decisions = {}
            rows: dict[str, list[dict]] = {"curated": [], "rejected": []}
            for d in _json_lines(decision_file) if decision_file.exists() else ():
                if d["tid"] is None or d["stage"] == "validate":  # quarantined: in the attributes only
                    rows["rejected"].append(_attribute(d))
                else:
                    decisions[d["tid"]] = d
            for batch in read_shard(sfs, path):
                for t in from_record_batch(batch):
                    report.transitions_in += 1
                    d = decisions.get(t.transition_id)
                    if d is None:
                        continue
                    if cfg.scrub.enabled:
                        t, counts = scrub_transition(t, cfg.scrub.kinds)
                        tally.scrubbed.update(counts)
                    tree = "curated" if d["status"] == "kept" else "rejected"
                    (kept_w if tree == "curated" else rej_w).write(t)
                    rows[tree].append(_attribute(d))
            for tree, items in rows.items():
                tally.add(tree, items)
                if items:
                    writers[tree].write_table(pa.Table.from_pylist(items, schema=ATTRIBUTES))
    for w in writers.values():
        w.close()
    report.seconds["pass2_write"] = time.monotonic() - t1
    tally.fill(report)
    index_dir = Path(sfs.join("curated", "_index"))
    index_dir.mkdir(parents=True, exist_ok=True)
    summaries = list(_json_lines(work / "kept*"))
    summaries.sort(key=lambda s: s["traj"])
    index_rows = [{**s, "sig": bytes.fromhex(s["sig"])} for s in summaries if s["order"].startswith("1|")]
    pq.write_table(pa.Table.from_pylist(index_rows, schema=INDEX), index_dir / f"{cid}.parquet", compression="zstd")
    (index_dir / f"{cid}.json").write_text(json.dumps({"inputs": [item[0] for item in inputs]}, indent=1))
    shutil.rmtree(work)
    report.seconds["total"] = time.monotonic() - t0
    report_path.write_text(json.dumps(asdict(report), indent=1, sort_keys=True))
    return report


def _json_lines(pattern: Path):
    for path in sorted(glob.glob(str(pattern))):
        with open(path) as f:
            yield from (json.loads(line) for line in f)


def to_json_summary(s: dict[str, Any]) -> str:
    return json.dumps({"traj": s["traj"], "domain": s["domain"], "order": s["order"], "key": s["key"],
                       "sig": s["sig"].hex()}, sort_keys=True)  # fmt: skip


def _attribute(d: dict[str, Any]) -> dict[str, Any]:
    flags = sorted(d.get("flags") or [])
    return {
        "transition_id": d["tid"], "trajectory_id": d["traj"], "domain": d["domain"], "status": d["status"],
        "stage": d["stage"], "reason": d["reason"], "duplicate_of": d.get("duplicate_of"), "cluster": d.get("cluster"),
        "flags": flags, "exclude_as_target": bool(d.get("duplicate_of")) or any(f.startswith("exclude:") for f in flags),
    }  # fmt: skip


class _Tally:
    """Report counters, filled one input shard at a time."""

    def __init__(self) -> None:
        self.kept = self.rejected = self.repeats = 0
        self.stage: Counter = Counter()
        self.reason: Counter = Counter()
        self.flags: Counter = Counter()
        self.scrubbed: Counter = Counter()
        self.domain: dict[str, dict[str, int]] = {}
        self.cluster_trajs: set[tuple[str, str]] = set()

    def add(self, tree: str, rows: list[dict]) -> None:
        for r in rows:
            d = self.domain.setdefault(r["domain"] or "?", {"kept": 0, "rejected": 0})
            if tree == "curated":
                self.kept += 1
                d["kept"] += 1
                self.repeats += bool(r["duplicate_of"])
            else:
                self.rejected += 1
                d["rejected"] += 1
                self.stage[r["stage"]] += 1
                self.reason[_reason_family(r["reason"] or "")] += 1
            self.flags.update(f.split(":")[-1] for f in r["flags"])
            if r["cluster"]:
                self.cluster_trajs.add((r["cluster"], r["trajectory_id"]))

    def fill(self, report: CurationReport) -> None:
        report.kept, report.rejected, report.marked_duplicate_steps = self.kept, self.rejected, self.repeats
        report.by_stage, report.by_reason, report.by_domain = dict(self.stage), dict(self.reason), self.domain
        report.flags, report.scrubbed = dict(self.flags), dict(self.scrubbed)
        sizes = Counter(Counter(c for c, _ in self.cluster_trajs).values())
        report.cluster_sizes = {str(k): v for k, v in sorted(sizes.items())}


def _reason_family(reason: str) -> str:
    """Group reasons that differ only in ids: 'exact duplicate of X' -> 'exact duplicate'."""
    for prefix in ("exact duplicate of", "near duplicate of", "task id", "repo "):
        if reason.startswith(prefix):
            return prefix.removesuffix(" of").strip()
    return reason
