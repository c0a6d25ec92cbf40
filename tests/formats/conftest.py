"""Where the real files from other projects are: ``../shared/fixtures/agent-data`` beside
the checkout (or ``$TRAJFORGE_AGENT_DATA``). They are read by path, never copied here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def agent_data_dir() -> Path:
    given = os.environ.get("TRAJFORGE_AGENT_DATA")
    return Path(given) if given else ROOT.parent / "shared" / "fixtures" / "agent-data"


@pytest.fixture(scope="session")
def agent_data() -> Path:
    path = agent_data_dir()
    assert (path / "SOURCES.md").is_file(), f"{path}: the shared agent-data fixtures are missing (set TRAJFORGE_AGENT_DATA)"
    return path
