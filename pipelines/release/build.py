"""``trajforge release create``: curated shards -> CPT/SFT/RL samples -> a versioned release.

Two Beam passes (same runner rules as curation), and no text ever crosses a shuffle:

1. ``BuildShardSamples``, per curated shard: its trajectories (the few that span shards,
   found beforehand from the id columns, are grouped by trajectory instead) -> samples
   of every enabled stage, each with its split, written to ``_work/<stage>/`` in shard
   order; counts and token histograms come back as small JSON files.
2. The driver sums the counts and plans the mixture (``pipelines.release.mixture``); then
   ``WriteReleaseFiles`` turns each run of consecutive shard files into
   ``data/<stage>/<split>-NNNNN-of-NNNNN.parquet`` (zstd), taking each train sample as
   many times as the plan says.

Then the data card, ``lineage.json`` and ``manifest.json`` (every file with sha256, rows,
bytes, tokens). The release is built beside its final folder and renamed into place: a
version that exists is kept when the new build is byte-identical and refused otherwise.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.release import mixture, simulated
from pipelines.release.config import SPLITS, MixtureConfig
from pipelines.store import Store, read_shard
from pipelines.store.fs import LOCAL
from pipelines.store.shards import file_sha256
from schemas.errors import ConfigError, StoreError

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
_META = [("domain", pa.string()), ("env_id", pa.string()), ("task_id", pa.string()), ("trajectory_id", pa.string()),
         ("curation_id", pa.string()), ("split", pa.string())]  # fmt: skip
SCHEMAS = {
    "cpt": pa.schema([("id", pa.string()), ("text", pa.string()), ("tokens", pa.int64()), ("part", pa.int32()),
                      ("parts", pa.int32()), ("first_turn", pa.int32()), ("last_turn", pa.int32()), *_META]),
    "sft": pa.schema([("id", pa.string()), ("prompt", MESSAGES), ("completion", MESSAGES), ("tokens", pa.int64()),
                      ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("history_turns", pa.int32()),
                      ("dropped_turns", pa.int32()), ("has_reasoning", pa.bool_()), ("step", pa.int32()),
                      ("total_turns", pa.int32()), ("transition_id", pa.string()), *_META]),
    "rl": pa.schema([("id", pa.string()), ("prompt", MESSAGES), ("ground_truth", pa.string()), ("format", pa.string()),
                     ("volatile_spans", pa.list_(pa.struct([("start", pa.int32()), ("end", pa.int32()), ("kind", pa.string())]))),
                     ("tokens", pa.int64()), ("history_turns", pa.int32()), ("dropped_turns", pa.int32()), ("step", pa.int32()),
                     ("total_turns", pa.int32()), ("transition_id", pa.string()), *_META]),
}  # fmt: skip
ROWS_PER_FILE = 100_000  # release files hold whole input shards, about this many rows
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def schema_hash(schema: pa.Schema) -> str:
    return hashlib.sha256(schema.to_string(show_schema_metadata=False).encode()).hexdigest()[:16]


def config_hash(cfg: MixtureConfig) -> str:
    body = cfg.model_dump(mode="json")
    body["tokenizer"] = Path(cfg.tokenizer).name  # where the file lies is not content
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def tokenizer_hash(path: str) -> str:
    from pipelines.release.tokens import load_tokenizer

    return hashlib.sha256(Path(load_tokenizer(path).path).read_bytes()).hexdigest()[:16]


@dataclass
class ReleaseReport:
    name: str
    version: str
    path: str
    samples: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> split -> rows
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    shortfall: dict[str, dict[str, float]] = field(default_factory=dict)
    identical: bool = False  # the version existed with exactly this content
    tokenizer: dict[str, Any] = field(default_factory=dict)  # what ship_tokenizer wrote (the card states it)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> length reason -> samples left out
    lengths: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> p50/p90/p99/max tokens per sample
    input_hash: str = ""  # what the release was built from (input_hash): an unchanged rerun answers without building

    def summary(self) -> str:
        lines = [f"release {self.name} {self.version} at {self.path}{' (already there, identical)' if self.identical else ''}"]
        for stage, splits in self.samples.items():
            parts = ", ".join(f"{s} {splits.get(s, 0):,} samples / {self.tokens[stage].get(s, 0):,} tokens" for s in SPLITS)
            lines.append(f"  {stage}: {parts}")
        for stage, lacks in self.shortfall.items():
            for domain, n in lacks.items():
                lines.append(f"  shortfall: {stage} {domain} lacks {n:,.0f} tokens of its target")
        for stage, reasons in self.dropped.items():
            if reasons:
                parts = ", ".join(f"{n:,} {reason}" for reason, n in sorted(reasons.items()))
                lines.append(f"  dropped for length: {stage} {parts} (over max_tokens)")
        return "\n".join(lines)


# -- inputs --------------------------------------------------------------------------------------
def curations(store: Store, cfg: MixtureConfig) -> list[str]:
    sfs = store.sfs
    done = sorted(i.base_name for i in sfs.listdir(sfs.join("curated"))
                  if i.type.name == "Directory" and sfs.exists(f"{i.path}/report.json"))  # fmt: skip
    if not done:
        raise ConfigError(f"{store.uri}: no finished curation to release: run trajforge curate first")
    if cfg.curations == "all":
        return done
    for cid in cfg.curations:
        if cid not in done:
            raise ConfigError(f"curations: {cid!r} is not a finished curation in {store.uri} (have: {', '.join(done)})")
    return list(cfg.curations)


def input_shards(store: Store, cids: list[str], digests: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(curation id, shard path) of every curated shard, in a stable order; ``digests`` gets
    each shard's sha256 (its manifest's, checked on reading)."""
    shards = [s for s in store.readable_shards("curated") if s.run.run_id in cids]
    if digests is not None:
        digests.update({s.path: s.entry.sha256 for s in shards})
    return sorted((s.run.run_id, s.path) for s in shards)


