"""The SWE domain: a git repository in a sandbox, edited with SWE-agent / OpenHands-style tools.

Actions: ``view`` a file (line range), ``search`` the repo, ``str_replace`` / ``insert`` /
``create`` (the editor tools), ``run`` a command, ``run_tests``, ``submit``. Observation:
the tool's output; ``extra`` has the open file, working dir, ``git diff --stat`` and, after
tests ran, their outcome. A task names its repo (a local folder or ``.tar``/``.tar.gz``;
a git URL when the sandbox has network), base commit, setup and test commands and an
optional gold patch; ``submit`` runs the tests and ends the episode with reward 1.0 when
they pass. Every step, tests included, is bounded by the job's step timeout.
"""

from __future__ import annotations

import dataclasses
import io
import re
import shlex
import tarfile
import time
from pathlib import Path
from typing import Any

from collectors.actions import ActionError, ActionSpace, ActionSpec
from collectors.env import EnvError, Task
from collectors.terminal import RunCommand, SandboxEnv, clean
from sandboxes import FileTooLarge
from schemas.transition import Observation
from schemas.volatile import detect_spans

REPO = "/work/repo"
VIEW_LINES = 100
EDIT_MAX_BYTES = 8 << 20  # the editor opens files up to this size (a sparse file can claim terabytes)


@dataclasses.dataclass(frozen=True)
class ViewFile(ActionSpec):
    """Show a file with line numbers, lines start..end (1-based, at most 100 at a time)."""

    kind = "view"
    path: str
    start: int = 1
    end: int | None = None

    def check(self) -> None:
        if self.start < 1 or (self.end is not None and self.end < self.start):
            raise ActionError(f"view: bad line range {self.start}..{self.end}")


@dataclasses.dataclass(frozen=True)
class Search(ActionSpec):
    """Search the repository for a regular expression (grep -rn), optionally under a path."""

    kind = "search"
    pattern: str
    path: str = "."


@dataclasses.dataclass(frozen=True)
class StrReplace(ActionSpec):
    """Replace the one occurrence of old with new in a file (fails if old occurs 0 or 2+ times)."""

    kind = "str_replace"
    path: str
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class Insert(ActionSpec):
    """Insert text after line number line (0 inserts at the top)."""

    kind = "insert"
    path: str
    line: int
    text: str


@dataclasses.dataclass(frozen=True)
class Create(ActionSpec):
    """Create a new file with the given content (fails if it exists)."""

    kind = "create"
    path: str
    content: str


class RunTests(ActionSpec):
    """Run the task's test command and show the result."""

    kind = "run_tests"


class Submit(ActionSpec):
    """Submit the current state of the repository; ends the episode."""

    kind = "submit"


_PYTEST = re.compile(r"(\d+) (passed|failed|error|errors|skipped)")


def parse_test_outcome(output: str, exit_code: int) -> dict[str, Any]:
    counts = {k.rstrip("s"): int(n) for n, k in _PYTEST.findall(output)}
    return {"exit_code": exit_code, "ok": exit_code == 0, **counts}


SWE_ACTIONS = ActionSpace("swe", [ViewFile, Search, StrReplace, Insert, Create, RunCommand, RunTests, Submit])


