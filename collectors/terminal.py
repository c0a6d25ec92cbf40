"""The terminal domain: a persistent bash in a sandbox, as a terminal agent sees it.

Observation text: what the terminal printed during the step (ANSI codes removed; over the
cap, its head and tail with the cut flagged), then a status line that tells the shell's
true state: ``[exit N] CWD$`` when it is back at its prompt, ``[still running]`` while a
command or program runs, ``[at the prompt] CWD$`` when the prompt is back but the status
is unknown. ``extra`` holds cwd, exit code, whether something still runs, and the files
of /work that the step added, modified or deleted. Actions: ``run`` a command (its timeout
capped by the job's step timeout), ``send_keys`` to a running program (REPL, pager,
editor), ``interrupt`` it, ``write_file``. Resets restore a snapshot of the clean sandbox
taken at the first reset, so episodes never see each other's files or processes. A shell
or sandbox that dies raises ``SandboxError``: the episode is an infrastructure failure.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Annotated, Any

from collectors.actions import ActionError, ActionSpace, ActionSpec, NonEmpty
from collectors.env import Environment, SandboxBacked, Task
from sandboxes import SandboxConfig, ShellResult, ShellSession, make_sandbox
from sandboxes.base import WORKDIR, SandboxDied
from schemas.transition import ANSI, Observation
from schemas.volatile import detect_spans

# and a lone carriage return (a progress bar redrawing its line)
CODES = re.compile(ANSI.pattern + r"|\r(?!\n)")
OUTPUT_CAP = 16_000


@dataclasses.dataclass(frozen=True)
class RunCommand(ActionSpec):
    """Type a shell command and wait for it (up to timeout seconds, at most the job's step timeout); cwd and variables persist."""

    kind = "run"
    command: Annotated[str, NonEmpty()]
    timeout: float = 30.0

    def check(self) -> None:
        if not 0 < self.timeout <= 3600:
            raise ActionError(f"run.timeout: must be in (0, 3600], got {self.timeout}")


@dataclasses.dataclass(frozen=True)
class SendKeys(ActionSpec):
    """Type keys into the running program; special=true takes tmux key names such as C-c, Up, Escape."""

    kind = "send_keys"
    keys: str
    enter: bool = False
    special: bool = False


class Interrupt(ActionSpec):
    """Send Ctrl-C to the running program."""

    kind = "interrupt"


@dataclasses.dataclass(frozen=True)
class WriteFile(ActionSpec):
    """Write a file (created with its folders, replaced if it exists)."""

    kind = "write_file"
    path: str
    content: str


def clean(text: str, cap: int = OUTPUT_CAP) -> tuple[str, bool]:
    """ANSI codes removed; over ``cap`` characters, the head and the tail (where errors are)."""
    text = CODES.sub("", text.replace("\r\n", "\n"))
    if len(text) <= cap:
        return text, False
    return text[: cap // 2] + "\n[... output truncated ...]\n" + text[-(cap - cap // 2) :], True


class SandboxEnv(Environment, SandboxBacked):
    """Shared life cycle of sandbox domains: one sandbox, a clean snapshot, a shell."""

    def __init__(self, sandbox: SandboxConfig | None = None, env_id: str = "bash") -> None:
        super().__init__(env_id)
        self.sandbox_config = sandbox or SandboxConfig()
        self.sandbox = make_sandbox(self.sandbox_config)
        self.sandbox_backend = self.sandbox.backend
        self.image_digest = self.sandbox_config.image if self.sandbox.backend == "docker" else None
        self._clean: str | None = None
        self.shell: ShellSession | None = None
        self._files: dict[str, tuple[int, int]] = {}
        self._host_lists = False

    def _fresh(self, task: Task | None) -> float:
        """Back to a clean sandbox with the task set up; returns the reset time in ms."""
        t0 = time.perf_counter()
        if not self.sandbox.started:
            self.sandbox.start()
            self._clean = self.sandbox.snapshot()
        else:
            self.sandbox.restore(self._clean)
        if task is not None:
            task.run_setup(self)
        self.shell = self.sandbox.shell()
        self._files = self._listing()
        return (time.perf_counter() - t0) * 1000

    def step_timeout(self, timeout: float) -> float:
        """An action's own timeout, capped by the job's step timeout (the sandbox's exec limit)."""
        return min(timeout, self.sandbox_config.exec_timeout_s)

    MAX_FILES = 5000
    #: /work's files (at most MAX_FILES), where the host cannot read them itself: NUL-separated
    #: fields, so any byte in a name is only data
    LISTING = f"find {WORKDIR} -type f -printf '%s\\0%T@\\0%P\\0' 2>/dev/null | head -z -n {3 * MAX_FILES}"

    @property
    def _also(self) -> str | None:
        """The listing a shell step runs in its own round trip, unless the host reads /work itself."""
        return None if self._host_lists else self.LISTING

    def _listing(self, out: bytes | None = None) -> dict[str, tuple[int, int]]:
        """/work's files: read by the host where /work is a host folder (the local backend),
        else from ``out`` (what ``LISTING`` printed, in a shell step's own round trip) or from
        an exec of its own."""
        files = self.sandbox.work_files(self.MAX_FILES)
        self._host_lists = files is not None
        if files is not None:
            return files
        if out is None:
            _code, out = self.sandbox.exec_bytes(self.LISTING)
        fields = out.split(b"\0")
        files = {}
        for size, mtime, path in zip(fields[0::3], fields[1::3], fields[2::3], strict=False):
            try:
                files[path.decode(errors="backslashreplace")] = (int(size), int(float(mtime) * 1e6))
            except ValueError:  # a field cut short by the limit
                continue
        return files

    def _changes(self, listing: bytes | None = None) -> dict[str, list[str]]:
        before, after = self._files, self._listing(listing)
        self._files = after
        return {
            "added": sorted(set(after) - set(before)),
            "modified": sorted(p for p in after if p in before and after[p] != before[p]),
            "deleted": sorted(set(before) - set(after)),
        }

    def check_alive(self) -> None:
        """Raise ``SandboxError`` when the sandbox or its shell is gone (the runner asks before scoring)."""
        if not self.sandbox.alive():
            raise SandboxDied(f"{self.sandbox.backend} sandbox is gone")
        if self.shell is not None:
            self.shell.check_alive()

    def _close(self) -> None:
        self.sandbox.close()


TERMINAL_ACTIONS = ActionSpace("terminal", [RunCommand, SendKeys, Interrupt, WriteFile])


class TerminalEnv(SandboxEnv):
    domain = "terminal"

    def _render(
        self, output: str, exit_code: int | None, cwd: str | None, *, running: bool, note: str | None = None
    ) -> tuple[str, bool]:
        text, truncated = clean(output)
        if text and not text.endswith("\n"):
            text += "\n"
        if note:
            text += f"[{note}]\n"
        if running:
            status = "[still running]"
        else:
            status = f"[exit {exit_code}] {cwd}$" if exit_code is not None else f"[at the prompt] {cwd}$"
        return text + status, truncated

    def _observation(
        self,
        output: str,
        exit_code: int | None,
        cwd: str | None,
        *,
        running: bool,
        note: str | None = None,
        listing: bytes | None = None,
        **extra: Any,
    ):
        t0 = time.perf_counter()
        text, truncated = self._render(output, exit_code, cwd, running=running, note=note)
        changes = self._changes(listing)
        obs = Observation.make(
            text,
            "terminal",
            truncated=truncated,
            spans=detect_spans(text),
            extra={"cwd": cwd, "exit_code": exit_code, "running": running, "changed_files": changes, **extra},
        )
        return obs, (time.perf_counter() - t0) * 1000

    def _reset(self, seed: int | None, task: Task | None) -> tuple[Observation, dict[str, Any]]:
        reset_ms = self._fresh(task)
        self.cwd = WORKDIR
        obs, _ = self._observation("", 0, self.cwd, running=False)
        return obs, {"reset_ms": reset_ms, "instruction": task.instruction if task else None}

    def _step(self, action: ActionSpec) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        t0 = time.perf_counter()
        if isinstance(action, WriteFile):
            path = action.path if action.path.startswith("/") else f"{self.cwd}/{action.path}"
            try:
                self.sandbox.write_file(path, action.content)
            except OSError as exc:
                raise ActionError(str(exc)) from None
            shell = self.shell.observe(also=self._also)  # the write's status, and whether a program still runs
            r = ShellResult(shell.output, None if shell.running else 0, self.cwd, 0.0, running=shell.running, also=shell.also)
        elif isinstance(action, RunCommand):  # the file listing rides in the step's own round trip
            r = self.shell.run(action.command, timeout=self.step_timeout(action.timeout), also=self._also)
        elif isinstance(action, Interrupt):
            r = self.shell.interrupt(also=self._also)
        else:
            r = self.shell.send_keys(action.keys, enter=action.enter, literal=not action.special, also=self._also)
        self.cwd = r.cwd or self.cwd
        action_ms = (time.perf_counter() - t0) * 1000
        obs, observe_ms = self._observation(r.output, r.exit_code, self.cwd, running=r.running, note=r.note, listing=r.also)
        reward, terminated = None, False
        return obs, reward, terminated, {"action_ms": action_ms, "observe_ms": observe_ms}