INPUTS = "trajforge.release-inputs/1"


def _code_sha256() -> str:
    """The source of the code that decides a release's content (sample layouts, records)."""
    h = hashlib.sha256()
    for package in ("pipelines/release", "schemas"):
        for path in sorted(Path(__file__).resolve().parents[2].joinpath(package).glob("*.py")):
            h.update(f"{package}/{path.name}\x00".encode() + path.read_bytes() + b"\x00")
    return h.hexdigest()


def input_hash(store: Store, cfg: MixtureConfig, cids: list[str], shards: list[tuple[str, str]], digests: dict[str, str],
               name: str, version: str, rows_per_file: int) -> str:  # fmt: skip
    """A hash of everything a release is built from: the curations' shards (their manifests'
    sha256), attributes and indexes and what the release reads of their reports (not their
    timings), the distillation files read, the mixture config, the tokenizer, the code and
    library versions. Paths are relative to the store, so the same
    inputs in another store hash the same. Reads no shard (only the small files are hashed)."""
    sfs = store.sfs
    from pipelines.release.distill import distill_path

    def sha(path: str) -> str | None:
        return file_sha256(sfs, path) if sfs.exists(path) else None

    def report(cid: str) -> dict[str, Any]:  # the parts a release reads (the card, the lineage): not its timings
        body = json.loads(sfs.read_bytes(sfs.join("curated", cid, "report.json")))
        return {k: body.get(k) for k in ("config", "kept", "rejected", "by_reason")}

    curated = {cid: {"report": report(cid),
                     "attributes": sha(sfs.join("curated", cid, "attributes.parquet")),
                     "index": sha(sfs.join("curated", "_index", f"{cid}.json"))} for cid in cids}  # fmt: skip
    body = {
        "format": INPUTS,
        "release": [name, version, rows_per_file],
        "config": json.loads(json.dumps(cfg.model_dump(mode="json") | {"tokenizer": Path(cfg.tokenizer).name})),
        "tokenizer": tokenizer_hash(cfg.tokenizer),
        "curations": curated,
        "shards": [[cid, sfs.rel(path), digests.get(path), sha(distill_path(store, path))] for cid, path in shards],
        "code": [_code_sha256(), _versions()],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def unchanged_release(store: Store, final: str, key: str, report: ReleaseReport) -> ReleaseReport | None:
    """The report of the release at ``final`` when it was built from exactly these inputs
    (its manifest's ``input_hash`` is ``key`` and its folder holds the listed files), else None."""
    from pipelines.release.manifest import open_release
    from schemas.errors import TrajforgeError

    if not store.sfs.exists(f"{final}/manifest.json"):
        return None
    try:
        manifest = open_release(store.sfs.uri(final)).manifest
    except TrajforgeError:
        return None  # damaged: build, and let the comparison of manifests decide
    extra = manifest.model_extra or {}
    if extra.get("input_hash") != key:
        return None
    for f in manifest.files:
        if f.stage and f.split:
            report.samples.setdefault(f.stage, {}).setdefault(f.split, 0)
            report.samples[f.stage][f.split] += f.rows or 0
            report.tokens.setdefault(f.stage, {}).setdefault(f.split, 0)
            report.tokens[f.stage][f.split] += f.tokens or 0
    plan = extra.get("plan") or {}
    report.shortfall = {st: p["shortfall"] for st, p in plan.items() if isinstance(p, dict) and p.get("shortfall")}
    report.dropped = extra.get("dropped_for_length") or {}
    report.lengths = extra.get("lengths") or {}
    report.input_hash, report.identical = key, True
    return report


def split_trajectories(store: Store, shards: list[tuple[str, str]]) -> set[str]:
    """Trajectories whose rows are not one contiguous run of one shard (rare: a writer
    rolled mid-run, or interleaved writers): these are grouped by trajectory in Beam, all
    others are built while a shard streams by."""
    seen: dict[str, int] = {}
    spanning = set()
    from pipelines.store.shards import read_column

    for i, (_, path) in enumerate(shards):
        previous = None
        for t in read_column(store.sfs, path, "trajectory_id").to_pylist():
            if t != previous:
                if t in seen:  # a second run of rows: another shard, or later in this one
                    spanning.add(t)
                seen[t] = i
                previous = t
    return spanning


# -- pass 1: samples per shard -------------------------------------------------------------------
class Stats:
    """Per (stage, split, domain): samples and tokens; per
    (stage, reason): samples dropped for length; per licence: trajectories that name it."""

    def __init__(self) -> None:
        self.rows: Counter = Counter()
        self.tokens: Counter = Counter()
        self.dropped: Counter = Counter()
        self.licenses: Counter = Counter()

    def add(self, stage: str, sample: dict[str, Any]) -> None:
        key = f"{stage}|{sample['split']}|{sample['domain']}"
        self.rows[key] += 1
        self.tokens[key] += sample["tokens"]

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "tokens": self.tokens, "dropped": self.dropped, "licenses": self.licenses}  # fmt: skip

    def merge(self, other: dict[str, Any]) -> None:
        self.rows.update(other["rows"])
        self.tokens.update(other["tokens"])
        self.dropped.update(other.get("dropped", {}))
        self.licenses.update(other.get("licenses", {}))

    def drops(self) -> dict[str, dict[str, int]]:
        """{stage: {reason: samples}} dropped for length."""
        out: dict[str, dict[str, int]] = {}
        for key, n in sorted(self.dropped.items()):
            stage, reason = key.split("|")
            out.setdefault(stage, {})[reason] = n
        return out

    def by(self, what: str, stage: str, split: str | None = None) -> dict[str, int]:
        """{domain: rows or tokens} of a stage (and split)."""
        out: Counter = Counter()
        for key, n in (self.rows if what == "rows" else self.tokens).items():
            st, sp, domain = key.split("|")
            if st == stage and (split is None or sp == split):
                out[domain] += n
        return dict(sorted(out.items()))


