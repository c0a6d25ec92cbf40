"""Store statistics: transitions per domain, run and day, bytes, and the failed-step ratio.

Counts cover the shards a query reads (listed and verified); what is left out is reported:
``unlisted`` names finished shards that no manifest lists (a lost or refused manifest, run
``trajforge shards repair``), ``warnings`` every run or shard skipped, one line each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.query import connect
from pipelines.store.reader import Store


@dataclass
class StoreStats:
    transitions: int = 0
    trajectories: int = 0
    failed_steps: int = 0
    bytes: int = 0
    shards: int = 0
    by_domain: list[tuple[str, int, int, int]] = field(default_factory=list)  # domain, transitions, trajectories, failed
    by_run: list[tuple[str, str, int, int]] = field(default_factory=list)  # domain, run, transitions, bytes
    by_day: list[tuple[str, int]] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)  # finished shard files no manifest lists
    warnings: list[str] = field(default_factory=list)  # runs and shards left out, one line each

    @property
    def failed_ratio(self) -> float:
        return self.failed_steps / self.transitions if self.transitions else 0.0


def human_bytes(n: int) -> str:
    """``n`` bytes in decimal units (as ``ls -h --si``), three significant digits: 852 B, 1.53 MB, 12.4 GB."""
    if abs(n) < 1000:
        return f"{n} B"
    size = float(n)
    for unit in ("KB", "MB", "GB", "TB", "PB"):
        size /= 1000
        text = f"{size:.3g}"
        if abs(float(text)) < 1000:
            return f"{text} {unit}"
    return f"{size:,.0f} PB"


def store_stats(store: str | Store) -> StoreStats:
    store = Store.open(store)
    con = connect(store, views=("transitions",))  # counts transitions: no curation or release is opened
    stats = StoreStats()
    stats.by_domain = [
        tuple(r)
        for r in con.execute(
            "SELECT domain, count(*), count(DISTINCT trajectory_id), count(action_error) FROM transitions GROUP BY 1 ORDER BY 1"
        ).fetchall()
    ]
    stats.transitions = sum(r[1] for r in stats.by_domain)
    stats.trajectories = sum(r[2] for r in stats.by_domain)
    stats.failed_steps = sum(r[3] for r in stats.by_domain)
    stats.by_day = [
        (str(day), n)
        for day, n in con.execute(
            "SELECT CAST(provenance.collected_at AS DATE) AS day, count(*) FROM transitions GROUP BY 1 ORDER BY 1"
        ).fetchall()
    ]
    by_run: dict[tuple[str, str], list[int]] = {}
    for shard in store.readable_shards("raw"):  # the shards the views read
        counts = by_run.setdefault((shard.run.domain, shard.run.run_id), [0, 0])
        counts[0] += shard.entry.rows
        counts[1] += shard.entry.bytes
        stats.bytes += shard.entry.bytes
        stats.shards += 1
    stats.by_run = [(domain, run_id, rows, size) for (domain, run_id), (rows, size) in by_run.items()]
    stats.unlisted = store.unlisted("raw")
    stats.warnings = list(store.warnings)
    return stats
