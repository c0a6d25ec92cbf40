"""Which environment class serves which domain (the one loader that picks by config)."""

from __future__ import annotations

import importlib

from sandboxes.base import SandboxConfig

ENVIRONMENTS: dict[str, str] = {
    "terminal": "collectors.terminal:TerminalEnv",
    "swe": "collectors.swe:SWEEnv",
    "web": "collectors.web.env:WebEnv",
    "mcp": "collectors.mcp.env:MCPEnv",
    "search": "collectors.search.env:SearchEnv",
    "os": "collectors.os.env:OSEnv",
    "android": "collectors.android.env:AndroidEnv",
}


def env_class(domain: str) -> type:
    module, _, name = ENVIRONMENTS[domain].partition(":")
    return getattr(importlib.import_module(module), name)


def make_env(domain: str, sandbox: SandboxConfig, env_id: str = "default", **options):
    """``options``: a domain's own settings from the job (the web section for web)."""
    return env_class(domain)(sandbox=sandbox, env_id=env_id, **options)
