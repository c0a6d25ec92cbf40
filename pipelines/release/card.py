"""The data card of a release: ``README.md`` with Hugging Face dataset-card YAML front matter
(configs per stage with their split files, sizes, license), tables, and PNG plots
(matplotlib) of the domain mix, token lengths and what curation dropped and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from pipelines.release.config import SPLITS, MixtureConfig

STAGE_TITLES = {"cpt": "continual pre-training documents", "sft": "next-state prediction (SFT)", "rl": "RL prompts"}


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                        (10_000_000, "1M<n<10M")):  # fmt: skip
        if n < limit:
            return name
    return "n>10M"


def front_matter(cfg: MixtureConfig, name: str, version: str, report) -> dict[str, Any]:
    configs, info = [], []
    for stage in cfg.enabled():
        rows = report.samples.get(stage, {})
        splits = [s for s in SPLITS if rows.get(s)]
        configs.append({"config_name": stage,
                        "data_files": [{"split": s, "path": f"data/{stage}/{s}-*.parquet"} for s in splits]})  # fmt: skip
        info.append({"config_name": stage, "splits": [{"name": s, "num_examples": rows[s]} for s in splits]})
    total = sum(n for splits in report.samples.values() for n in splits.values())
    return {
        "pretty_name": f"{name} {version}",
        "license": cfg.license,
        "tags": ["trajforge", "world-model", "agents", "trajectories"],
        "task_categories": ["text-generation"],
        "size_categories": [_size_category(total)],
        "configs": configs,
        "dataset_info": info,
    }


def _plots(root: Path, cfg: MixtureConfig, stats, drops: dict[str, int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipelines.release.build import HIST_BINS

    stages = cfg.enabled()
    fig, axes = plt.subplots(1, len(stages), figsize=(4 * len(stages), 3.2), squeeze=False)
    for ax, stage in zip(axes[0], stages, strict=True):
        tokens = stats.by("tokens", stage, "train")
        ax.bar(list(tokens), list(tokens.values()), color="#4c72b0")
        ax.set_title(f"{stage}: train tokens by domain", fontsize=9)
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    fig.tight_layout()
    fig.savefig(root / "domain_mix.png", dpi=80, metadata={"Software": None})
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for stage in stages:
        hist = stats.hist.get(stage, {})
        xs = list(range(len(HIST_BINS)))
        ax.plot(xs, [hist.get(i, 0) for i in xs], marker="o", label=stage)
    ax.set_xticks(range(len(HIST_BINS)), [str(b) for b in HIST_BINS], rotation=60, fontsize=7)
    ax.set_xlabel("tokens per sample (bin start)")
    ax.set_ylabel("samples (all splits)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(root / "token_lengths.png", dpi=80, metadata={"Software": None})
    if drops:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        reasons = sorted(drops, key=lambda r: -drops[r])[:10]
        ax.barh([r[:40] for r in reasons][::-1], [drops[r] for r in reasons][::-1], color="#c44e52")
        ax.set_xlabel("transitions dropped")
        ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        fig.savefig(root / "curation_drops.png", dpi=80, metadata={"Software": None})
    plt.close("all")


def write_card(root: Path, cfg: MixtureConfig, name: str, version: str, report, stats, plans, store, cids) -> None:
    drops: dict[str, int] = {}
    for cid in cids:
        r = json.loads(store.sfs.read_bytes(store.sfs.join("curated", cid, "report.json")))
        for reason, n in r.get("by_reason", {}).items():
            drops[reason] = drops.get(reason, 0) + n
    _plots(root, cfg, stats, drops)
    lines = ["---", yaml.safe_dump(front_matter(cfg, name, version, report), sort_keys=False).strip(), "---", "",
             f"# {name} {version}", "",
             "Transitions of agents acting in real environments, for training a language world model: given the "
             "history, the current state and an action, predict the environment's next observation. Built by "
             f"trajforge from {len(cids)} curation(s); lineage in `lineage.json`, every file's sha256 in `manifest.json` "
             "(`trajforge release verify` checks them).", "",
             "## Contents", "", "| stage | what | " + " | ".join(SPLITS) + " |", "|---|---|" + "---|" * len(SPLITS)]  # fmt: skip
    for stage in cfg.enabled():
        rows, toks = report.samples.get(stage, {}), report.tokens.get(stage, {})
        cells = " | ".join(f"{rows.get(s, 0):,} samples, {toks.get(s, 0):,} tokens" for s in SPLITS)
        lines.append(f"| {stage} | {STAGE_TITLES[stage]} | {cells} |")
    lines += ["", "## Domain mix (train)", "", "| stage | domain | tokens built | target | times taken | shortfall |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for stage, p in plans.items():
        for domain in sorted(set(p.available) | set(p.target)):
            lines.append(f"| {stage} | {domain} | {p.available.get(domain, 0):,} | {p.target.get(domain, 0):,.0f} "
                         f"| {p.multiplier.get(domain, 0):.2f} | {p.shortfall.get(domain, 0):,.0f} |")  # fmt: skip
    lines += ["", "![domain mix](domain_mix.png)", "", "## Token lengths", "", "![token lengths](token_lengths.png)", ""]
    if drops:
        lines += ["## What curation dropped", "", "| reason | transitions |", "|---|---|"]
        lines += [f"| {r} | {n:,} |" for r, n in sorted(drops.items(), key=lambda kv: -kv[1])]
        lines += ["", "![curation drops](curation_drops.png)", ""]
    lines += ["## Splits", "",
              f"By task within its environment (seed {cfg.seed}): validation {cfg.splits.validation:.0%}, "
              f"test {cfg.splits.test:.0%}; held-out environments (all in test): "
              f"{', '.join(cfg.splits.held_out_envs) or 'none'}. No task appears in two splits.", "",
              "## Loading", "", "```python", "from datasets import load_dataset",
              'sft = load_dataset("parquet", data_files={"train": "data/sft/train-*.parquet"})', "```", ""]  # fmt: skip
    (root / "README.md").write_text("\n".join(lines))
