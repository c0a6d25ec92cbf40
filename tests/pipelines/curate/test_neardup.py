"""Near-duplicate removal without chaining: greedy exact assignment, named partners,
layout-blind shingles, and the same decisions in this process as on Beam."""

from __future__ import annotations

import filecmp
import random
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.curate import neardup
from pipelines.curate.config import CurationConfig, NearDedup
from pipelines.curate.documents import dedup_documents
from pipelines.curate.run import curate
from pipelines.query import run_query
from pipelines.store import StoreWriter
from schemas import Action, Observation, Provenance, Transition

IN_MEMORY = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
ND = NearDedup()  # the defaults: word 5-grams, exact Jaccard 0.7
VOCAB = [f"{a}{b}{c}" for a in "bcdfghjklm" for b in "aeiou" for c in "nprst"]


def words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(VOCAB) for _ in range(n)]


def replace_block(ws: list[str], start: int, n: int, rng: random.Random) -> list[str]:
    return ws[:start] + words(rng, n) + ws[start + n :]


def jaccard(a: str, b: str) -> float:
    """Exact Jaccard of two documents as ``dedup_documents`` shingles them (volatile spans masked)."""
    (_, x), (_, y) = neardup.document_nodes([("a", a), ("b", b)], ND)
    return neardup.similarity(x, y)


def test_a_chain_is_not_collapsed_onto_its_first_member():
    rng = random.Random(1)
    a = words(rng, 400)
    b = replace_block(a, 300, 50, rng)  # A ~ B
    c = replace_block(b, 100, 50, rng)  # B ~ C, but C is two block edits from A
    docs = [("a", " ".join(a)), ("b", " ".join(b)), ("c", " ".join(c))]
    ab, bc, ac = jaccard(docs[0][1], docs[1][1]), jaccard(docs[1][1], docs[2][1]), jaccard(docs[0][1], docs[2][1])
    assert ab >= ND.threshold and bc >= ND.threshold and ac < ND.threshold, (ab, bc, ac)
    removed = dedup_documents(docs, ND, runner="local")
    assert removed == {"b": ("a", pytest.approx(ab))}  # C stays: its one match, B, is gone
    # a chain that never closes: each page a block edit of the one before
    chain = [a]
    for i in range(8):
        chain.append(replace_block(chain[-1], (i * 45) % 350, 50, rng))
    removed = dedup_documents([(f"p{i}", " ".join(p)) for i, p in enumerate(chain)], ND, runner="local")
    for dropped, (partner, similarity) in removed.items():
        assert partner not in removed  # every partner is kept
        assert similarity == jaccard(" ".join(chain[int(dropped[1:])]), " ".join(chain[int(partner[1:])])) >= ND.threshold
    assert len(removed) < len(chain) - 1  # the far ends of the chain stay


def test_a_template_family_keeps_every_page():
    """Pages sharing a template (the same headings and boilerplate, their own names and
    details): alike at a glance, distinct training signal."""
    rng = random.Random(2)
    template = words(rng, 250)
    pages = []
    for i in range(30):
        page = list(template)
        for start in range(0, 250, 25):  # each section's own 10 words
            page[start : start + 10] = words(rng, 10)
        pages.append((f"EVP_CIPHER-{i}", " ".join(page)))
    best = max(jaccard(x[1], y[1]) for x in pages for y in pages if x is not y)
    assert best < ND.threshold
    assert dedup_documents(pages, ND, runner="local") == {}


def test_a_rewrapped_copy_is_an_exact_match_of_its_source():
    rng = random.Random(3)
    ws = words(rng, 300)
    source = "\n".join(" ".join(ws[i : i + 12]) for i in range(0, 300, 12))
    rewrapped = "\n\n    ".join(" \t ".join(ws[i : i + 7]) for i in range(0, 300, 7)) + "\n"
    other = " ".join(words(rng, 300))
    removed = dedup_documents([("src", source), ("other", other), ("wrap", rewrapped)], ND, runner="local")
    assert removed == {"wrap": ("src", 1.0)}


def test_volatile_noise_is_masked_and_the_best_kept_match_is_named():
    rng = random.Random(4)
    ws = words(rng, 300)
    base = " ".join(ws)
    run1 = base + "\nstarted 2026-12-04T18:56:37Z pid 48213 in /tmp/tmpa8f3kd0q took 0.42s\n"
    run2 = base + "\nstarted 2026-12-05T09:01:12Z pid 977 in /tmp/tmpzz81kq3w took 12.5s\n"
    assert dedup_documents([("run1", run1), ("run2", run2)], ND, runner="local") == {"run2": ("run1", 1.0)}
    closer = " ".join(replace_block(ws, 10, 10, rng))
    removed = dedup_documents([("closer", closer), ("base", base), ("run1", run1)], ND, runner="local")
    # run1 matches base best, but base is dropped (against the earlier closer): run1 names the kept one
    assert removed["base"][0] == "closer" and removed["run1"][0] == "closer"
    assert removed["run1"][1] == jaccard(run1, closer) < jaccard(run1, base)


