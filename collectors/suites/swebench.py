"""SWE-bench-style instances (SWE-bench, SWE-bench Lite / Verified, SWE-Gym, SWE-smith):
``instance_id``, ``repo``, ``base_commit``, ``patch`` (the gold fix), ``test_patch``,
``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (lists, or JSON strings of lists), and
``problem_statement``. Each becomes an SWE task:

- the repository comes from a local mirror (``--repos DIR``: ``DIR/<owner>__<name>``,
  ``DIR/<name>`` or ``DIR/<owner>/<name>``, a git working copy) or else from
  ``https://github.com/<repo>.git``, checked out at ``base_commit`` (SWE-smith rows without
  one: the branch named by ``instance_id``);
- after the episode the test patch is applied (the test files it touches first go back to
  the base commit) and the tests of those files run (with pytest, also the files the test
  ids name); success is every FAIL_TO_PASS test
  passing and every PASS_TO_PASS test still passing (``swebench_eval.py``, run in the
  sandbox; pytest, Django and SymPy logs are read);
- the gold ``patch`` is the scripted solution (``actions``): ``policy: {kind: scripted}``
  is the oracle. A row's ``image_name`` (SWE-smith) becomes the task's image.

SWE-smith's rows (``repo`` under ``swesmith/``, its mirrors) turn ``patch`` around: it is
the diff that introduced the bug, which ``base_commit`` (the instance's branch) already
holds, and their tests are in the repository (no ``test_patch``); their oracle applies
``patch`` in reverse.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from collectors.swe import REPO
from schemas.errors import ConfigError
from schemas.record_files import Problem, records

EVAL_DIR = "/tmp/trajforge-eval"
GOLD = ".trajforge-gold.patch"  # where the oracle writes the gold patch, in the repository
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)


def _tests(row: dict, key: str, where: str) -> list[str]:
    value = row.get(key, [])
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            raise ConfigError(f"{where}: {key} is a string but not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ConfigError(f"{where}: {key} must be a list of test names (or a JSON string of one)")
    return value


def _need_str(row: dict, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {key} is missing or not a string")
    return value


def style_of(repo: str) -> str:
    name = repo.split("/")[-1].lower()
    if name.startswith("django"):
        return "django"
    if name.startswith("sympy"):
        return "sympy"
    return "pytest"


def test_command(style: str, files: list[str]) -> str:
    """The command that runs the test files a test patch touches."""
    quoted = " ".join(shlex.quote(f) for f in files)
    if style == "django":
        labels = [f.removeprefix("tests/").removesuffix(".py").replace("/", ".") for f in files if f.endswith(".py")]
        return "python3 tests/runtests.py --verbosity 2 --parallel 1 " + " ".join(shlex.quote(x) for x in labels)
    if style == "sympy":
        return f"python3 bin/test -C --verbose {quoted}"
    return f"python3 -m pytest -rA -p no:cacheprovider {quoted}"


def local_mirror(repos: Path | None, repo: str) -> str | None:
    if repos is None:
        return None
    owner, _, name = repo.partition("/")
    for candidate in (repos / f"{owner}__{name}", repos / name, repos / owner / name):
        if (candidate / ".git").exists():
            return str(candidate.resolve())
    return None


def swebench_task(row: Any, where: str, *, repos: Path | None = None, eval_timeout_s: float = 1800.0) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(row).__name__}")
    instance = _need_str(row, "instance_id", where)
    repo = _need_str(row, "repo", where)
    base = row.get("base_commit") or instance
    if not isinstance(base, str):
        raise ConfigError(f"{where}: base_commit is not a string")
    gold = row.get("patch") or ""
    smith = repo.startswith("swesmith/")  # patch introduced the bug base_commit holds: the fix is its reverse
    test_patch = row.get("test_patch") or ""
    if not isinstance(gold, str) or not isinstance(test_patch, str):
        raise ConfigError(f"{where}: patch and test_patch must be strings")
    f2p, p2p = _tests(row, "FAIL_TO_PASS", where), _tests(row, "PASS_TO_PASS", where)
    if not f2p:
        raise ConfigError(f"{where}: FAIL_TO_PASS is empty: nothing would tell success from failure")
    files = list(dict.fromkeys(b for _, b in _DIFF_FILE.findall(test_patch)))
    style = style_of(repo)
    run = files
    if style == "pytest":  # pytest ids name their files: a PASS_TO_PASS test elsewhere runs too
        run = list(dict.fromkeys([*files, *(t.split("::", 1)[0] for t in f2p + p2p if "::" in t)]))
    command = row.get("test_cmd") if isinstance(row.get("test_cmd"), str) else test_command(style, run)
    spec = {
        "repo_dir": REPO,
        "base_commit": base,
        "test_files": files,
        "test_patch": bool(test_patch),
        "command": command,
        "style": style,
        "timeout": eval_timeout_s,
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
    }
    evaluator = (Path(__file__).with_name("swebench_eval.py")).read_text(encoding="utf-8")
    extra: dict[str, Any] = {
        "source": "swebench",
        "source_id": instance,
        "repo": local_mirror(repos, repo) or f"https://github.com/{repo}.git",
        "base_commit": base,
        "verify_files": {
            f"{EVAL_DIR}/eval.py": evaluator,
            f"{EVAL_DIR}/spec.json": json.dumps(spec),
            f"{EVAL_DIR}/test.patch": test_patch,
        },
        "verify_timeout_s": eval_timeout_s + 60,
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
    }
    if isinstance(row.get("image_name"), str):
        extra["sandbox"] = {"image": row["image_name"]}
    for key in ("version", "created_at"):
        if isinstance(row.get(key), str):
            extra[key] = row[key]
    actions: list[dict[str, Any]] = []
    if gold.strip():
        actions = [
            {"action": "create", "path": GOLD, "content": gold},
            {
                "action": "run",
                "command": f"git apply {'-R ' if smith else ''}--whitespace=nowarn {GOLD} && rm {GOLD}",
            },
            {"action": "submit"},
        ]
    return {
        "id": f"swebench/{instance}",
        "domain": "swe",
        "env_id": repo.replace("/", "__"),
        "instruction": row.get("problem_statement") if isinstance(row.get("problem_statement"), str) else f"Resolve {instance}.",
        "check": f"python3 {EVAL_DIR}/eval.py",
        "actions": actions,
        "extra": extra,
    }


def rows_of(path: Path) -> list[tuple[str, Any]]:
    """A file's rows, each with where it is: JSON (a list, or one object), JSON Lines, either
    compressed, or Parquet, as the Hugging Face Hub serves SWE-bench and SWE-smith. The
    first part that does not read is a ``ConfigError`` naming it: a suite is all or nothing."""
    out = []
    for item in records(path):
        if isinstance(item, Problem):
            raise ConfigError(str(item))
        out.append((item.file if item.where == "record" else f"{item.file}: {item.where}", item.value))
    return out
