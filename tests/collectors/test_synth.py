from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from collectors.synth import Synthesizer, synth_store
from pipelines.store import Store
from schemas import DOMAINS, StoreError, transition_problems
from tests.conftest import cli, make_transitions


def test_same_seed_same_records_other_seed_other_records():
    a, b, c = make_transitions(200, seed=1), make_transitions(200, seed=1), make_transitions(200, seed=2)
    assert [t.content_hash for t in a] == [t.content_hash for t in b]
    assert [t.content_hash for t in a] != [t.content_hash for t in c]


def test_records_are_valid_chained_and_cover_all_domains():
    ts = list(Synthesizer(3, duplicates=0.0).transitions(700))
    assert {t.domain for t in ts} == set(DOMAINS)
    assert all(transition_problems(t) == [] for t in ts)
    by_traj: dict[str, list] = {}
    for t in ts:
        by_traj.setdefault(t.trajectory_id, []).append(t)
    for steps in by_traj.values():
        assert [t.step for t in steps] == list(range(len(steps)))
        for prev, cur in pairwise(steps):
            assert cur.state == prev.next_state
        assert steps[-1].terminated and not any(t.terminated for t in steps[:-1])
    assert all(1024 <= len(t.next_state.text) <= 8192 + 2000 for t in ts)
    assert sum(bool(t.next_state.volatile_spans) for t in ts) / len(ts) > 0.9
    assert 0.0 < sum(t.action_error is not None for t in ts) / len(ts) < 0.15


def test_duplicate_ratio_and_kinds():
    gen = Synthesizer(4, duplicates=0.3, min_obs_bytes=200, max_obs_bytes=600, pool_size=200)
    ts = list(gen.transitions(5000))
    s = gen.summary
    dup_share = (s.exact_duplicate_trajectories + s.near_duplicate_trajectories) / s.trajectories
    assert 0.2 < dup_share < 0.4
    assert s.exact_duplicate_trajectories > 0 and s.near_duplicate_trajectories > 0
    hashes = Counter(t.content_hash for t in ts)
    assert sum(n - 1 for n in hashes.values()) > 0  # exact copies share content hashes
    assert len({t.transition_id for t in ts}) == len(ts)  # but never ids


def test_synth_store_refuses_an_existing_run(tmp_path):
    synth_store(str(tmp_path / "s"), transitions=50, seed=1)
    with pytest.raises(StoreError, match="already exists"):
        synth_store(str(tmp_path / "s"), transitions=50, seed=1)
    synth_store(str(tmp_path / "s"), transitions=50, seed=2)
    assert sum(1 for _ in Store(tmp_path / "s").iter_transitions()) == 100


def test_demo_flow_through_the_cli(tmp_path):
    """The README's commands, as a user types them."""
    store = str(tmp_path / "demo")
    out = cli("synth", store, "--transitions", "400", "--seed", "1", "--duplicates", "0.1").stdout
    assert "wrote 400 transitions" in out
    assert "0 problems" in cli("shards", "validate", store).stdout
    assert "7 rows" in cli("query", "SELECT domain, count(*) FROM transitions GROUP BY 1", "--store", store).stdout
    assert "400 transitions" in cli("stats", "--store", store).stdout
    assert "0 repaired" in cli("shards", "repair", store).stdout
    bad = cli("synth", store, "--transitions", "10", "--duplicates", "2", check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
