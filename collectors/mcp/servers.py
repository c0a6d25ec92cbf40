"""Which MCP server an ``env_id`` names: the published servers from PyPI, the shipped stubs,
or a server the job defines (``mcp.servers``: a command over stdio or a streamable HTTP url).

Published servers run from their own virtual environments (``make mcp-servers`` installs
each into ``.venv-mcp/<program>``, apart from the collector's packages as ``uvx`` would
keep them: mcp-server-sqlite needs the 1.x SDK, the others 2.x), or from
``TRAJFORGE_MCP_BIN`` or the PATH. Arguments may name ``{workspace}`` (the
episode's working directory) and ``{seed}``; a server whose arguments do is started
afresh at every reset, so its state is the episode's own.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from collectors.env import EnvError
from collectors.mcp.client import ServerSpec

ROOT = Path(__file__).resolve().parents[2]
STUBS = ("mailbox", "bank", "tickets", "testbed")
PUBLISHED: dict[str, tuple[str, tuple[str, ...]]] = {
    "time": ("mcp-server-time", ("--local-timezone", "UTC")),
    "git": ("mcp-server-git", ("--repository", "{workspace}/repo")),
    "sqlite": ("mcp-server-sqlite", ("--db-path", "{workspace}/data.db")),
}


def published_command(program: str) -> str:
    """The path of a published server's executable, or an EnvError saying how to install it."""
    for folder in (os.environ.get("TRAJFORGE_MCP_BIN"), str(ROOT / ".venv-mcp" / program / "bin")):
        if folder and (Path(folder) / program).is_file():
            return str(Path(folder) / program)
    found = shutil.which(program)
    if found:
        return found
    raise EnvError(f"mcp: {program} is not installed: make mcp-servers (or pip install {program} and put it on PATH)")


def server_spec(env_id: str, custom: dict[str, dict[str, Any]] | None = None) -> ServerSpec:
    """The server an env_id names; unknown names are refused with the known ones."""
    custom = custom or {}
    if env_id in custom:
        body = custom[env_id]
        return ServerSpec(
            env_id,
            command=body.get("command"),
            args=tuple(body.get("args", ())),
            env=dict(body.get("env", {})),
            url=body.get("url"),
        )
    if env_id in PUBLISHED:
        program, args = PUBLISHED[env_id]
        return ServerSpec(env_id, command=published_command(program), args=args)
    if env_id in STUBS:
        return ServerSpec(
            env_id,
            command=sys.executable,
            args=("-m", f"collectors.mcp.stubs.{env_id}", "--seed", "{seed}"),
            env={"PYTHONPATH": str(ROOT)},
        )
    known = sorted({*PUBLISHED, *STUBS, *custom})
    raise EnvError(f"mcp: unknown server {env_id!r} (known: {', '.join(known)}; or define it in the job's mcp.servers)")


def per_episode(spec: ServerSpec) -> bool:
    return any("{workspace}" in a or "{seed}" in a for a in (*spec.args, *spec.env.values()))


def expand(spec: ServerSpec, workspace: str, seed: int) -> ServerSpec:
    def sub(text: str) -> str:
        return text.replace("{workspace}", workspace).replace("{seed}", str(seed))

    return ServerSpec(
        spec.name,
        spec.command,
        tuple(sub(a) for a in spec.args),
        {k: sub(v) for k, v in spec.env.items()},
        spec.url,
        cwd=workspace,
    )
