"""Where the real files from other projects are: ``$TRAJFORGE_AGENT_DATA``, else
``../shared/fixtures/agent-data`` beside the checkout, else beside the repository it was
cloned from (a clean clone in /tmp for CI). They are read by path, never copied here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def agent_data_dir() -> Path:
    given = os.environ.get("TRAJFORGE_AGENT_DATA")
    if given:
        return Path(given)
    candidates = [ROOT.parent]
    origin = subprocess.run(["git", "config", "--get", "remote.origin.url"], cwd=ROOT, capture_output=True, text=True)
    if origin.returncode == 0 and origin.stdout.strip().startswith("/"):
        candidates.append(Path(origin.stdout.strip()).parent)
    found = [c / "shared" / "fixtures" / "agent-data" for c in candidates]
    return next((f for f in found if (f / "SOURCES.md").is_file()), found[0])


@pytest.fixture(scope="session")
def agent_data() -> Path:
    path = agent_data_dir()
    assert (path / "SOURCES.md").is_file(), f"{path}: the shared agent-data fixtures are missing (set TRAJFORGE_AGENT_DATA)"
    return path
