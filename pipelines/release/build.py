"""``trajforge release create``: curated shards -> CPT/SFT/RL samples -> a versioned release.

``create_release`` runs the steps, each in its own module:

1. ``inputs``: the finished curations and their shards, and the input hash; a version
   already built from the same inputs answers at once (``publish.unchanged_release``).
2. ``graph.sample_pass`` (Beam), per curated shard: samples of every enabled stage, each
   with its split, in ``_work/<stage>/`` (``passes``); their counts (``stats.Stats``) come
   back as small JSON files. No text ever crosses a shuffle.
3. The driver sums the counts and plans the mixture (``mixture``); ``graph.file_pass``
   (Beam) turns each run of consecutive work files into
   ``data/<stage>/<split>-NNNNN-of-NNNNN.parquet`` (zstd), taking each train sample as
   many times as the plan says.
4. ``lineage.json``, the tokenizer (``tokens.ship_tokenizer``), the data card (``card``)
   and ``manifest.json`` (``lineage``: every file with sha256, rows, bytes, tokens).

The release is built beside its final folder and put in place by ``publish``: a version
that exists is kept when the new build is byte-identical and refused otherwise.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipelines.release import card, mixture, passes, simulated
from pipelines.release.config import MixtureConfig
from pipelines.release.inputs import curations, input_hash, input_shards, split_trajectories
from pipelines.release.layout import ROWS_PER_FILE, data_files, length_summary, token_lengths
from pipelines.release.lineage import build_manifest, lineage_of, write_json
from pipelines.release.manifest import NAME
from pipelines.release.mixture import StagePlan
from pipelines.release.publish import put_in_place, unchanged_release
from pipelines.release.stats import ReleaseReport, Stats
from pipelines.release.tokens import load_tokenizer, ship_tokenizer
from pipelines.store import Store
from schemas.errors import ConfigError

__all__ = ["ReleaseReport", "create_release"]


def create_release(
    cfg: MixtureConfig,
    store: Store | str,
    name: str,
    version: str,
    *,
    beam_args: list[str] | None = None,
    log=print,
    rows_per_file: int = ROWS_PER_FILE,
) -> ReleaseReport:
    """Build release ``name`` ``version`` of a store's curated data under the mixture ``cfg``
    (ConfigError for a bad name or a tokenizer that cannot load, before any work)."""
    for part in (name, version):
        if not NAME.match(part):
            raise ConfigError(f"release name and version must be letters, digits, '.', '_' or '-': {part!r}")
    load_tokenizer(cfg.tokenizer)  # a tokenizer that cannot load stops us before any work
    store = Store.open(store)
    cids = curations(store, cfg)
    digests: dict[str, str] = {}
    shards = input_shards(store, cids, digests)
    key = input_hash(store, cfg, cids, shards, digests, name, version, rows_per_file)
    final = store.layout.release_dir(name, version)
    if (done := unchanged_release(store, final, key, ReleaseReport(name, version, store.sfs.uri(final)))) is not None:
        return done  # built from exactly these inputs already: nothing to do
    from pipelines.release import graph  # Beam (the release extra): needed only to build, after the rerun check

    cfg = simulated.resolve(cfg, store, shards)  # caps (simulated: cap, provenance.max_share) count trajectories once
    releases = Path(store.sfs.local_path(store.layout.release_dir(name)))  # object stores: built locally
    tmp = releases / f".{version}.building"
    shutil.rmtree(tmp, ignore_errors=True)
    work = tmp / "_work"
    work.mkdir(parents=True)
    config = cfg.model_dump(mode="json")

    spanning = split_trajectories(store, shards)
    log(f"release {name} {version}: samples from {len(shards)} curated shards of {len(cids)} curations")
    graph.sample_pass(shards, store.uri, config, work, spanning, beam_args)
    stats = Stats()
    for path in sorted(work.glob("stats-*.json")):
        stats.merge(json.loads(path.read_text()))
    plans = mixture.plan(cfg, {st: stats.by("tokens", st, "train") for st in cfg.enabled()})

    log(f"release {name} {version}: writing the mixture")
    specs = [spec for st in cfg.enabled() for spec in passes.file_specs(work, st, rows_per_file)]
    graph.file_pass(specs, config, {st: pl.multiplier for st, pl in plans.items()}, tmp, beam_args)
    shutil.rmtree(work)

    report = ReleaseReport(name, version, store.sfs.uri(final), input_hash=key)
    _describe(tmp, store, cfg, cids, report, stats, plans)
    return put_in_place(store, tmp, final, report)


def _describe(
    tmp: Path, store: Store, cfg: MixtureConfig, cids: list[str], report: ReleaseReport, stats: Stats, plans: dict[str, StagePlan]
) -> None:
    """Fill ``report`` from the written data files, and write what describes them: the
    lineage, the tokenizer, the card and, last (it lists the others), the manifest."""
    for f in data_files(tmp):
        report.count(f["stage"], f["split"], f["rows"], f["tokens"])
    report.shortfall = {st: pl.shortfall for st, pl in plans.items() if pl.shortfall}
    report.dropped = stats.drops()
    report.lengths = {stage: length_summary(n) for stage, n in token_lengths(tmp).items()}
    lineage = lineage_of(store, cids, report.name, report.version)
    write_json(tmp / "lineage.json", lineage)
    report.tokenizer = ship_tokenizer(cfg.tokenizer, tmp)
    card.write_card(tmp, cfg, report.name, report.version, report, stats, plans, store, cids)
    write_json(tmp / "manifest.json", build_manifest(tmp, cfg, report.name, report.version, cids, lineage, plans, report))
