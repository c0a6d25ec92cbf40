"""Environments by domain and by job backend: thin calls into the registry.

A domain's environment is its spec's (``schemas.domains``). A job's ``backend`` other than
``real`` names an environment that stands in for every domain's real one; those live above
collectors (``simulate``), so they are named by entry point and resolved only when a job
asks for one, as Gymnasium resolves ``entry_point`` strings.
"""

from __future__ import annotations

from typing import Any

from sandboxes.base import SandboxConfig
from schemas.domains import domain, load_entry_point

#: job backend -> the environment class that plays every domain (called as cls(domain, sim, env_id, real=...))
BACKENDS: dict[str, str] = {"sim": "simulate.env:SimEnv"}


def env_class(name: str) -> type:
    return domain(name).env_class()


def make_env(name: str, sandbox: SandboxConfig, env_id: str = "default", **options: Any) -> Any:
    """``options``: a domain's own settings from the job (``job.env_options(name)``)."""
    return domain(name).make(sandbox=sandbox, env_id=env_id, **options)


def backend_env(backend: str) -> type:
    """The environment class of a job backend (``sim``)."""
    return load_entry_point(BACKENDS[backend])
