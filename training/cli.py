"""``trajforge train cpt|sft|rl CONFIG`` and ``trajforge train eval``."""

from __future__ import annotations

import json
import re
import sys
from typing import Annotated, Literal

import typer

app = typer.Typer(no_args_is_help=True, help="Train the world model from a release (CPT, SFT, GSPO) and measure its fidelity.")
StoreOpt = Annotated[str | None, typer.Option("--store", "-s", help="Store path (overrides the config's store).")]
ReleaseOpt = Annotated[str | None, typer.Option("--release", help="NAME/VERSION (overrides the config's release).")]
OutputOpt = Annotated[str | None, typer.Option("--output", "-o", help="Output folder (overrides the config's output).")]
ConfigArg = Annotated[str, typer.Argument(help="Training config YAML (see examples/training/).")]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="A checkpoint folder to start from (overrides the config's model).")
]


def _train(
    stage: str, config: str, store: str | None, release: str | None, output: str | None, model: str | None, as_json: bool
) -> None:
    from dataclasses import asdict

    from pipelines.cli_inputs import open_store
    from pipelines.progress import progress
    from training.config import load_train_config
    from training.train import run

    cfg = load_train_config(config, stage)
    checkpoint = None if model is None else {**cfg.model.model_dump(), "path": model, "init": None}
    cfg = cfg.override(store=store, release=release, output=output, model=checkpoint)
    handle = None if cfg.store is None else open_store(cfg.store, "--store" if store is not None else f"{config}: store")
    total = cfg.train.max_steps if cfg.train.max_steps > 0 else None
    with progress(f"train {stage}", total) as update:
        report = run(cfg, store=handle, progress_update=update)
    if as_json:
        typer.echo(json.dumps({k: v for k, v in asdict(report).items() if k != "log_history"}, indent=1, default=str))
        return
    typer.echo(
        f"{stage}: {report.steps} steps, {report.train_tokens:,} tokens in {report.seconds:.1f} s "
        f"({report.tokens_per_s:,.0f} tokens/s), final loss {report.final_loss:.4f}"
        + (f", resumed from {report.resumed_from}" if report.resumed_from else "")
    )
    if report.packing_efficiency is not None:
        left = f"; {report.left_out_too_long} samples longer than max_length left out" if stage == "sft" else ""
        typer.echo(f"packing: bin fill {report.packing_efficiency:.3f} (batches are padding-free){left}")
    typer.echo(f"model and report in {report.output}")


STAGES = {
    "cpt": "Continual pre-training on packed CPT documents (loss on every token).",
    "sft": "Supervised fine-tuning: predict the next observation (loss on the completion).",
    "rl": "GSPO (sequence-level GRPO) with the format gate, rule reward and optional judge.",
}


def _stage_command(stage: str, doc: str) -> None:
    """``trajforge train <stage>``: the three stages take the same options."""

    def command(
        config: ConfigArg,
        store: StoreOpt = None,
        release: ReleaseOpt = None,
        output: OutputOpt = None,
        model: ModelOpt = None,
        as_json: Annotated[bool, typer.Option("--json")] = False,
    ) -> None:
        _train(stage, config, store, release, output, model, as_json)

    command.__doc__ = doc
    app.command(stage)(command)


for _stage, _doc in STAGES.items():
    _stage_command(_stage, _doc)


@app.command("eval")
def eval_(
    model: Annotated[str, typer.Option(help="A trained model folder (Hugging Face layout).")],
    store: Annotated[str, typer.Option("--store", "-s", help="Store path.")],
    release: Annotated[str, typer.Option(help="NAME/VERSION.")],
    split: Annotated[Literal["train", "validation", "test"], typer.Option(help="Release split.")] = "test",
    max_samples: Annotated[int, typer.Option(min=1, help="Teacher-forced samples per domain.")] = 200,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per prediction.")] = 512,
    rollout_steps: Annotated[int, typer.Option(min=1, help="Open-loop depth K.")] = 3,
    rollouts: Annotated[int, typer.Option(min=0, help="Open-loop rollouts per domain (0: none).")] = 20,
    judge_url: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL of a judge (optional).")] = None,
    judge_model: Annotated[str | None, typer.Option(help="The judge's model name.")] = None,
    out: Annotated[str | None, typer.Option(help="Write the results as JSON here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")] = False,
) -> None:
    """World-model fidelity per domain: format, masked exact match, chrF, ROUGE-L, JSON F1, open-loop drift."""
    from dataclasses import asdict

    from pipelines.cli_inputs import open_store
    from schemas.errors import ConfigError
    from training.config import RELEASE, EvalSpec, Judge
    from training.evaluate import evaluate, table, write

    handle = open_store(store)
    if not re.match(RELEASE, release):
        raise ConfigError(f"--release {release}: expected NAME/VERSION (letters, digits, '.', '_', '-')")
    if (judge_url is None) != (judge_model is None):
        raise ConfigError("--judge-url and --judge-model go together")
    spec = EvalSpec(max_samples=max_samples, max_new_tokens=max_new_tokens, rollout_steps=rollout_steps, rollouts=rollouts)
    judge = Judge(base_url=judge_url, model=judge_model) if judge_url else None
    report = evaluate(model, handle, release, split, spec, judge, log=lambda m: print(m, file=sys.stderr, flush=True))
    if out:
        write(report, out)
    typer.echo(json.dumps(asdict(report), indent=1) if as_json else table(report))