def test_min_labels_reach_rounds_plus_one_hops_and_groups_cut_longer_chains():
    chain = [(i, i + 1) for i in range(10)]  # nodes 0..10; then b=11, x=12, y=13; 14 has no edge
    edges = np.array([*chain, (12, 13), (11, 13)])
    labels = neardup.min_labels(edges, 15, 3)
    assert labels[4] == 0 and labels[10] == 6  # a long chain stays in bounded groups
    assert labels[12] == labels[13] == 11 and labels[14] == 14
    keys = [(1, f"{i:02d}", "") for i in range(15)]
    found = {tuple(g.keys): g.edges.tolist() for g in neardup.groups(keys, edges, 3)}
    # 0..4 share label 0; an edge across two labels is dropped, so 5..10 (each its own label) form no group
    assert found == {tuple(keys[:5]): [[0, 1], [1, 2], [2, 3], [3, 4]], (keys[11], keys[12], keys[13]): [[1, 2], [0, 2]]}


def test_candidate_edges_are_the_pairs_sharing_a_band_that_pass_the_estimate_each_once(monkeypatch):
    from pipelines.curate import minhash

    rng = np.random.default_rng(3)
    bases = rng.integers(0, 1 << 63, size=(40, ND.num_perm), dtype=np.uint64)
    rows = []
    for base in bases:  # families: copies agreeing with their base in 60-128 random positions
        for agree in rng.integers(60, ND.num_perm + 1, size=5):
            sig = base.copy()
            change = rng.choice(ND.num_perm, size=ND.num_perm - agree, replace=False)
            sig[change] = rng.integers(0, 4, size=change.size, dtype=np.uint64)  # small values: chance agreements too
            rows.append(sig)
    sigs = np.stack(rows)
    bands = [set(minhash.band_keys(s, ND.bands, ND.rows)) for s in sigs]
    for threshold in (0.2, 0.85):
        nd = ND.model_copy(update={"threshold": threshold})
        floor = max(0.0, threshold - neardup.ESTIMATE_SLACK)
        want = {
            (i, j)
            for i in range(len(sigs))
            for j in range(i + 1, len(sigs))
            if bands[i] & bands[j] and minhash.estimated_jaccard(sigs[i], sigs[j]) >= floor
        }
        edges = [tuple(e) for e in neardup.candidate_edges(sigs, range(ND.bands), nd).tolist()]
        assert want and len(edges) == len(set(edges)) and set(edges) == want
        # two shares of the bands (as two Beam workers find them) give the same edges, also in tiny chunks
        monkeypatch.setattr(minhash, "PAIR_CHUNK", 7)
        halves = (range(0, ND.bands, 2), range(1, ND.bands, 2))
        shares = [tuple(e) for b in halves for e in neardup.candidate_edges(sigs, b, nd).tolist()]
        monkeypatch.undo()
        assert sorted(shares) == sorted(edges)


