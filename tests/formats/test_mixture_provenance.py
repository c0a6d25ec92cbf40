"""Releases choose by provenance: only executed next states by default, origins and
executed as the mixture asks, and the card lists the sources with their licences and shares."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow.parquet as pq

from schemas.transition import Provenance


def test_default_mixture_takes_executed_rows_only_and_the_card_names_sources(tmp_path):
    from collectors.synth import Synthesizer
    from pipelines.curate.config import CurationConfig
    from pipelines.curate.run import curate
    from pipelines.release.build import create_release
    from pipelines.release.config import MixtureConfig, load_mixture
    from pipelines.release.tokens import train_tokenizer
    from pipelines.store import StoreWriter
    from tests.conftest import SMALL

    in_memory = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
    store = tmp_path / "s"
    gen = Synthesizer(1, **SMALL)
    real = list(gen.transitions(150))

    def imported(seed: int, prefix: str, source: str, license: str, executed: str, extra: str = "{}") -> list:
        prov = Provenance(
            run_id=f"import-{source}", origin="imported", executed=executed, source=source, license=license, extra=extra
        )
        return [
            t.evolve(
                trajectory_id=f"{prefix}-{t.trajectory_id}", provenance=replace(prov, collected_at=t.provenance.collected_at)
            )
            for t in Synthesizer(seed, **SMALL).transitions(150)
        ]

    runs = {gen.run_id: real, "import-acme": imported(2, "acme", "acme", "mit", "unknown")}
    runs["import-bench"] = imported(3, "bench", "bench", "cc-by-4.0", "executed", '{"stop_reason":"timeout"}')
    for run_id, rows in runs.items():
        with StoreWriter(str(store), run_id) as w:
            w.write_many(rows)
    curate(CurationConfig(), str(store), beam_args=in_memory, log=lambda m: None)
    train_tokenizer([t.next_state.text for t in real[:100]], str(store / "tokenizer.json"), vocab_size=400)
    base = load_mixture("examples/mixtures/default.yaml", str(store)).model_dump()

    def trajectories(version: str, provenance: dict) -> set[str]:
        cfg = MixtureConfig.model_validate({**base, "provenance": provenance, "stages": {"sft": {}}})
        create_release(cfg, str(store), "wm", version, beam_args=in_memory, log=lambda m: None)
        files = sorted((store / "releases" / "wm" / version / "data" / "sft").glob("*.parquet"))
        return {t for f in files for t in pq.read_table(f, columns=["trajectory_id"]).column(0).to_pylist()}

    def build(version: str, provenance: dict) -> set[str]:
        return {t.split("-", 1)[0] for t in trajectories(version, provenance)}

    assert build("default", {}) == {"synth", "bench"}  # acme's next states were never vouched for: left out
    assert build("all", {"executed": ["executed", "unknown"]}) == {"synth", "bench", "acme"}
    assert build("imports", {"origins": ["imported"], "executed": ["executed", "unknown"]}) == {"bench", "acme"}
    # by why the episode ended: bench's episodes timed out; synth's record no reason
    assert build("no-timeouts", {"stop_reasons": ["complete", "none"]}) == {"synth"}
    card = (store / "releases" / "wm" / "all" / "README.md").read_text()
    assert "## Sources" in card
    rows = [line for line in card.splitlines() if line.startswith("| imported |") or line.startswith("| collected |")]
    assert any(r.startswith("| imported | acme | mit |") for r in rows) and any("| bench | cc-by-4.0 |" in r for r in rows)
    assert any(r.startswith("| collected |") for r in rows)
    shares = [float(r.rstrip(" |").rsplit("| ", 1)[1].rstrip("%")) for r in rows]
    assert abs(sum(shares) - 100) < 0.5
    # caps: imported trajectories at most 30% of what the filter takes, the lowest hashes first
    everything = trajectories("everything", {"executed": ["executed", "unknown"]})
    capped = trajectories("capped", {"executed": ["executed", "unknown"], "max_share": {"imported": 0.3}})
    imported = {t for t in everything if not t.startswith("synth")}
    kept = {t for t in capped if not t.startswith("synth")}
    assert capped - kept == everything - imported  # collected ones untouched
    assert 0 < len(kept) / len(capped) <= 0.3 < (len(kept) + 1) / (len(capped) + 1)
    from pipelines.release.simulated import group_hash

    manifest = json.loads((store / "releases" / "wm" / "capped" / "manifest.json").read_text())
    cfg = MixtureConfig.model_validate(manifest["config"])
    bound = cfg.provenance.keep_below["imported"]
    assert kept == {t for t in imported if group_hash(cfg, "imported", t) < bound}