def _trajectories(transitions, excluded: set[str], reasoning: dict[str, str], cid: str):
    from pipelines.release.samples import Trajectory

    by_traj: dict[str, list] = {}
    for t in transitions:
        by_traj.setdefault(t.trajectory_id, []).append(t)
    for steps in by_traj.values():
        steps.sort(key=lambda t: t.step)
        yield Trajectory(steps, frozenset(t.transition_id for t in steps if t.transition_id in excluded), cid, reasoning)


def source_license(traj) -> str | None:
    """The licence a trajectory's source names (``provenance.extra`` ``{"license": ...}``, which
    converters of imported data set), or None."""
    try:
        extra = json.loads(traj.first.provenance.extra or "{}")
    except json.JSONDecodeError:
        return None
    value = extra.get("license") if isinstance(extra, dict) else None
    return value.strip().lower() if isinstance(value, str) and value.strip() else None


def samples_of(traj, tokens, cfg: MixtureConfig, stats: Stats | None = None) -> dict[str, list[dict[str, Any]]]:
    from pipelines.release.samples import build_samples

    split = mixture.split_of(cfg, traj.first.domain, traj.first.env_id, traj.first.task_id)
    if not simulated.keeps(cfg, traj):  # simulated trajectories: excluded unless the mixture says otherwise
        return {}
    drops: dict[str, Counter] = {}
    out = build_samples(traj, tokens, cfg, drops)
    if stats is not None:
        stats.licenses[source_license(traj) or "unspecified"] += 1
        stats.dropped.update({f"{stage}|{reason}": n for stage, c in drops.items() for reason, n in c.items()})
    for items in out.values():
        for s in items:
            s["split"] = split
    return out


