"""``trajforge sim``: ``compare`` a world model against the real environments of a job, and
``serve`` a local model behind an OpenAI-compatible endpoint."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Simulated environments: a world model as the environment.")


@app.command()
def compare(
    job_file: Annotated[str, typer.Argument(help="A job YAML whose tasks have scripted actions.")],
    model: Annotated[str | None, typer.Option(help="Model folder, or name at --base-url (default: sim.model).")] = None,
    base_url: Annotated[str | None, typer.Option(help="An OpenAI-compatible endpoint (default: run the model locally).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(min=1, help="Tokens per prediction (default: sim's, else 512).")] = None,
    out: Annotated[str | None, typer.Option(help="Write the report as JSON here too.")] = None,
) -> None:
    """Run the job's scripted episodes in the real environments and in SimEnv; print the table."""
    import sys

    from collectors.jobs import load_job
    from schemas.errors import ConfigError
    from simulate.compare import compare as run_compare
    from simulate.compare import table, write
    from simulate.config import SimSection

    job, tasks = load_job(job_file)
    base = job.sim.model_dump() if job.sim else {}
    over = {k: v for k, v in {"model": model, "base_url": base_url, "max_new_tokens": max_new_tokens}.items() if v}
    if "model" not in base and "model" not in over:
        raise ConfigError(f"{job_file}: no model: give --model or a sim section in the job")
    options = SimSection.model_validate({**base, **over, "reset": "real"})
    rep = run_compare(job, tasks, options, log=lambda m: print(m, file=sys.stderr, flush=True))
    typer.echo(table(rep))
    if out:
        write(rep, out)


@app.command()
def serve(
    model: Annotated[str, typer.Option(help="A local causal LM folder (or hub name) to serve.")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one; the line printed says which).")] = 8000,
    name: Annotated[str | None, typer.Option(help="The model name the API reports (default: --model).")] = None,
) -> None:
    """Serve MODEL at http://HOST:PORT/v1 (chat completions) until interrupted."""
    import sys

    from simulate.backends import LocalBackend
    from simulate.serve import make_server

    server = make_server(LocalBackend(model), name or model, host, port)
    typer.echo(f"serving {name or model} at http://{host}:{server.server_address[1]}/v1")
    sys.stdout.flush()  # the line a caller waits for
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
