"""trajforge: the one command-line front door.

Each package mounts its own Typer sub-app (``collectors/cli.py``, ``pipelines/cli.py``, ...);
this module only joins them and turns trajforge's typed errors into one-line messages.
"""

from __future__ import annotations

import sys

import typer

from collectors.android.cli import app as android_app
from collectors.cli import app as collectors_app
from collectors.search.cli import app as search_app
from collectors.sim.cli import app as sim_app
from pipelines.cli import app as pipelines_app
from sandboxes.cli import app as sandboxes_app
from schemas.errors import TrajforgeError
from training.cli import app as training_app

app = typer.Typer(
    name="trajforge",
    help="Collect, curate, release and train on agent-environment transitions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(collectors_app)
app.add_typer(pipelines_app)
app.add_typer(sandboxes_app, name="sandboxes")
app.add_typer(search_app, name="search")
app.add_typer(sim_app, name="sim")
app.add_typer(android_app, name="android")
app.add_typer(training_app, name="train")


def main() -> None:
    try:
        app()
    except TrajforgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # full disk, permissions, vanished paths: a line, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