class SampleWriter:
    """Samples of one input shard, appended stage by stage to ``<work>/<stage>/<name>.parquet``
    in row groups, so a shard's samples never sit in memory whole."""

    def __init__(self, folder: Path, name: str, stats: Stats, rows_per_group: int = 2000) -> None:
        self.folder, self.name, self.stats, self.rows_per_group = folder, name, stats, rows_per_group
        self.buffers: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.writers: dict[str, pq.ParquetWriter] = {}

    def add(self, samples: dict[str, list[dict[str, Any]]]) -> None:
        for stage, items in samples.items():
            for s in items:
                self.stats.add(stage, s)
            self.buffers[stage].extend(items)
            if len(self.buffers[stage]) >= self.rows_per_group:
                self._flush(stage)

    def _flush(self, stage: str) -> None:
        if stage not in self.writers:
            (self.folder / stage).mkdir(parents=True, exist_ok=True)
            path = self.folder / stage / f"{self.name}.parquet"
            self.writers[stage] = pq.ParquetWriter(path, SCHEMAS[stage], compression="zstd")
        self.writers[stage].write_table(pa.Table.from_pylist(self.buffers[stage], schema=SCHEMAS[stage]))
        self.buffers[stage] = []

    def close(self) -> None:
        for stage in list(self.buffers):
            if self.buffers[stage] or stage not in self.writers:
                self._flush(stage)
        for w in self.writers.values():
            w.close()
        Path(self.folder, f"stats-{self.name}.json").write_text(json.dumps(self.stats.to_json(), sort_keys=True))


def excluded_ids(store: str, cid: str) -> set[str]:
    sfs = Store(store).sfs
    table = pq.read_table(sfs.join("curated", cid, "attributes.parquet"), columns=["transition_id"], filesystem=sfs.fs,
                          filters=[("exclude_as_target", "=", True), ("status", "=", "kept")])  # fmt: skip
    return set(table.column("transition_id").to_pylist())


