"""The release's two Beam pipelines: thin DoFns and a composite transform over ``passes``.

1. ``ShardSamples``: (index, (curation id, shard path)) -> each shard's samples, written to
   the work folder by ``BuildShardSamples`` as the shard streams by. The few trajectories
   that span shards come back keyed by trajectory, are grouped, and ``BuildSpanning``
   writes each one's samples. Only those transitions cross a shuffle, never a sample.
2. ``WriteReleaseFiles``: (stage, k, n, work files) -> the release's files of that group.

``sample_pass`` and ``file_pass`` run each as its own pipeline (the mixture is planned
between them), showing progress from the files the workers finish.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam

from pipelines.beam_options import beam_options
from pipelines.progress import files_done, parquet_done, watch
from pipelines.release import passes
from pipelines.release.config import SPLITS, MixtureConfig
from pipelines.release.inputs import excluded_ids
from pipelines.release.stats import Stats
from pipelines.store import Store


class _Samples(beam.DoFn):
    """A DoFn that writes samples: the mixture config and a token counter per worker."""

    def __init__(self, store_uri: str, config: dict[str, Any], work: str) -> None:
        self.store_uri, self.config, self.work = store_uri, config, work

    def setup(self) -> None:
        from pipelines.release.tokens import PieceCounts, load_tokenizer

        self.store = Store.open(self.store_uri)  # one handle per worker
        self.cfg = MixtureConfig.model_validate(self.config)
        self.tokens = PieceCounts(load_tokenizer(self.cfg.tokenizer))


class BuildShardSamples(_Samples):
    """(index, (curation id, shard path)) -> ``<work>/<stage>/<index>.parquet``; yields the
    rows of trajectories in ``spanning`` keyed by trajectory id."""

    def __init__(self, store_uri: str, config: dict[str, Any], work: str, spanning: set[str]) -> None:
        super().__init__(store_uri, config, work)
        self.spanning = spanning

    def setup(self) -> None:
        super().setup()
        self.excluded: dict[str, set[str]] = {}  # per curation, read once per worker

    def process(self, item):
        index, (cid, path) = item
        if cid not in self.excluded:
            self.excluded[cid] = excluded_ids(self.store, cid)
        out = passes.SampleWriter(Path(self.work), f"{index:06d}", Stats())
        yield from passes.shard_samples(self.store, cid, path, out, self.tokens, self.cfg, self.excluded[cid], self.spanning)


class BuildSpanning(_Samples):
    """A trajectory whose steps span shards, grouped by trajectory: its own sample files."""

    def process(self, item):
        traj_id, members = item
        yield passes.spanning_samples(self.store, traj_id, members, Path(self.work), self.tokens, self.cfg)


class ShardSamples(beam.PTransform):
    """Pass 1 over (index, (curation id, shard path)) elements: every shard's samples and the
    spanning trajectories' ones in ``work``; the output holds the spanning files' names."""

    def __init__(self, store_uri: str, config: dict[str, Any], work: str, spanning: set[str]) -> None:
        super().__init__()
        self.store_uri, self.config, self.work, self.spanning = store_uri, config, work, spanning

    def expand(self, shards):
        away = (
            shards
            | "Reshuffle" >> beam.Reshuffle()
            | "BuildShardSamples" >> beam.ParDo(BuildShardSamples(self.store_uri, self.config, self.work, self.spanning))
        )
        return (
            away
            | "ByTrajectory" >> beam.GroupByKey()
            | "BuildSpanning" >> beam.ParDo(BuildSpanning(self.store_uri, self.config, self.work))
        )


class WriteReleaseFiles(beam.DoFn):
    """(stage, k, n, work files) -> ``data/<stage>/<split>-k-of-n.parquet`` under ``out``."""

    def __init__(self, config: dict[str, Any], plans: dict[str, dict[str, float]], out: str) -> None:
        self.config, self.plans, self.out = config, plans, out

    def process(self, spec):
        yield from passes.write_release_file(MixtureConfig.model_validate(self.config), self.plans, self.out, spec)


def sample_pass(
    shards: list[tuple[str, str]],
    store_uri: str,
    config: dict[str, Any],
    work: Path,
    spanning: set[str],
    beam_args: list[str] | None,
) -> None:
    """Pass 1: the samples of every shard in ``work``, their counts in ``work/stats-*.json``."""
    with (
        watch("release samples", len(shards), files_done(str(work / "stats-[0-9]*.json")), unit="shards"),
        beam.Pipeline(options=beam_options(beam_args)) as p,
    ):
        _ = (
            p
            | "Shards" >> beam.Create(list(enumerate(shards)))
            | "ShardSamples" >> ShardSamples(store_uri, config, str(work), spanning)
        )


def file_pass(
    specs: list[passes.FileSpec],
    config: dict[str, Any],
    plans: dict[str, dict[str, float]],
    out: Path,
    beam_args: list[str] | None,
) -> None:
    """Pass 2: the release's data files under ``out``, one group of work files each."""
    with (
        watch("release files", len(specs) * len(SPLITS), parquet_done(str(out / "data" / "*" / "*.parquet")), unit="files"),
        beam.Pipeline(options=beam_options(beam_args)) as p,
    ):
        _ = (
            p
            | "Files" >> beam.Create(specs)
            | "Reshuffle" >> beam.Reshuffle()
            | "Write" >> beam.ParDo(WriteReleaseFiles(config, plans, str(out)))
        )
