"""The security suite reuses the real sandbox fixtures (both backends, the real Podman
service and Debian root): the same set-up as tests/sandboxes, no fakes."""

from tests.sandboxes.conftest import kill_from_outside, orphan_factory, sandbox, sandbox_config, sandbox_factory

__all__ = ["kill_from_outside", "orphan_factory", "sandbox", "sandbox_config", "sandbox_factory"]