def reasoning_for(store: str, shard_path: str) -> dict[str, str]:
    """Reasoning texts a distillation job wrote for a curated shard (``trajforge distill``)."""
    from pipelines.release.distill import distill_path

    sfs = Store(store).sfs
    path = distill_path(Store(store), shard_path)
    if not sfs.exists(path):
        return {}
    table = pq.read_table(path, columns=["transition_id", "reasoning"], filesystem=sfs.fs)
    return dict(zip(table.column("transition_id").to_pylist(), table.column("reasoning").to_pylist(), strict=True))


# -- the two Beam passes -------------------------------------------------------------------------
def _beam():
    import apache_beam as beam

    class BuildShardSamples(beam.DoFn):
        def __init__(self, store: str, config: dict[str, Any], work: str, spanning: set[str]) -> None:
            self.store, self.config, self.work, self.spanning = store, config, work, spanning

        def setup(self) -> None:
            from pipelines.release.tokens import PieceCounts, load_tokenizer

            self.cfg = MixtureConfig.model_validate(self.config)
            self.tokens = PieceCounts(load_tokenizer(self.cfg.tokenizer))
            self.excluded: dict[str, set[str]] = {}

        def _excluded(self, cid: str) -> set[str]:
            if cid not in self.excluded:
                self.excluded[cid] = excluded_ids(self.store, cid)
            return self.excluded[cid]

        def process(self, item):
            from schemas.arrow import from_record_batch

            index, (cid, path) = item
            excluded, reasoning = self._excluded(cid), reasoning_for(self.store, path)
            out = SampleWriter(Path(self.work), f"{index:06d}", Stats())
            pending: list = []

            def flush() -> None:
                for traj in _trajectories(pending, excluded, reasoning, cid):
                    out.add(samples_of(traj, self.tokens, self.cfg, out.stats))
                pending.clear()

            for batch in read_shard(Store(self.store).sfs, path):
                for t in from_record_batch(batch):
                    if t.trajectory_id in self.spanning:
                        yield t.trajectory_id, (cid, path, t)
                        continue
                    if pending and pending[-1].trajectory_id != t.trajectory_id:
                        flush()
                    pending.append(t)
            flush()
            out.close()

    class BuildSpanning(beam.DoFn):
        """A trajectory whose steps span shards, grouped by trajectory: its own sample files."""

        def __init__(self, store: str, config: dict[str, Any], work: str) -> None:
            self.store, self.config, self.work = store, config, work

        def setup(self) -> None:
            from pipelines.release.tokens import PieceCounts, load_tokenizer

            self.cfg = MixtureConfig.model_validate(self.config)
            self.tokens = PieceCounts(load_tokenizer(self.cfg.tokenizer))

        def process(self, item):
            traj_id, members = item
            members = sorted(members, key=lambda m: m[2].step)
            cid = members[0][0]
            reasoning: dict[str, str] = {}
            for path in sorted({m[1] for m in members}):
                reasoning.update(reasoning_for(self.store, path))
            (traj,) = _trajectories([m[2] for m in members], excluded_ids(self.store, cid), reasoning, cid)
            name = "z" + hashlib.blake2b(traj_id.encode(), digest_size=8).hexdigest()  # after the shard files
            out = SampleWriter(Path(self.work), name, Stats())
            out.add(samples_of(traj, self.tokens, self.cfg, out.stats))
            out.close()
            yield name

    class WriteReleaseFiles(beam.DoFn):
        def __init__(self, config: dict[str, Any], plans: dict[str, dict[str, float]], out: str) -> None:
            self.config, self.plans, self.out = config, plans, out

        def process(self, spec):
            cfg = MixtureConfig.model_validate(self.config)
            stage, k, n, parts = spec
            mult = self.plans.get(stage, {})
            writers = {}
            for split in SPLITS:
                dest = Path(self.out, "data", stage, f"{split}-{k:05d}-of-{n:05d}.parquet")
                dest.parent.mkdir(parents=True, exist_ok=True)
                writers[split] = pq.ParquetWriter(dest, SCHEMAS[stage], compression="zstd")
            for part in parts:  # row group by row group: a file's samples never sit in memory whole
                for batch in pq.ParquetFile(part).iter_batches(batch_size=2000):
                    for split in SPLITS:
                        rows = batch.filter(pc.equal(batch.column("split"), split))
                        if split == "train" and rows.num_rows:
                            ids, domains = rows.column("id").to_pylist(), rows.column("domain").to_pylist()
                            take = [i for i, (sid, d) in enumerate(zip(ids, domains, strict=True))
                                    for _ in range(mixture.copies(cfg, stage, sid, mult.get(d, 0.0)))]  # fmt: skip
                            rows = rows.take(pa.array(take, pa.int64()))
                        if rows.num_rows:
                            writers[split].write_batch(rows)
            for split, w in writers.items():
                w.close()
                yield f"{stage}/{split}-{k:05d}"

    return beam, BuildShardSamples, BuildSpanning, WriteReleaseFiles


