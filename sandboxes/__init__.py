"""Isolated places to run agents' actions: containers (``DockerSandbox``) or Linux
namespaces over a read-only root (``LocalSandbox``), behind one ``Sandbox`` protocol."""

from __future__ import annotations

from sandboxes.base import ExecResult, FileTooLarge, Sandbox, SandboxConfig, SandboxDied, SandboxError, TreeEntry
from sandboxes.shell import ShellDied, ShellResult, ShellSession


def resolve_backend(config: SandboxConfig) -> str:
    """``auto`` means docker when an engine answers and has the image, else local."""
    if config.backend != "auto":
        return config.backend
    from sandboxes.engine import client, find_engine

    try:
        host = find_engine(config.docker_host)
        client(host).images.get(config.image)
        return "docker"
    except Exception:  # no engine, no image, no SDK: the local backend needs none of them
        return "local"


def make_sandbox(config: SandboxConfig) -> Sandbox:
    """The sandbox the config asks for, not yet started."""
    if resolve_backend(config) == "docker":
        from sandboxes.docker import DockerSandbox

        return DockerSandbox(config)
    from sandboxes.local import LocalSandbox

    return LocalSandbox(config)


def open_sandbox(config: SandboxConfig | None = None) -> Sandbox:
    """A started sandbox; close it (or use ``with``)."""
    return make_sandbox(config or SandboxConfig()).start()


__all__ = [
    "ExecResult",
    "FileTooLarge",
    "Sandbox",
    "SandboxConfig",
    "SandboxDied",
    "SandboxError",
    "ShellDied",
    "ShellResult",
    "ShellSession",
    "TreeEntry",
    "make_sandbox",
    "open_sandbox",
    "resolve_backend",
]
