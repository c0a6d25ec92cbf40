"""The sandbox package's one error base and its dead-sandbox case.

Apart from ``base`` so that the shell (which runs on any ``Sandbox``) and the backends can
raise them without importing the protocol module that builds shells: ``base`` imports
``shell``, never the other way round.
"""

from __future__ import annotations

from schemas.errors import TrajforgeError


class SandboxError(TrajforgeError):
    """The sandbox or its engine failed (not the agent's command)."""


class SandboxDied(SandboxError):
    """The sandbox's container or init process is gone."""


class FileTooLarge(SandboxError):
    """A file in the sandbox is longer than its reader takes (``Sandbox.read_file(limit=)``)."""