def _file_specs(work: Path, stage: str, rows_per_file: int) -> list[tuple[str, int, int, list[str]]]:
    """Consecutive sample files of a stage grouped into release files of about ``rows_per_file``."""
    parts = sorted(glob.glob(str(work / stage / "*.parquet")))
    groups: list[list[str]] = []
    size = 0
    for p in parts:
        rows = pq.ParquetFile(p).metadata.num_rows
        if not groups or (size + rows > rows_per_file and size > 0):
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += rows
    groups = groups or [[]]
    return [(stage, k, len(groups), g) for k, g in enumerate(groups)]


def create_release(cfg: MixtureConfig, store_uri: str, name: str, version: str, *, beam_args: list[str] | None = None,
                   log=print, rows_per_file: int = ROWS_PER_FILE) -> ReleaseReport:  # fmt: skip
    from pipelines.beam_options import beam_options
    from pipelines.progress import files_done, parquet_done, watch
    from pipelines.release import card
    from pipelines.release.tokens import load_tokenizer, ship_tokenizer

    if not _NAME.match(name) or not _NAME.match(version):
        bad = name if not _NAME.match(name) else version
        raise ConfigError(f"release name and version must be letters, digits, '.', '_' or '-': {bad!r}")
    load_tokenizer(cfg.tokenizer)  # a tokenizer that cannot load stops us before any work
    store = Store(store_uri)
    cids = curations(store, cfg)
    digests: dict[str, str] = {}
    shards = input_shards(store, cids, digests)
    key = input_hash(store, cfg, cids, shards, digests, name, version, rows_per_file)
    final = store.sfs.join("releases", name, version)
    if (done := unchanged_release(store, final, key, ReleaseReport(name, version, store.sfs.uri(final)))) is not None:
        return done  # built from exactly these inputs already: nothing to do
    cfg = simulated.resolve(cfg, store, shards)  # use: cap counts simulated trajectories once
    releases = Path(store.sfs.local_path(store.sfs.join("releases", name)))  # object stores: built locally
    tmp = releases / f".{version}.building"
    shutil.rmtree(tmp, ignore_errors=True)
    work = tmp / "_work"
    work.mkdir(parents=True)
    config = cfg.model_dump(mode="json")
    beam, BuildShardSamples, BuildSpanning, WriteReleaseFiles = _beam()

    spanning = split_trajectories(store, shards)
    log(f"release {name} {version}: samples from {len(shards)} curated shards of {len(cids)} curations")
    with watch("release samples", len(shards), files_done(str(work / "stats-[0-9]*.json")), unit="shards"), \
            beam.Pipeline(options=beam_options(beam_args)) as p:  # fmt: skip
        away = (
            p
            | "Shards" >> beam.Create(list(enumerate(shards)))
            | "Reshuffle" >> beam.Reshuffle()
            | "BuildShardSamples" >> beam.ParDo(BuildShardSamples(store_uri, config, str(work), spanning))
        )
        spanning_samples = BuildSpanning(store_uri, config, str(work))
        _ = away | "ByTrajectory" >> beam.GroupByKey() | "BuildSpanning" >> beam.ParDo(spanning_samples)
    stats = Stats()
    for path in sorted(glob.glob(str(work / "stats-*.json"))):
        stats.merge(json.loads(Path(path).read_text()))
    plans = mixture.plan(cfg, {st: stats.by("tokens", st, "train") for st in cfg.enabled()})

    log(f"release {name} {version}: writing the mixture")
    specs = [spec for st in cfg.enabled() for spec in _file_specs(work, st, rows_per_file)]
    with watch("release files", len(specs) * len(SPLITS), parquet_done(str(tmp / "data" / "*" / "*.parquet")), unit="files"), \
            beam.Pipeline(options=beam_options(beam_args)) as p:  # fmt: skip
        _ = (
            p
            | "Files" >> beam.Create(specs)
            | "Reshuffle" >> beam.Reshuffle()
            | "Write" >> beam.ParDo(WriteReleaseFiles(config, {st: pl.multiplier for st, pl in plans.items()}, str(tmp)))
        )
    shutil.rmtree(work)

    report = ReleaseReport(name, version, store.sfs.uri(store.sfs.join("releases", name, version)))
    files = data_files(tmp)
    for f in files:
        report.samples.setdefault(f["stage"], {}).setdefault(f["split"], 0)
        report.samples[f["stage"]][f["split"]] += f["rows"]
        report.tokens.setdefault(f["stage"], {}).setdefault(f["split"], 0)
        report.tokens[f["stage"]][f["split"]] += f["tokens"]
    report.shortfall = {st: pl.shortfall for st, pl in plans.items() if pl.shortfall}
    report.dropped, report.input_hash = stats.drops(), key
    report.lengths = {stage: length_summary(n) for stage, n in token_lengths(tmp).items()}
    lineage = lineage_of(store, cids, name, version)
    (tmp / "lineage.json").write_text(json.dumps(lineage, indent=1, sort_keys=True) + "\n")
    report.tokenizer = ship_tokenizer(cfg.tokenizer, tmp)
    card.write_card(tmp, cfg, name, version, report, stats, plans, store, cids)
    manifest = build_manifest(tmp, cfg, name, version, cids, lineage, plans, report)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    return _put_in_place(store, tmp, store.sfs.join("releases", name, version), report)


