"""The SWE-bench check, run inside the sandbox after the episode (copied in as a verify
file, with ``spec.json`` beside it; standard library only, no trajforge import).

It puts the test files the test patch touches back at the base commit, applies the test
patch, runs the repository's tests for those files, reads every test's outcome from the
log (pytest ``-rA`` lines; Django's ``name ... ok``; SymPy's ``name ok``), and exits 0
when every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes. It prints
what failed or was missing, so the episode's check message says why.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_PYTEST = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+)")
_DJANGO = re.compile(r"^(.*?) \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)\s*$")
_SYMPY = re.compile(r"^(test_\w+) (ok|F|E|f|X|s)\s*$")


def outcomes(log: str, style: str) -> dict:
    status = {}
    for line in log.splitlines():
        line = line.rstrip()
        if style == "pytest":
            m = _PYTEST.match(line)
            if m:
                status[m.group(2)] = "PASSED" if m.group(1) in ("PASSED", "XFAIL") else "FAILED"
        elif style == "django":
            m = _DJANGO.match(line)
            if m:
                status[m.group(1).strip()] = (
                    "PASSED" if m.group(2) in ("ok", "expected failure") or m.group(2).startswith("skipped") else "FAILED"
                )
        else:
            m = _SYMPY.match(line)
            if m:
                status[m.group(1)] = "PASSED" if m.group(2) in ("ok", "f") else "FAILED"
    return status


def main() -> int:
    spec = json.loads((HERE / "spec.json").read_text())
    repo = spec["repo_dir"]
    for f in spec["test_files"]:  # a test file the agent changed goes back to the base commit
        subprocess.run(["git", "checkout", "-q", spec["base_commit"], "--", f], cwd=repo, capture_output=True)
    if spec.get("test_patch"):
        r = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", str(HERE / "test.patch")], cwd=repo, capture_output=True, text=True
        )
        if r.returncode:
            print(f"the test patch does not apply: {r.stderr.strip()[:300]}")
            return 1
    try:
        r = subprocess.run(spec["command"], shell=True, cwd=repo, capture_output=True, text=True, timeout=spec["timeout"])
        log = r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        print(f"the tests ran past {spec['timeout']} s")
        return 1
    status = outcomes(log, spec["style"])
    wanted = spec["fail_to_pass"] + spec["pass_to_pass"]
    bad = [(t, status.get(t, "missing")) for t in wanted if status.get(t) != "PASSED"]
    for test, outcome in bad[:20]:
        print(f"{outcome}: {test}")
    print(f"{len(wanted) - len(bad)} of {len(wanted)} tests as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
