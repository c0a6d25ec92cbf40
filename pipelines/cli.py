"""Store commands: ``query``, ``stats`` and the ``shards`` group (validate, repair)."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from pipelines.release.cli import app as release_app
from pipelines.release.cli import distill_app, tokenizer_app

app = typer.Typer(no_args_is_help=True)
shards = typer.Typer(no_args_is_help=True, help="Check and repair shard files.")
app.add_typer(shards, name="shards")
app.add_typer(release_app, name="release")
app.add_typer(distill_app)
app.add_typer(tokenizer_app, name="tokenizer")

StoreOpt = Annotated[str, typer.Option("--store", "-s", help="Store path or URI.")]


#: The store's views, for ``query --help`` (``pipelines.query.VIEWS`` describes them; a test keeps the two alike).
VIEW_NAMES = "transitions, curated, rejected, releases, release_cpt, release_sft, release_rl"


@app.command(
    help="Run read-only SQL (DuckDB) over the store, confined to its views (no file, extension or setting).\n\n"
    f"Views: {VIEW_NAMES}. `trajforge views` (or `query --schema`) lists their columns.",
)
def query(
    store: StoreOpt,
    sql: Annotated[str | None, typer.Argument(help=f"A read-only SQL query over the store's views ({VIEW_NAMES}).")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table, records, csv, json (lines) or parquet.")] = "table",
    vertical: Annotated[bool, typer.Option("--vertical", "-x", help="Same as --format records, for wide rows.")] = False,
    schema: Annotated[bool, typer.Option("--schema", help="List the views and their columns instead of running SQL.")] = False,
    out: Annotated[str | None, typer.Option(help="Write the result to this file.")] = None,
    limit: Annotated[int, typer.Option(min=0, help="Rows shown by --format table and records.")] = 50,
    timeout: Annotated[float, typer.Option(help="Stop the query after this many seconds.")] = 300.0,
    memory: Annotated[str | None, typer.Option(help="Memory cap, e.g. 2GB (default: half the RAM, at most 4GB).")] = None,
) -> None:
    if schema:
        views(store)
        return
    if sql is None:
        raise typer.BadParameter("give a SQL query, or --schema to list the views", param_hint="SQL")
    from pipelines.query import execute, write_result
    from pipelines.store import Store

    result = execute(sql, Store.open(store), timeout=timeout, memory=memory)
    n = write_result(result, "records" if vertical else format, out, limit=limit)
    if out:
        typer.echo(f"wrote {n} rows to {out}", err=True)


@app.command()
def views(store: StoreOpt, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the views `trajforge query` reads, with a line on each and its columns."""
    from dataclasses import asdict

    from pipelines.cli_inputs import open_store
    from pipelines.query import describe_views, format_views

    listed = describe_views(open_store(store))
    typer.echo(json.dumps([asdict(v) for v in listed], indent=1) if as_json else format_views(listed), nl=as_json)


@app.command()
def stats(store: StoreOpt, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Counts per domain, run and day, bytes, and the failed-step ratio."""
    from dataclasses import asdict

    from pipelines.cli_inputs import open_store
    from pipelines.stats import human_bytes, store_stats

    s = store_stats(open_store(store))
    if as_json:
        typer.echo(json.dumps({**asdict(s), "failed_ratio": s.failed_ratio}, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"{s.transitions} transitions, {s.trajectories} trajectories, {s.shards} shards, "
        f"{human_bytes(s.bytes)}, failed-step ratio {s.failed_ratio:.3f}"
    )
    for title, cols, rows in (
        ("by domain", ("domain", "transitions", "trajectories", "failed steps"), s.by_domain),
        ("by run", ("domain", "run", "transitions", "bytes"), [(*r[:3], human_bytes(r[3])) for r in s.by_run]),
        ("by day (UTC)", ("day", "transitions"), s.by_day),
    ):
        table = Table(*cols, title=title)
        for row in rows:
            table.add_row(*map(str, row))
        console.print(table)


@shards.command("validate")
def shards_validate(
    path: Annotated[str, typer.Argument(help="A store, a run folder or one shard file.")],
    deep: Annotated[bool, typer.Option(help="Also check every record (ids, hashes, JSON, spans).")] = False,
) -> None:
    """Check schema, manifest hashes and row counts; exit 2 on any problem."""
    from pipelines.cli_inputs import existing_path
    from pipelines.store.check import check_path

    report = check_path(existing_path(path, "store, run folder or shard"), deep=deep)
    for problem in report.problems:
        typer.echo(problem, err=True)
    typer.echo(f"{report.shards_ok} shards ok ({report.rows} rows), {len(report.problems)} problems")
    if not report.ok:
        raise typer.Exit(2)


@shards.command("repair")
def shards_repair(path: Annotated[str, typer.Argument(help="A store or a run folder.")]) -> None:
    """Recover the complete batches of unfinished shards and fix run manifests."""
    from pipelines.cli_inputs import existing_path
    from pipelines.store.repair import repair

    reports = repair(existing_path(path, "store or run folder"))
    for r in reports:
        for line in r.lines():
            typer.echo(line)
    changed = sum(r.changed for r in reports)
    typer.echo(f"{len(reports)} runs checked, {changed} repaired")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def curate(
    ctx: typer.Context,
    config: Annotated[str, typer.Argument(help="Curation config YAML (see examples/curation/default.yaml).")],
    store: StoreOpt,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Beam's and other libraries' logs.")] = False,
    engine: Annotated[
        Literal["auto", "local", "beam"],
        typer.Option(help="auto: in this process up to 10,000 transitions without Beam options, else Beam."),
    ] = "auto",
) -> None:
    """Curate the raw runs not yet curated: validate, dedupe, filter, scrub, decontaminate.

    Extra options go to Beam (--runner=DataflowRunner --project=... , --runner=FlinkRunner ...).
    A small curation runs the same steps in this process, without Beam's start-up.
    """
    from dataclasses import asdict

    from pipelines.cli_inputs import checked_beam_args, open_store
    from pipelines.curate.config import load_curation
    from pipelines.progress import quiet, say

    cfg = load_curation(config)
    handle = open_store(store)
    beam_args = checked_beam_args(list(ctx.args))
    with quiet(not verbose):
        from pipelines.curate.run import curate as run

        report = run(cfg, handle, beam_args=beam_args, engine=engine, log=say)
    typer.echo(json.dumps(asdict(report), indent=1) if as_json else report.table())