def _content(manifest: bytes) -> Any:
    """A manifest without its ``input_hash``: inputs that changed without changing the content
    (a reformatted report, another library version) give the same release."""
    try:
        body = json.loads(manifest)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return manifest
    if isinstance(body, dict):
        body.pop("input_hash", None)
    return body


def _put_in_place(store: Store, tmp: Path, final: str, report: ReleaseReport) -> ReleaseReport:
    """Move the built release to its final place: a rename on local disk; on an object
    store every file uploaded as one object, ``manifest.json`` last (a release exists once
    its manifest does: a kill mid-upload leaves no release, and the rerun uploads it
    again). A version that exists is kept if identical, refused otherwise."""
    sfs = store.sfs
    old = f"{final}/manifest.json"
    if sfs.exists(final if sfs.local else old):
        same = sfs.exists(old) and _content(sfs.read_bytes(old)) == _content((tmp / "manifest.json").read_bytes())
        shutil.rmtree(tmp)
        if not same:
            raise StoreError(f"{sfs.uri(final)}: release {report.name} {report.version} exists with other content: "
                             "releases are immutable, give this one a new version")  # fmt: skip
        report.identical = True
        return report
    if sfs.local:
        os.rename(tmp, final)
        return report
    sfs.rmtree(final)  # objects of an upload that was killed before its manifest
    files = sorted(p for p in tmp.rglob("*") if p.is_file() and p.name != "manifest.json")
    for path in [*files, tmp / "manifest.json"]:
        sfs.publish(str(path), f"{final}/{path.relative_to(tmp).as_posix()}")
    shutil.rmtree(tmp)
    return report


