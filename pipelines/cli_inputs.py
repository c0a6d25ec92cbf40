"""Checks of command-line inputs that several commands share, run before any work starts.

    store = open_store(store)                 # the handle of --store, which a command reads: it must be there
    store = open_store(store, create=True)    # --store of a command that writes: made if missing
    uri = existing_store(uri)                 # the same checks, for callees that still take a path

A read command given a store that does not exist would otherwise answer "nothing" (exit
0) or fail later with a library's error; here it is one ``ConfigError`` line naming the
option and the value, and the CLI exits 2.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from schemas.errors import ConfigError

if TYPE_CHECKING:
    from pipelines.store import Store


def open_store(uri: str, option: str = "--store", *, create: bool = False) -> Store:
    """The store handle of a command-line store: opened once here, at the edge, and passed
    down. The store must exist (``existing_store``), or with ``create`` be a place where one
    can be written (``store_target``)."""
    from pipelines.store import Store

    if create:
        return Store.open(store_target(uri, option), must_exist=False)
    return Store.open(existing_store(uri, option))


def existing_store(uri: str, option: str = "--store") -> str:
    """``uri`` if it names an existing, readable store folder (local path or object-store
    URI); otherwise a one-line error naming the option."""
    if not uri or not uri.strip():
        raise ConfigError(f"{option}: empty store path")
    if "://" in uri:
        return _existing_remote(uri, option)
    try:
        if not os.path.exists(uri):
            raise ConfigError(f"{option} {uri}: no such store")
        if not os.path.isdir(uri):
            raise ConfigError(f"{option} {uri}: not a store (a file, not a folder)")
        os.listdir(uri)
    except OSError as exc:
        raise ConfigError(f"{option} {uri}: cannot read the store: {exc.strerror or exc}") from None
    return uri


def store_target(uri: str, option: str = "--store") -> str:
    """``uri`` if a store can be written there: not empty (which would write into the
    current folder), and not an existing file."""
    if not uri or not uri.strip():
        raise ConfigError(f"{option}: empty store path")
    if "://" not in uri and os.path.exists(uri) and not os.path.isdir(uri):
        raise ConfigError(f"{option} {uri}: not a store (a file, not a folder)")
    return uri


def existing_path(path: str, what: str) -> str:
    """``path`` if it exists (a store, a run folder or a file, as the command allows), on
    local disk or in an object store."""
    if path and "://" in path:
        return _existing_remote(path, what, folder=False)
    if not path or not os.path.exists(path):
        raise ConfigError(f"{path or repr(path)}: no such {what}")
    return path


def _existing_remote(uri: str, option: str, *, folder: bool = True) -> str:
    from pipelines.store.fs import StoreFS

    try:
        sfs = StoreFS.open(uri)
        found = sfs.is_dir(sfs.root) if folder else sfs.exists(sfs.root)
    except (OSError, ValueError) as exc:  # pyarrow: unknown scheme, bad bucket name, unreachable endpoint
        raise ConfigError(f"{option} {uri}: cannot open the store: {str(exc).splitlines()[0]}") from None
    if not found:
        raise ConfigError(f"{option} {uri}: no such store" if folder else f"{uri}: no such {option}")
    return uri


def checked_beam_args(args: list[str]) -> list[str]:
    """``args`` (the Beam options a command passes through) once Beam accepts them: an
    unknown runner or option is a one-line error here, not a traceback after the work
    has started."""
    if not args:
        return args
    from pipelines.beam_options import beam_args_for, check_beam_options, with_runner_paths

    args = with_runner_paths(args)
    full = args if any(a.startswith("--runner") for a in args) else beam_args_for("DirectRunner", args, 1)
    check_beam_options(full)
    return args
