"""The shard store: crash-safe Arrow IPC shards with run manifests, on any pyarrow file system."""

from __future__ import annotations

from pipelines.store.fs import StoreFS
from pipelines.store.layout import Layout, part_name
from pipelines.store.manifest import RunManifest, ShardEntry
from pipelines.store.publish import publish_tree
from pipelines.store.reader import Run, Shard, Store
from pipelines.store.repair import RepairReport, repair
from pipelines.store.shards import open_shard, read_shard
from pipelines.store.writer import ShardWriter, StoreWriter, WriterOptions

__all__ = [
    "Layout",
    "RepairReport",
    "Run",
    "RunManifest",
    "Shard",
    "ShardEntry",
    "ShardWriter",
    "Store",
    "StoreFS",
    "StoreWriter",
    "WriterOptions",
    "open_shard",
    "part_name",
    "publish_tree",
    "read_shard",
    "repair",
]
