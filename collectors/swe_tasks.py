"""Real SWE task repositories, built offline from a pure-Python package installed here.

Each builtin task copies the installed ``mdurl`` package (MIT; a dependency of rich) into a
fresh git repository with a test file for its URL formatting, commits it, then breaks one
function and commits that as the task's base. The check is the test file; the gold patch
is the reverse of the break. A task names its repo as ``builtin:NAME``; the repo is built
on first use into the cache::

    repo_for("builtin:mdurl-format-port")  # -> Path to a git repo at the broken commit
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
from pathlib import Path

from collectors.env import EnvError
from sandboxes.paths import cache_dir

TESTS = """\
import mdurl


def roundtrip(url):
    return mdurl.format(mdurl.parse(url))


def test_plain_url():
    assert roundtrip("http://example.com/a/b?x=1#top") == "http://example.com/a/b?x=1#top"


def test_port_is_kept():
    assert roundtrip("http://example.com:8080/path") == "http://example.com:8080/path"


def test_ipv6_host_keeps_brackets():
    assert roundtrip("http://[::1]:3000/x") == "http://[::1]:3000/x"


def test_auth_and_protocol_relative():
    assert roundtrip("//user:pw@host.org/p") == "//user:pw@host.org/p"
"""

# name -> (file, correct text, broken text, instruction)
BREAKS = {
    "mdurl-format-port": (
        "mdurl/_format.py",
        'result += ":" + url.port if url.port else ""',
        'result += url.port if url.port else ""',
        "mdurl.format drops the ':' before the port (http://example.com:8080 becomes http://example.com8080). Fix it.",
    ),
    "mdurl-format-ipv6": (
        "mdurl/_format.py",
        'result += "[" + url.hostname + "]"',
        "result += url.hostname",
        "mdurl.format loses the square brackets around IPv6 hosts (http://[::1]:3000). Fix it.",
    ),
}

_GIT = ["git", "-c", "user.name=trajforge", "-c", "user.email=trajforge@localhost", "-c", "init.defaultBranch=main"]


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run([*_GIT, *args], cwd=repo, capture_output=True, text=True)
    if out.returncode != 0:
        raise EnvError(f"git {' '.join(args)} in {repo}: {out.stderr.strip()[:200]}")
    return out.stdout


def build_repo(name: str, dest: Path) -> Path:
    if name not in BREAKS:
        raise EnvError(f"unknown builtin SWE task repo {name!r} (known: {', '.join(BREAKS)})")
    spec = importlib.util.find_spec("mdurl")
    if spec is None or spec.origin is None:
        raise EnvError("the mdurl package is not installed (it comes with rich)")
    file, good, bad, _ = BREAKS[name]
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(Path(spec.origin).parent, tmp / "mdurl", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "tests").mkdir()
    (tmp / "tests" / "test_mdurl.py").write_text(TESTS)
    (tmp / "README.md").write_text(f"mdurl {importlib.metadata.version('mdurl')}, with tests. Run: python3 -m pytest -q\n")
    _git(tmp, "init", "-q")
    _git(tmp, "add", "-A")
    _git(tmp, "commit", "-qm", "upstream mdurl with tests")
    target = tmp / file
    text = target.read_text()
    if text.count(good) != 1:
        raise EnvError(f"{name}: the installed mdurl differs from the one this task was written for")
    target.write_text(text.replace(good, bad))
    _git(tmp, "commit", "-qam", f"task {name}")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def repo_for(ref: str) -> Path:
    """A local repo path for a task's ``extra.repo`` (``builtin:NAME`` is built and cached)."""
    if not ref.startswith("builtin:"):
        return Path(ref)
    name = ref.split(":", 1)[1]
    dest = cache_dir() / "swe-repos" / f"{name}-mdurl{importlib.metadata.version('mdurl')}"
    if not (dest / ".git").is_dir():
        dest.parent.mkdir(parents=True, exist_ok=True)
        build_repo(name, dest)
    return dest


def gold_patch(ref: str) -> str:
    repo = repo_for(ref)
    return _git(repo, "diff", "HEAD", "HEAD~1", "--", "mdurl")
