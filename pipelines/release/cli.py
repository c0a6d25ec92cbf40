"""``trajforge release ...``, ``trajforge distill`` and ``trajforge tokenizer train``."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Build, check, compare and export versioned dataset releases.")
StoreOpt = Annotated[str, typer.Option("--store", "-s", help="Store path or URI.")]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def create(
    ctx: typer.Context,
    mixture: Annotated[str, typer.Argument(help="Mixture config YAML (see examples/mixtures/default.yaml).")],
    store: StoreOpt,
    name: Annotated[str, typer.Option(help="Release name.")],
    version: Annotated[str, typer.Option(help="Release version (immutable once created).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Beam's and other libraries' logs.")] = False,
) -> None:
    """Build CPT/SFT/RL samples from curated data, mix them and publish releases/NAME/VERSION.

    Extra options go to Beam, as with curate.
    """
    from dataclasses import asdict

    from pipelines.cli_inputs import checked_beam_args, open_store
    from pipelines.progress import quiet, say
    from pipelines.release.config import load_mixture

    cfg = load_mixture(mixture, store)
    handle = open_store(store)
    beam_args = checked_beam_args(list(ctx.args))
    with quiet(not verbose):
        from pipelines.release.build import create_release

        report = create_release(cfg, handle, name, version, beam_args=beam_args, log=say)
    typer.echo(json.dumps(asdict(report), indent=1) if as_json else report.summary())


PIN_HELP = "The manifest's sha256 you trust (training reports record it): refuse any other manifest."


@app.command()
def verify(
    release: Annotated[str, typer.Argument(help="A release folder: STORE/releases/NAME/VERSION.")],
    manifest_sha256: Annotated[str | None, typer.Option(help=PIN_HELP)] = None,
) -> None:
    """Recompute every file's sha256; report changed, missing and extra files (exit 2)."""
    from pipelines.release.manifest import load
    from schemas.errors import StoreError

    rel = load(release)
    if manifest_sha256 is not None and manifest_sha256.lower() != rel.manifest_sha256:
        raise StoreError(f"{release}/manifest.json: sha256 {rel.manifest_sha256} is not the expected {manifest_sha256}")
    found = [str(p) for p in rel.problems()]
    for p in found:
        typer.echo(p, err=True)
    typer.echo(f"{len(rel.manifest.files)} files checked, {len(found)} problems (manifest sha256 {rel.manifest_sha256})")
    if found:
        raise typer.Exit(2)


@app.command()
def diff(
    a: Annotated[str, typer.Argument(help="Release folder A.")], b: Annotated[str, typer.Argument(help="Release folder B.")]
) -> None:
    """Samples added and removed from A to B, per stage, split and domain."""
    from pipelines.release.inspect import diff as compare

    rows = compare(a, b)
    typer.echo(f"{'stage':<5} {'split':<10} {'domain':<9} {'added':>8} {'removed':>8} {'kept':>8}")
    for r in rows:
        typer.echo(f"{r['stage']:<5} {r['split']:<10} {r['domain']:<9} {r['added']:>8} {r['removed']:>8} {r['kept']:>8}")


@app.command("list")
def list_(store: StoreOpt) -> None:
    """The releases of a store; a release whose manifest is refused is named on stderr (exit 2)."""
    from pipelines.release.inspect import list_releases
    from pipelines.store import Store

    skipped: list[str] = []
    releases = list_releases(Store.open(store), on_skip=skipped.append)  # StoreError when there is no such store
    for r in releases:
        typer.echo(
            f"{r['name']} {r['version']}: {r['samples']:,} samples, {r['tokens']:,} tokens in {r['files']} files "
            f"(curations {r['curations']}, config {r['config_hash']})"
        )
    for line in skipped:
        typer.echo(f"error: {line}", err=True)
    if not releases and not skipped:
        typer.echo(f"{store}: no releases")
    if skipped:
        raise typer.Exit(2)


@app.command()
def export(
    release: Annotated[str, typer.Argument(help="A release folder.")],
    out: Annotated[str, typer.Option(help="Output folder.")],
    format: Annotated[str, typer.Option("--format", help="agentworldbench (the only one)")] = "agentworldbench",
) -> None:
    """Check the files it reads, then write the SFT test split in another tool's format,
    printing where each file went: agentworldbench writes OUT/<domain>_test.jsonl, the files
    AgentWorldBench's harness loads (eval.py infer --data-dir OUT)."""
    from pipelines.release.inspect import export_agentworldbench
    from schemas.errors import ConfigError

    if format != "agentworldbench":
        raise ConfigError(f"--format: unknown format {format!r} (expected agentworldbench)")
    for path, n in sorted(export_agentworldbench(release, out).items()):
        typer.echo(f"{path}: {n:,} samples")


distill_app = typer.Typer(no_args_is_help=True)


@distill_app.command()
def distill(
    store: StoreOpt,
    curation: Annotated[str, typer.Option(help="The curation id whose kept targets get reasoning texts.")],
    model: Annotated[str, typer.Option(help="Model name at the endpoint.")],
    base_url: Annotated[str, typer.Option(help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.")],
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key.")] = "OPENAI_API_KEY",
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many texts (the last shard may be cut).")] = None,
) -> None:
    """Fill the reasoning that SFT completions carry before the predicted observation."""
    from pipelines.cli_inputs import open_store
    from pipelines.release.distill import distill as run

    r = run(open_store(store), curation, model=model, base_url=base_url, api_key_env=api_key_env, limit=limit, log=_log)
    typer.echo(f"{r.written} reasoning texts in {r.shards} shard files ({r.skipped_shards} shards already done)")


tokenizer_app = typer.Typer(no_args_is_help=True, help="Tokenizers for token counts and tiny models.")


@tokenizer_app.command("train")
def tokenizer_train(
    store: StoreOpt,
    out: Annotated[str, typer.Option(help="Where to write tokenizer.json (a file or a folder).")],
    vocab_size: Annotated[int, typer.Option(min=259, help="Vocabulary size (256 bytes, 3 specials, merges).")] = 4096,
    tree: Annotated[str, typer.Option(help="Which transitions: curated or raw.")] = "curated",
    limit: Annotated[int, typer.Option(min=1, help="At most this many transitions.")] = 20_000,
) -> None:
    """Train a byte-level BPE tokenizer on a store's texts (no download needed)."""
    from itertools import islice

    from pipelines.cli_inputs import open_store
    from pipelines.release.tokens import train_tokenizer

    handle = open_store(store)

    def texts():
        for t in islice(handle.iter_transitions(tree), limit):
            yield t.action.canonical
            yield t.next_state.text

    typer.echo(f"wrote {train_tokenizer(texts(), out, vocab_size)}")
