"""``trajforge sandboxes``: build images, run the engine, check backends, collect garbage."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Sandboxes: images, engine, doctor, gc.")


@app.command()
def build(
    local_only: Annotated[bool, typer.Option("--local-only", help="Only the root folder for local sandboxes.")] = False,
    force: Annotated[bool, typer.Option(help="Rebuild the Debian root even if cached.")] = False,
    docker_host: Annotated[str | None, typer.Option(help="Engine endpoint (default: DOCKER_HOST, then Podman).")] = None,
) -> None:
    """Debootstrap the Debian root (cached) and build the terminal and SWE images from it."""
    from sandboxes.images import build_images, build_root

    root = build_root(force=force, log=lambda m: typer.echo(m, err=True))
    typer.echo(f"root: {root}")
    if local_only:
        return
    from sandboxes.engine import client, find_engine

    for name, tag in build_images(client(find_engine(docker_host)), root=root, log=lambda m: typer.echo(m, err=True)).items():
        typer.echo(f"{name}: {tag}")


engine = typer.Typer(no_args_is_help=True, help="The Podman service that serves the Docker API.")
app.add_typer(engine, name="engine")


@engine.command("start")
def engine_start() -> None:
    """Start Podman's Docker-compatible service (no-op when it answers); prints DOCKER_HOST."""
    from sandboxes.engine import start_podman_service

    typer.echo(f"DOCKER_HOST={start_podman_service()}")


@engine.command("stop")
def engine_stop() -> None:
    from sandboxes.engine import stop_podman_service

    typer.echo("stopped" if stop_podman_service() else "not running (started by trajforge)")


@app.command()
def doctor() -> None:
    """Start a sandbox on each backend and run a command; exit 1 when none works."""
    from sandboxes.doctor import doctor as run

    results = run()
    for _, line in results:
        typer.echo(line)
    if not any(ok for ok, _ in results):
        raise typer.Exit(1)


@app.command()
def gc(
    docker: Annotated[bool, typer.Option(help="Sweep containers and snapshot images.")] = True,
    local: Annotated[bool, typer.Option(help="Sweep local sandbox folders and cgroups.")] = True,
) -> None:
    """Remove containers, images, folders and cgroups of sandboxes whose process is gone."""
    from sandboxes.gc import gc as sweep

    report = sweep(docker=docker, local=local)
    for line in report.lines():
        typer.echo(line)
    n = len(report.containers) + len(report.local) + len(report.images)
    typer.echo(f"{n} removed")
