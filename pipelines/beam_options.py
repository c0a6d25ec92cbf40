"""Beam's pipeline options, in one place for curation, releases and Beam-mode collection:
the local runner's defaults, the user's extra options passed through, and a check that turns
a bad runner or option into one line instead of Beam's argparse exit."""

from __future__ import annotations

import contextlib
import io
import logging
import os

from schemas.errors import ConfigError, require

# Runners Beam knows only by their class path: the short name a user types, and the class. Beam's
# DaskRunner lacks what these pipelines need (tagged outputs, branches, side inputs, grouping): the
# subclass in pipelines.beam_dask has it, and takes Beam's full path too. The DirectRunner is
# Beam's FnApiRunner pinned (pipelines.beam_local): Beam's own first tries a Prism binary it
# downloads at run time.
DASK = "pipelines.beam_dask.DaskRunner"
LOCAL = "pipelines.beam_local.LocalRunner"
RUNNER_PATHS = {"DaskRunner": DASK, "apache_beam.runners.dask.dask_runner.DaskRunner": DASK, "DirectRunner": LOCAL}


def with_runner_paths(args: list[str]) -> list[str]:
    """``args`` with a short runner name (``--runner DaskRunner``) made the class path Beam wants."""
    out: list[str] = []
    for i, a in enumerate(args):
        if a.startswith("--runner="):
            a = "--runner=" + RUNNER_PATHS.get(a.split("=", 1)[1], a.split("=", 1)[1])
        elif i and args[i - 1] == "--runner":
            a = RUNNER_PATHS.get(a, a)
        out.append(a)
    return out


def load_runner_options(args: list[str]) -> None:
    """Import the runner modules ``args`` name by path: their options (``--dask_client_address``)
    exist for Beam's parser only once the module that declares them is imported."""
    if any(DASK in a for a in args):
        require("distributed", "dask")  # the DaskRunner's module needs dask's distributed client
        import pipelines.beam_dask  # noqa: F401  (declares --dask_client_address and the others)


def beam_args_for(runner: str, extra: list[str], workers: int) -> list[str]:
    """Beam's options for ``--runner R`` and the user's extra ones; Beam's local runner is
    the FnApiRunner (``pipelines.beam_local``) in multi-process mode.
    Curation, releases and Beam collection all start their pipelines with these."""
    args = with_runner_paths([f"--runner={runner}", *extra])
    if runner in ("DirectRunner", "FnApiRunner") and not any(a.startswith("--direct_running_mode") for a in extra):
        args.append("--direct_running_mode=multi_processing")
    if runner in ("DirectRunner", "FnApiRunner") and not any(a.startswith("--direct_num_workers") for a in extra):
        args.append(f"--direct_num_workers={max(workers, 1)}")
    return args


def beam_options(beam_args: list[str] | None):
    """The user's Beam options as given, or Beam's local runner with a worker per core."""
    from apache_beam.options.pipeline_options import PipelineOptions

    args = with_runner_paths(list(beam_args or []))
    if not any(a.startswith("--runner") for a in args):
        args = beam_args_for("DirectRunner", args, os.cpu_count() or 1)
    load_runner_options(args)
    return PipelineOptions(args)


def check_beam_options(args: list[str]):
    """PipelineOptions for ``args``, or a one-line ConfigError naming the bad runner or option."""
    logging.disable(logging.WARNING)  # Beam's runner imports warn about absent GCP clients: noise here
    try:
        return _checked_options(args)
    finally:
        logging.disable(logging.NOTSET)


def _checked_options(args: list[str]):
    require("apache_beam", "curate")
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners import create_runner

    load_runner_options(args)
    options = PipelineOptions(args)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            known = options.get_all_options()
    except SystemExit:
        line = next((ln for ln in reversed(err.getvalue().splitlines()) if ln.strip()), "invalid options")
        raise ConfigError(f"Beam options: {line.split('error: ', 1)[-1]}") from None
    unknown = sorted(set(options.get_all_options(retain_unknown_options=True)) - set(known))
    if unknown:
        raise ConfigError(f"Beam options: unknown option {', '.join('--' + u for u in unknown)}")
    runner = options.view_as(StandardOptions).runner
    try:
        create_runner(runner)
    except ValueError:
        raise ConfigError(
            f"--runner {runner}: not a Beam runner (DirectRunner, DaskRunner, DataflowRunner, FlinkRunner, SparkRunner, ...)"
        ) from None
    return options
