"""Checks of command-line inputs that several commands share, run before any work starts.

    store = existing_store(store)   # --store of a command that reads: it must be there

A read command given a store that does not exist would otherwise answer "nothing" (exit
0) or fail later with a library's error; here it is one ``ConfigError`` line naming the
option and the value, and the CLI exits 2.
"""

from __future__ import annotations

import os

from schemas.errors import ConfigError


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


def existing_path(path: str, what: str) -> str:
    """``path`` if it exists (a store, a run folder or a file, as the command allows)."""
    if not path or not os.path.exists(path):
        raise ConfigError(f"{path or repr(path)}: no such {what}")
    return path


def _existing_remote(uri: str, option: str) -> str:
    from pipelines.store.fs import StoreFS

    try:
        sfs = StoreFS.open(uri)
        found = sfs.is_dir(sfs.root)
    except (OSError, ValueError) as exc:  # pyarrow: unknown scheme, bad bucket name, unreachable endpoint
        raise ConfigError(f"{option} {uri}: cannot open the store: {str(exc).splitlines()[0]}") from None
    if not found:
        raise ConfigError(f"{option} {uri}: no such store")
    return uri
