"""The data card of a release: ``README.md`` with Hugging Face dataset-card YAML front matter
(one config per stage with its split files, ``dataset_info`` in the layout ``datasets``
reads, licence and language), tables, and PNG charts (matplotlib) of the domain mix, token
lengths and what curation dropped and why.

The charts are made to be read at the size the card shows them (their pixel size): every
label inside the figure, one bar per reason, lengths on a log axis over the real range.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from pipelines.release.config import SPLITS, MixtureConfig
from pipelines.release.layout import token_lengths
from pipelines.release.tokens import tokenizer_hash

STAGE_TITLES = {"cpt": "continual pre-training documents", "sft": "next-state prediction (SFT)", "rl": "RL prompts"}
DPI = 100  # the card shows each chart at its pixel size: width in inches x 100
UNSPECIFIED = "unspecified"  # what a trajectory whose source names no licence counts under
LICENSE_LINK = "README.md#license"  # the card's own licence section (license: other needs a name and a link)
LENGTH_COUNTS = {
    "cpt": "the document's pieces summed (within about 2% of the joined text's count)",
    "sft": "`apply_chat_template(prompt + completion)` (exact)",
    "rl": "`apply_chat_template(prompt, add_generation_prompt=True)` (exact)",
}


def _size_category(n: int) -> str:
    for limit, name in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
    ):
        if n < limit:
            return name
    return "n>10M"


def license_of(cfg: MixtureConfig, licenses: dict[str, int]) -> tuple[dict[str, str], str]:
    """The card's licence keys (``license``, and ``license_name``/``license_link`` for
    ``other``) and where they came from. The mixture's ``license`` wins; else the sources'
    (``licenses``: trajectories per licence their provenance names)."""
    if cfg.license and cfg.license != "other":
        return {"license": cfg.license}, "set in the mixture config"
    if cfg.license == "other":
        name, link = cfg.license_name or "custom", cfg.license_link or LICENSE_LINK
        return {"license": "other", "license_name": name, "license_link": link}, "set in the mixture config"
    named = {k: n for k, n in licenses.items() if k != UNSPECIFIED and n}
    total, unnamed = sum(licenses.values()), licenses.get(UNSPECIFIED, 0)
    if len(named) == 1 and not unnamed:
        (only,) = named
        return {"license": only}, f"from the sources: all {total:,} trajectories name {only}"
    if named:
        parts = ", ".join(f"{k} ({n:,})" for k, n in sorted(named.items()))
        unnamed_part = f", none named ({unnamed:,})" if unnamed else ""
        return (
            {"license": "other", "license_name": "mixed-source-licenses", "license_link": LICENSE_LINK},
            f"from the sources, which name several licences (trajectories: {parts}{unnamed_part}); each sample keeps "
            "its source's terms: set `license` in the mixture once they are reconciled",
        )
    return (
        {"license": "other", "license_name": "unspecified-collected-data", "license_link": LICENSE_LINK},
        "a default: the data was collected by trajforge and its sources name no licence (no `license` in "
        "`provenance.extra`), so the terms are the collector's to set: give `license` (a Hugging Face licence id) "
        "in the mixture config",
    )


def language_of(cfg: MixtureConfig) -> tuple[list[str], str]:
    return (list(cfg.language), "set in the mixture config") if cfg.language else (["en"], "the default (English)")


def _split_bytes(root: Path | None, stage: str, split: str) -> int:
    """Uncompressed bytes of a split (the Parquet footers' row-group sizes: close to Arrow's)."""
    import pyarrow.parquet as pq

    if root is None:
        return 0
    total = 0
    for path in sorted(root.glob(f"data/{stage}/{split}-*.parquet")):
        meta = pq.ParquetFile(path).metadata
        total += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return total


def front_matter(
    cfg: MixtureConfig, name: str, version: str, report, licenses: dict[str, int] | None = None, root: Path | None = None
) -> dict[str, Any]:
    """Hugging Face's card YAML: ``configs`` (one per stage, its non-empty splits) and
    ``dataset_info`` as a list of ``{config_name, splits: [{name, num_bytes, num_examples}]}``,
    the layout ``datasets.DatasetInfosDict.from_dataset_card_data`` reads without warning."""
    configs, info = [], []
    for stage in cfg.enabled():
        rows = report.samples.get(stage, {})
        splits = [s for s in SPLITS if rows.get(s)]
        if not splits:
            continue
        configs.append(
            {"config_name": stage, "data_files": [{"split": s, "path": f"data/{stage}/{s}-*.parquet"} for s in splits]}
        )
        split_info = [{"name": s, "num_bytes": _split_bytes(root, stage, s), "num_examples": rows[s]} for s in splits]
        info.append({"config_name": stage, "splits": split_info, "dataset_size": sum(s["num_bytes"] for s in split_info)})
    total = sum(n for splits in report.samples.values() for n in splits.values())
    return {
        "pretty_name": f"{name} {version}",
        **license_of(cfg, licenses or {})[0],
        "language": language_of(cfg)[0],
        "tags": ["trajforge", "world-model", "agents", "trajectories"],
        "task_categories": ["text-generation"],
        "size_categories": [_size_category(total)],
        "configs": configs,
        "dataset_info": info,
    }


# -- charts --------------------------------------------------------------------------------------
def charts(cfg: MixtureConfig, stats, lengths: dict[str, Any], drops: dict[str, int]) -> dict[str, Any]:
    """The card's figures by file name (matplotlib, not yet saved): ``domain_mix.png``,
    ``token_lengths.png`` and, when curation dropped anything, ``curation_drops.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib import ticker

    out = {}
    stages = cfg.enabled()
    fig, axes = plt.subplots(1, len(stages), figsize=(3.4 * len(stages), 3.4), squeeze=False, dpi=DPI)
    for ax, stage in zip(axes[0], stages, strict=True):
        tokens = stats.by("tokens", stage, "train")
        ax.bar(list(tokens), list(tokens.values()), color="#4c72b0", width=0.7)
        ax.set_title(f"{stage}: train tokens by domain", fontsize=10)
        ax.tick_params(axis="x", labelrotation=45, labelsize=9)
        ax.tick_params(axis="y", labelsize=8)
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _human(v)))
    fig.tight_layout()
    out["domain_mix.png"] = fig

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=DPI)
    present = {st: np.asarray(lengths[st]) for st in stages if st in lengths and len(lengths[st])}
    if present:
        lo = max(1, min(int(a.min()) for a in present.values()))
        hi = max(int(a.max()) for a in present.values())
        bins = np.geomspace(lo, max(hi, lo * 2), 40)
        right = max(hi, lo * 2)
        for stage, a in present.items():
            ax.hist(np.clip(a, lo, None), bins=bins, histtype="step", linewidth=1.6, label=f"{stage} ({len(a):,})")
            limit = cfg.stages[stage].max_tokens
            if limit is not None and lo <= limit <= hi * 1.5:  # a limit near the data: shown, else it squeezes the data
                ax.axvline(limit, linestyle="--", linewidth=0.9, color="gray")
                right = max(right, limit)
        ax.set_xscale("log")
        ax.set_xlim(lo, right * 1.05)
        ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _human(v)))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.legend(fontsize=9, loc="upper left")
    ax.set_xlabel("tokens per sample (log scale, shortest to longest; dashed: max_tokens)", fontsize=9)
    ax.set_ylabel("samples (all splits)", fontsize=9)
    ax.tick_params(labelsize=8)
    fig.tight_layout()
    out["token_lengths.png"] = fig

    if drops:
        reasons = sorted(drops, key=lambda r: (-drops[r], r))[:15]
        labels = [r if len(r) <= 48 else r[:47] + "…" for r in reasons]
        fig, ax = plt.subplots(figsize=(7, 0.9 + 0.38 * len(reasons)), dpi=DPI)
        ys = np.arange(len(reasons))[::-1]  # the largest on top, one row per reason
        ax.barh(ys, [drops[r] for r in reasons], height=0.6, color="#c44e52")
        ax.set_yticks(ys, labels, fontsize=9)
        ax.set_ylim(-0.6, len(reasons) - 0.4)
        for y, r in zip(ys, reasons, strict=True):
            ax.annotate(f"{drops[r]:,}", (drops[r], y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
        ax.set_xlim(0, max(drops[r] for r in reasons) * 1.15)
        ax.set_xlabel("transitions dropped", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        fig.tight_layout()
        out["curation_drops.png"] = fig
    return out


def _human(v: float) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= size:
            return f"{v / size:g}{unit}"
    return f"{v:g}"


def _plots(root: Path, cfg: MixtureConfig, stats, lengths: dict[str, Any], drops: dict[str, int]) -> list[str]:
    import matplotlib.pyplot as plt

    figures = charts(cfg, stats, lengths, drops)
    for name, fig in figures.items():
        fig.savefig(root / name, dpi=DPI, metadata={"Software": None})
    plt.close("all")
    return list(figures)


# -- the card ------------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe ends a table cell, even inside backticks


def _tokenizer_lines(cfg: MixtureConfig, tokenizer: dict[str, Any]) -> list[str]:
    lines = ["## Tokenizer", ""]
    sha = tokenizer.get("sha256") or tokenizer_hash(cfg.tokenizer)
    lines.append(
        f"Token counts (`tokens`, `prompt_tokens`, `completion_tokens`, `max_tokens`) were counted with the "
        f"tokenizer `{Path(cfg.tokenizer).name}` (sha256 `{sha}`) and the ChatML chat template "
        "(`<|im_start|>role\\ncontent<|im_end|>\\n` per message), the rendering trajforge's training uses."
    )
    if tokenizer:
        files = tokenizer.get("files") or []
        lines += [
            "",
            "| | |",
            "|---|---|",
            f"| files in this folder | {', '.join(f'`{f}`' for f in files) or 'none'} |",
            f"| vocabulary | {tokenizer.get('vocab_size', 'unknown')} |",
        ]
        template = str(tokenizer.get("chat_template") or "")
        for key, value in (
            ("chat template", template if "{%" not in template else "in the tokenizer config"),
            *((k, tokenizer.get(k)) for k in ("bos_token", "eos_token", "pad_token")),
        ):
            lines.append(f"| {key} | {_cell(f'`{value}`') if value else 'none'} |")
        if files:
            lines += ["", "`AutoTokenizer.from_pretrained(<this folder>)` loads it with these tokens and the template."]
        if "{%" in template:
            lines += ["", "```jinja", template, "```"]
    return [*lines, ""]


def _length_lines(cfg: MixtureConfig, report) -> list[str]:
    from pipelines.release.samples import LENGTH_REASONS

    lines = [
        "## Token lengths",
        "",
        "| stage | samples | p50 | p90 | p99 | max | max_tokens | dropped for length | counted as |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for stage in cfg.enabled():
        q = report.lengths.get(stage, {})
        limit = cfg.stages[stage].max_tokens
        dropped = sum(report.dropped.get(stage, {}).values())
        cells = " | ".join(f"{q[k]:,}" if k in q else "-" for k in ("p50", "p90", "p99", "max"))
        lines.append(
            f"| {stage} | {q.get('samples', 0):,} | {cells} | {f'{limit:,}' if limit else 'none'} | {dropped:,} "
            f"| {LENGTH_COUNTS[stage]} |"
        )
    lines += [
        "",
        "Over every split, train samples as often as the mixture takes them. A stage's `max_tokens` is a hard "
        "limit: SFT and RL samples drop their oldest history turns until they fit (`dropped_turns`), the target "
        "observation is never cut, and a sample that cannot fit is left out:",
        "",
    ]
    rows = [(stage, reason, n) for stage, reasons in report.dropped.items() for reason, n in sorted(reasons.items()) if n]
    if rows:
        lines += ["| stage | reason | samples left out |", "|---|---|---|"]
        lines += [f"| {st} | `{r}`: {LENGTH_REASONS.get(r, r)} | {n:,} |" for st, r, n in rows]
    else:
        lines.append("none was left out.")
    lines += [
        "",
        "![token lengths](token_lengths.png)",
        "",
        "The chart's x-axis is logarithmic, from the shortest sample to the longest.",
        "",
    ]
    return lines


def _source_lines(cfg: MixtureConfig, sources: dict[str, int]) -> list[str]:
    """Where the release's trajectories came from: origin, source, licence and share."""
    total = sum(sources.values())
    lines = [
        "## Sources",
        "",
        f"Origins taken: {', '.join(cfg.provenance.origins)}; next states taken when they are: "
        f"{', '.join(cfg.provenance.executed)} (simulated trajectories: {cfg.simulated.use}).",
        "",
        "| origin | source | licence | trajectories | share |",
        "|---|---|---|---|---|",
    ]
    for key, n in sorted(sources.items(), key=lambda kv: (-kv[1], kv[0])):
        origin, source, licence = key.split("|", 2)
        lines.append(f"| {origin} | {source} | {licence} | {n:,} | {n / total:.1%} |")
    return [*lines, ""]


def write_card(root: Path, cfg: MixtureConfig, name: str, version: str, report, stats, plans, store, cids) -> None:
    drops: dict[str, int] = {}
    for cid in cids:
        r = json.loads(store.sfs.read_bytes(store.layout.curation_report(cid)))
        for reason, n in r.get("by_reason", {}).items():
            drops[reason] = drops.get(reason, 0) + n
    licenses = dict(getattr(stats, "licenses", {}) or {})
    _plots(root, cfg, stats, token_lengths(root), drops)
    keys, license_source = license_of(cfg, licenses)
    languages, language_source = language_of(cfg)
    lines = [
        "---",
        yaml.safe_dump(front_matter(cfg, name, version, report, licenses, root), sort_keys=False, allow_unicode=True).strip(),
        "---",
        "",
        f"# {name} {version}",
        "",
        "Transitions of agents acting in real environments, for training a language world model: given the "
        "history, the current state and an action, predict the environment's next observation. Built by "
        f"trajforge from {len(cids)} curation(s); lineage in `lineage.json`, every file's sha256 in `manifest.json` "
        "(`trajforge release verify` checks them).",
        "",
        "## Contents",
        "",
        "| stage | what | " + " | ".join(SPLITS) + " |",
        "|---|---|" + "---|" * len(SPLITS),
    ]
    for stage in cfg.enabled():
        rows, toks = report.samples.get(stage, {}), report.tokens.get(stage, {})
        cells = " | ".join(f"{rows.get(s, 0):,} samples, {toks.get(s, 0):,} tokens" for s in SPLITS)
        lines.append(f"| {stage} | {STAGE_TITLES[stage]} | {cells} |")
    lines += [
        "",
        "## Domain mix (train)",
        "",
        "| stage | domain | tokens built | target | times taken | shortfall |",
        "|---|---|---|---|---|---|",
    ]
    for stage, p in plans.items():
        for domain in sorted(set(p.available) | set(p.target)):
            lines.append(
                f"| {stage} | {domain} | {p.available.get(domain, 0):,} | {p.target.get(domain, 0):,.0f} "
                f"| {p.multiplier.get(domain, 0):.2f} | {p.shortfall.get(domain, 0):,.0f} |"
            )
    lines += ["", "![domain mix](domain_mix.png)", ""]
    lines += _source_lines(cfg, dict(getattr(stats, "sources", {}) or {}))
    lines += _length_lines(cfg, report)
    lines += _tokenizer_lines(cfg, getattr(report, "tokenizer", None) or {})
    if drops:
        lines += ["## What curation dropped", "", "| reason | transitions |", "|---|---|"]
        lines += [f"| {r} | {n:,} |" for r, n in sorted(drops.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines += ["", "![curation drops](curation_drops.png)", ""]
    license_text = " ".join(f"`{k}: {v}`" for k, v in keys.items())
    lines += [
        "## Splits",
        "",
        f"By task within its environment (seed {cfg.seed}): validation {cfg.splits.validation:.0%}, "
        f"test {cfg.splits.test:.0%}; held-out environments (all in test): "
        f"{', '.join(cfg.splits.held_out_envs) or 'none'}. No task appears in two splits.",
        "",
        "## License",
        "",
        f"{license_text}: {license_source}.",
        "",
        f"Language: {', '.join(languages)} ({language_source}).",
        "",
        "## Loading",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        'sft = load_dataset("path/to/this/folder", "sft")  # one config per stage: ' + ", ".join(f'"{s}"' for s in cfg.enabled()),
        'train = sft["train"]',
        "```",
        "",
    ]
    (root / "README.md").write_text("\n".join(lines))