class SWEEnv(SandboxEnv):
    domain = "swe"

    def _path(self, path: str) -> str:
        full = path if path.startswith("/") else f"{REPO}/{path}"
        if not (full == REPO or full.startswith(REPO + "/")) or "/../" in f"{full}/":
            raise ActionError(f"{path}: outside the repository")
        return full

    def _checkout(self, task: Task) -> None:
        extra = task.extra
        repo = extra.get("repo")
        if not repo:
            raise EnvError(f"task {task.id}: extra.repo is missing")
        if isinstance(repo, str) and repo.startswith("builtin:"):
            from collectors.swe_tasks import repo_for

            repo = str(repo_for(repo))
        if isinstance(repo, str) and repo.startswith(("http://", "https://", "git@")):
            r = self.sandbox.exec(f"git clone -q {shlex.quote(repo)} {REPO}", timeout=600)
        else:
            src = Path(repo)
            if src.is_dir():
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w") as tar:
                    tar.add(src, arcname=".")
                data = buf.getvalue()
            elif src.is_file():
                data = src.read_bytes()
            else:
                raise EnvError(f"task {task.id}: repo {repo} not found")
            self.sandbox.write_file("/tmp/repo.tar", data)
            r = self.sandbox.exec(f"mkdir -p {REPO} && tar -xf /tmp/repo.tar -C {REPO} && rm /tmp/repo.tar", timeout=300)
        if r.exit_code != 0:
            raise EnvError(f"task {task.id}: cannot check out {repo}: {r.stderr.strip()[:200]}")
        if extra.get("base_commit"):
            if str(extra["base_commit"]).startswith("-"):  # git would read it as an option
                raise EnvError(f"task {task.id}: base commit {extra['base_commit']!r} is not a commit")
            r = self.sandbox.exec(f"git checkout -q {shlex.quote(extra['base_commit'])}", cwd=REPO, timeout=60)
            if r.exit_code != 0:
                raise EnvError(f"task {task.id}: base commit {extra['base_commit']}: {r.stderr.strip()[:200]}")
        if extra.get("setup_command"):
            r = self.sandbox.exec(extra["setup_command"], cwd=REPO, timeout=600)
            if r.exit_code != 0:
                raise EnvError(f"task {task.id}: setup_command failed: {(r.stdout + r.stderr).strip()[-200:]}")

    def _reset(self, seed: int | None, task: Task | None) -> tuple[Observation, dict[str, Any]]:
        if task is None:
            raise EnvError("the swe environment needs a task (its repository)")
        reset_ms = self._fresh(None)
        self._checkout(task)
        task.run_setup(self)
        self.open_file: str | None = None
        self.tests: dict[str, Any] | None = None
        listing = self.sandbox.exec("git ls-files | head -n 200", cwd=REPO).stdout
        obs, _ = self._observation(f"Repository {REPO} ({task.env_id}):\n{listing}")
        return obs, {"reset_ms": reset_ms + 0.0, "instruction": task.instruction}

    def _observation(self, text: str) -> tuple[Observation, float]:
        t0 = time.perf_counter()
        text, truncated = clean(text)
        diff = self.sandbox.exec("git diff --stat", cwd=REPO).stdout.strip()
        obs = Observation.make(
            text,
            "file_view" if text.startswith(("[File:", "    1")) else "text",
            truncated=truncated,
            spans=detect_spans(text),
            extra={"open_file": self.open_file, "cwd": REPO, "diff_stat": diff, "tests": self.tests},
        )
        return obs, (time.perf_counter() - t0) * 1000

    def _run_tests(self) -> str:
        cmd = (self.task.extra.get("test_command") if self.task else None) or "python3 -m pytest -q"
        r = self.sandbox.exec(cmd, cwd=REPO, timeout=self.step_timeout(600))
        self.tests = parse_test_outcome(r.stdout + r.stderr, r.exit_code)
        return (r.stdout + r.stderr) or f"(exit {r.exit_code})"

    def _step(self, action: ActionSpec) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        t0 = time.perf_counter()
        reward, terminated = None, False
        sb = self.sandbox
        if isinstance(action, ViewFile):
            path = self._path(action.path)
            end = action.end if action.end is not None else action.start + VIEW_LINES - 1
            end = min(end, action.start + VIEW_LINES - 1)
            r = sb.exec(f"test -f {shlex.quote(path)} && wc -l < {shlex.quote(path)}")
            if r.exit_code != 0:
                raise ActionError(f"view: {action.path}: no such file")
            total = int(r.stdout.strip() or 0)
            body = sb.exec(f"awk 'NR>={action.start} && NR<={end} {{printf \"%5d  %s\\n\", NR, $0}}' {shlex.quote(path)}")
            self.open_file = action.path
            text = f"[File: {action.path} ({total} lines), lines {action.start}-{min(end, total)}]\n{body.stdout}"
        elif isinstance(action, Search):
            r = sb.exec(
                f"grep -rnI --exclude-dir=.git -e {shlex.quote(action.pattern)} {shlex.quote(action.path)} | head -n 50", cwd=REPO
            )
            text = r.stdout or f"No matches for {action.pattern!r}"
        elif isinstance(action, StrReplace | Insert | Create):
            text = self._edit(action)
        elif isinstance(action, RunCommand):
            timeout = self.step_timeout(action.timeout)
            r = sb.exec(action.command, cwd=REPO, timeout=timeout)
            text = (r.stdout + r.stderr) + ("" if r.exit_code == 0 else f"\n(exit {r.exit_code})")
            if r.timed_out:
                text += f"\n(timed out after {timeout:g} s)"
        elif isinstance(action, RunTests):
            text = self._run_tests()
        else:  # Submit
            text = self._run_tests()
            passed = self.tests["ok"]
            terminated = True
            # a task with its own check (an SWE-bench instance: its hidden tests) is scored by
            # that check after the episode; the visible tests only decide for tasks without one
            reward = None if self.task is not None and self.task.check else (1.0 if passed else 0.0)
            text = f"Submitted. Tests {'passed' if passed else 'failed'}.\n{text}"
        action_ms = (time.perf_counter() - t0) * 1000
        obs, observe_ms = self._observation(text)
        return obs, reward, terminated, {"action_ms": action_ms, "observe_ms": observe_ms}

    def _edit(self, action: StrReplace | Insert | Create) -> str:
        path = self._path(action.path)
        exists = self.sandbox.exec(f"test -f {shlex.quote(path)}").exit_code == 0
        if isinstance(action, Create):
            if exists:
                raise ActionError(f"create: {action.path} already exists")
            self.sandbox.write_file(path, action.content)
            self.open_file = action.path
            return f"Created {action.path} ({action.content.count(chr(10)) + 1} lines)."
        if not exists:
            raise ActionError(f"{action.kind}: {action.path}: no such file")
        try:
            text = self.sandbox.read_file(path, limit=EDIT_MAX_BYTES).decode(errors="replace")
        except FileTooLarge:
            raise ActionError(
                f"{action.kind}: {action.path} is larger than {EDIT_MAX_BYTES >> 20} MiB: the editor does not open it"
            ) from None
        if isinstance(action, StrReplace):
            n = text.count(action.old)
            if n != 1:
                raise ActionError(f"str_replace: old text occurs {n} times in {action.path}, expected exactly once")
            new_text = text.replace(action.old, action.new)
            first = text[: text.index(action.old)].count("\n") + 1
        else:
            lines = text.splitlines(keepends=True)
            if not 0 <= action.line <= len(lines):
                raise ActionError(f"insert: line {action.line} outside 0..{len(lines)}")
            block = action.text if action.text.endswith("\n") else action.text + "\n"
            new_text = "".join(lines[: action.line]) + block + "".join(lines[action.line :])
            first = action.line + 1
        self.sandbox.write_file(path, new_text)
        self.open_file = action.path
        shown = new_text.splitlines()[max(first - 4, 0) : first + 6]
        numbered = "\n".join(f"{i:5d}  {line}" for i, line in enumerate(shown, start=max(first - 3, 1)))
        return f"Edited {action.path}. Snippet:\n{numbered}\n"
