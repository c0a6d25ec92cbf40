"""Security tally: runs the ``tests/security`` suite and counts, per class of attack, how
many were tried and how many were contained (the test passed).

    python benchmarks/security.py [--json out.json] [-- extra pytest args]

Each test of the suite is one attack or malformed input (a hostile query, a sandbox escape
attempt, a bad manifest, config or release file) and fails if its hole reopens, so the
counts are the suite's own verdicts, read from pytest's JUnit XML, not a separate
re-implementation. Sandbox tests are parametrized over both backends and counted per
backend. The scrubber's recall and false-positive rate come from ``benchmarks/scrub.py``.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Test module -> the class of attack it tries (RESULTS.md's rows).
CLASSES = {
    "test_query": "hostile queries refused",
    "test_store": "malformed store inputs (manifests, shards) answered with a one-line warning or error",
    "test_shell": "sandbox attacks contained: agent output, floods, shell state, dead shells, step limits",
    "test_sandbox": "sandbox attacks contained: disk, fork bombs, host details, tools",
    "test_inputs": "malformed configs and CLI inputs answered with a one-line error",
    "test_release": "tampered or malformed releases refused with a one-line error",
    "test_scrub": "scrubber checks (recall, false positives, kinds)",
}


def tally(junit: Path) -> dict[str, dict[str, dict[str, int]]]:
    """class -> backend (or "-") -> {"tried", "contained"}."""
    counts: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: {"tried": 0, "contained": 0}))
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        name = next((m for m in module if m.startswith("test_")), "other")
        if case.find("skipped") is not None:
            continue
        backend = m.group(1) if (m := re.search(r"\b(docker|local)\b", case.get("name", ""))) else "-"
        row = counts[CLASSES.get(name, name)][backend]
        row["tried"] += 1
        row["contained"] += int(case.find("failure") is None and case.find("error") is None)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the counts here as JSON")
    args, extra = ap.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "tests/security"]
        proc = subprocess.run([*cmd, *[a for a in extra if a != "--"]], cwd=ROOT)
        counts = tally(junit)
    print(f"\n## Security suite, {datetime.now(UTC):%Y-%m-%d}, {platform.node()} ({platform.processor() or platform.machine()})")
    print("| class | backend | contained / tried |\n|---|---|---|")
    for cls, by_backend in counts.items():
        for backend, row in sorted(by_backend.items()):
            print(f"| {cls} | {backend} | {row['contained']} / {row['tried']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(counts, indent=2))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