def data_files(root: Path) -> list[dict[str, Any]]:
    """Every data file of a release: stage, split, rows, tokens."""
    out = []
    for path in sorted(root.glob("data/*/*.parquet")):
        table = pq.read_table(path, columns=["tokens"])
        out.append({"path": str(path.relative_to(root)), "stage": path.parent.name, "split": path.name.split("-")[0],
                    "rows": table.num_rows, "tokens": int(pc.sum(table.column("tokens")).as_py() or 0)})  # fmt: skip
    return out


def token_lengths(root: Path) -> dict[str, Any]:
    """Tokens per sample of each stage (numpy arrays), over the release's files: every split,
    train samples as often as the mixture takes them."""
    import numpy as np

    parts: dict[str, list] = {}
    for path in sorted(root.glob("data/*/*.parquet")):
        parts.setdefault(path.parent.name, []).append(pq.read_table(path, columns=["tokens"]).column("tokens").to_numpy())
    return {stage: np.concatenate(chunks) for stage, chunks in parts.items()}


def length_summary(tokens) -> dict[str, int]:
    """Samples, p50, p90, p99 and max tokens per sample (nearest rank, so each is a real length)."""
    import numpy as np

    if not len(tokens):
        return {"samples": 0}
    q = {f"p{p}": int(np.percentile(tokens, p, method="higher")) for p in (50, 90, 99)}
    return {"samples": len(tokens), **q, "max": int(tokens.max())}


def lineage_of(store: Store, cids: list[str], name: str, version: str) -> dict[str, Any]:
    """raw runs -> curations -> this release."""
    curated = {}
    for cid in cids:
        sfs = store.sfs
        index = sfs.join("curated", "_index", f"{cid}.json")
        inputs = json.loads(sfs.read_bytes(index))["inputs"] if sfs.exists(index) else []
        report = json.loads(sfs.read_bytes(sfs.join("curated", cid, "report.json")))
        runs = sorted({os.path.dirname(rel) for rel in inputs})
        curated[cid] = {"config": report.get("config"), "raw_runs": runs, "raw_shards": inputs,
                        "kept": report.get("kept"), "rejected": report.get("rejected")}  # fmt: skip
    return {"format": "trajforge.lineage/1", "release": {"name": name, "version": version}, "curations": curated}


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for pkg in ("trajforge", "pyarrow", "apache-beam", "tokenizers", "numpy", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def build_manifest(root: Path, cfg: MixtureConfig, name: str, version: str, cids: list[str], lineage: dict[str, Any],
                   plans: dict[str, mixture.StagePlan], report: ReleaseReport | None = None) -> dict[str, Any]:  # fmt: skip
    tokens = {f["path"]: f for f in data_files(root)}
    files = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"):
        rel = str(path.relative_to(root))
        entry = {"path": rel, "sha256": file_sha256(LOCAL, str(path)), "bytes": path.stat().st_size}
        if rel in tokens:
            entry.update(rows=tokens[rel]["rows"], tokens=tokens[rel]["tokens"], stage=tokens[rel]["stage"],
                         split=tokens[rel]["split"])  # fmt: skip
        files.append(entry)
    versions = _versions()
    return {
        "format": "trajforge.release/1",
        "name": name,
        "version": version,
        "files": files,
        "schemas": {stage: schema_hash(SCHEMAS[stage]) for stage in cfg.enabled()},
        "config": cfg.model_dump(mode="json") | {"tokenizer": Path(cfg.tokenizer).name},
        "config_hash": config_hash(cfg),
        "tokenizer_sha256": tokenizer_hash(cfg.tokenizer),
        "curations": cids,
        "source_runs": sorted({run for c in lineage["curations"].values() for run in c["raw_runs"]}),
        "code_version": versions.pop("trajforge"),
        "libraries": versions,
        "seed": cfg.seed,
        "plan": {stage: asdict(p) for stage, p in plans.items()},
    } | ({"input_hash": report.input_hash, "dropped_for_length": report.dropped, "lengths": report.lengths} if report else {})
