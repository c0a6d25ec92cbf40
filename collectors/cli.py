"""Collector commands: ``trajforge synth`` (and, later, ``collect``)."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)


@app.command()
def synth(
    store: Annotated[str, typer.Argument(help="Store to write into (created if missing).")],
    transitions: Annotated[int, typer.Option("--transitions", "-n", min=1, help="How many transitions.")] = 1000,
    seed: Annotated[int, typer.Option(help="Random seed: same seed, same records.")] = 0,
    duplicates: Annotated[
        float, typer.Option(min=0.0, max=0.99, help="Share of duplicate trajectories (half exact, half near).")
    ] = 0.0,
    run_id: Annotated[str | None, typer.Option(help="Run id (default synth-s<seed>).")] = None,
) -> None:
    """Write realistic synthetic transitions for all seven domains into a new run."""
    from collectors.synth import synth_store
    from pipelines.progress import progress

    with progress("synth", transitions) as update:
        summary = synth_store(
            store, transitions=transitions, seed=seed, duplicates=duplicates, run_id=run_id, progress=update
        )
    typer.echo(
        f"wrote {summary.transitions} transitions in {summary.trajectories} trajectories to run {summary.run_id} "
        f"({summary.exact_duplicate_trajectories} exact and {summary.near_duplicate_trajectories} near duplicate"
        " trajectories)"
    )
