"""Store statistics: transitions per domain, run and day, bytes, and the failed-step ratio."""

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

    @property
    def failed_ratio(self) -> float:
        return self.failed_steps / self.transitions if self.transitions else 0.0


def store_stats(store: str | Store) -> StoreStats:
    store = store if isinstance(store, Store) else Store(store)
    con = connect(store)
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
    for run in store.runs("raw"):
        stats.by_run.append((run.domain, run.run_id, run.manifest.rows, run.manifest.bytes))
        stats.bytes += run.manifest.bytes
        stats.shards += len(run.manifest.shards)
    return stats