def test_documents_decide_the_same_on_beam_and_in_this_process():
    rng = random.Random(5)
    docs = []
    for i in range(40):
        ws = words(rng, rng.randint(60, 300))
        docs.append((f"d{i}", " ".join(ws)))
        if i % 3 == 0:
            docs.append((f"d{i}-copy", " ".join(replace_block(ws, 5, max(1, len(ws) // rng.randint(8, 30)), rng))))
    local = dedup_documents(docs, ND, runner="local")
    assert len(local) >= 10
    assert dedup_documents(docs, ND, runner="beam", beam_args=IN_MEMORY) == local


def _trajectory(traj: str, screens: list[str], run: str, minute: int) -> list[Transition]:
    out, state = [], "$ "
    for i, screen in enumerate(screens):
        out.append(
            Transition.create(
                trajectory_id=traj,
                step=i,
                domain="terminal",
                env_id="bash",
                task_id=f"task-{traj}",
                state=Observation.make(state, "terminal"),
                action=Action.make("run", command=f"cat part{i}"),
                next_state=Observation.make(screen, "terminal"),
                provenance=Provenance(run_id=run, collected_at=datetime(2026, 12, 4, 10, minute, tzinfo=UTC)),
            )
        )
        state = screen
    return out


def _store(path: Path) -> dict[str, list[str]]:
    """Trajectories A (two steps), B ~ A, B2 an exact copy of B, C ~ B but not ~ A, D new."""
    rng = random.Random(6)
    a = [" ".join(words(rng, 300)), " ".join(words(rng, 300))]
    b = [" ".join(replace_block(a[0].split(), 200, 50, rng)), a[1]]  # Jaccard to A about 0.83
    c = [" ".join(replace_block(b[0].split(), 20, 70, rng)), a[1]]  # to B about 0.78, to A about 0.65
    screens = {"A": a, "B": b, "B2": b, "C": c, "D": [" ".join(words(rng, 300))]}
    with StoreWriter(str(path), "run") as w:
        for minute, (traj, s) in enumerate(screens.items()):
            w.write_many(_trajectory(traj, s, "run", minute))
    return screens


def test_rejected_duplicates_name_their_kept_partner_step_by_step(tmp_path):
    _store(tmp_path / "s")
    curate(CurationConfig(), str(tmp_path / "s"), engine="local", log=lambda m: None)
    rejected = run_query(
        "SELECT trajectory_id, step, reason, detail, duplicate_of, similarity, cluster FROM rejected ORDER BY 1, 2",
        str(tmp_path / "s"),
    ).to_pylist()
    kept = run_query("SELECT transition_id, trajectory_id, step, cluster FROM curated", str(tmp_path / "s")).to_pylist()
    kept_ids = {(r["trajectory_id"], r["step"]): r["transition_id"] for r in kept}
    assert {r["trajectory_id"] for r in rejected} == {"B", "B2"}  # C is kept: it matches B, which is gone
    for r in rejected:
        assert r["duplicate_of"] == kept_ids[("A", r["step"])]  # the same step of the kept partner
        assert r["cluster"] == "A" and 0.7 <= r["similarity"] < 1.0
    b2 = [r for r in rejected if r["trajectory_id"] == "B2"]
    assert {r["reason"] for r in b2} == {"exact_duplicate"} and "itself a near duplicate of A" in b2[0]["detail"]
    assert {r["cluster"] for r in kept if r["trajectory_id"] == "A"} == {"A"}
    assert {r["cluster"] for r in kept if r["trajectory_id"] in ("C", "D")} == {None}


def _tree_files(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file() and p.name != "report.json" and "_work" not in p.parts
    }


def test_a_small_curation_in_this_process_writes_what_beam_writes(tmp_path):
    """The same two curations (the second dedupes against the first's index), once in this
    process and once on Beam: every output file byte for byte."""
    from collectors.synth import Synthesizer

    for name in ("local", "beam"):
        store = tmp_path / name
        gen = Synthesizer(7, duplicates=0.3, domains=["terminal", "web", "mcp"])
        with StoreWriter(str(store), gen.run_id) as w:
            w.write_many(gen.transitions(300))
        engine = {"engine": "local"} if name == "local" else {"engine": "beam", "beam_args": IN_MEMORY}
        first = curate(CurationConfig(), str(store), log=lambda m: None, **engine)
        assert first.by_stage.get("near_dedup", 0) > 0 and first.by_stage.get("exact_dedup", 0) > 0
        gen2 = Synthesizer(7, duplicates=0.3, domains=["terminal", "web", "mcp"], run_id="again")
        with StoreWriter(str(store), "again") as w:
            w.write_many(gen2.transitions(150))
        cfg = CurationConfig(max_transitions_per_pass=100)
        second = curate(cfg, str(store), log=lambda m: None, **engine)
        assert second.index_rows["1"].get("traj_matched", 0) > 0
    local, beam = _tree_files(tmp_path / "local" / "curated"), _tree_files(tmp_path / "beam" / "curated")
    local.update({f"r/{k}": v for k, v in _tree_files(tmp_path / "local" / "rejected").items()})
    beam.update({f"r/{k}": v for k, v in _tree_files(tmp_path / "beam" / "rejected").items()})
    assert sorted(local) == sorted(beam) and len(local) > 10
    different = [k for k in local if not filecmp.cmp(local[k], beam[k], shallow=False)]
    assert different == []
    attributes = [p for k, p in local.items() if k.startswith("r/") and k.endswith("attributes.parquet")]
    rows = [r for p in attributes for r in pq.read_table(p).to_pylist()]
    duplicates = [r for r in rows if r["stage"] in ("exact_dedup", "near_dedup")]
    assert duplicates and all(r["duplicate_of"] and r["similarity"] >= 0.7 for r in duplicates)
