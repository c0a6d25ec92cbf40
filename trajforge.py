"""trajforge: the one command-line front door.

Each package mounts its own Typer sub-app (``collectors/cli.py``, ``pipelines/cli.py``, ...);
this module only joins them and turns trajforge's typed errors, bad option values and
OS errors into one ``error:`` line (control characters escaped) and exit 2.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError

from collectors.android.cli import app as android_app
from collectors.cli import app as collectors_app
from collectors.search.cli import app as search_app
from formats.cli import app as formats_app
from pipelines.cli import app as pipelines_app
from pipelines.progress import set_verbose
from sandboxes.cli import app as sandboxes_app
from schemas.config import validation_message
from schemas.errors import TrajforgeError, one_line
from serve.cli import serve as serve_command
from simulate.cli import app as sim_app
from training.cli import app as training_app

app = typer.Typer(
    name="trajforge",
    help="Collect, curate, release and train on agent-environment transitions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(collectors_app)
app.add_typer(pipelines_app)
app.add_typer(formats_app)
app.add_typer(sandboxes_app, name="sandboxes")
app.add_typer(search_app, name="search")
app.add_typer(sim_app, name="sim")
app.add_typer(android_app, name="android")
app.add_typer(training_app, name="train")
app.command("serve")(serve_command)


@app.callback()
def _options(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Beam's and other libraries' logs.")] = False,
) -> None:
    """Collect, curate, release and train on agent-environment transitions."""
    if verbose:
        set_verbose()


def _click_errors() -> tuple[type[Exception], ...]:
    """Click's usage error base: typer >= 0.2x vendors click as ``typer._click``, older
    typer uses click itself."""
    found = []
    for module in ("typer._click", "click"):
        with contextlib.suppress(ImportError, AttributeError):
            found.append(importlib.import_module(module).ClickException)
    return tuple(found)


USAGE_ERRORS = _click_errors()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every input or infrastructure error ends as one ``error:`` line and exit 2."""
    try:
        code = app(args=argv, prog_name="trajforge", standalone_mode=False)
    except USAGE_ERRORS as exc:  # bad option values, missing arguments: one line, not a usage box
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: typer has printed its help
            sys.exit(2)
        _fail(f"{ctx.command_path + ': ' if ctx else ''}{exc.format_message()}", exc.exit_code)
    except typer.Abort:
        _fail("aborted", 1)
    except ValidationError as exc:  # a model built from command-line values
        _fail(validation_message(exc, show_input=True))
    except BrokenPipeError:  # the reader of our output went away (| head): nothing to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- so the flush at exit cannot fail again
        sys.exit(1)
    except (TrajforgeError, OSError, UnicodeError) as exc:  # full disk, permissions, undecodable files
        _fail(str(exc) or type(exc).__name__)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int = 2) -> NoReturn:
    if "\n" in message:  # a wrapped library message: its lines are one sentence
        message = " ".join(message.split())
    print(f"error: {one_line(message)}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
