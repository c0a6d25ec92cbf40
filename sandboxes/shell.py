"""A persistent interactive shell inside any sandbox: bash in a tmux pane.

What a terminal agent expects: cwd, variables, functions and background jobs persist
between commands; an interactive program (a Python REPL, ``less``, ``vim``) can be driven
with keys and interrupted; a command that does not finish in time leaves the shell usable.
Everything goes through ``Sandbox.exec``, so it works the same on every backend. The
pane's raw output is logged with ``tmux pipe-pane``; each command is followed by a marker
line carrying its exit status and working directory, and ``tmux wait-for`` wakes the
caller when it is printed (no polling).
"""

from __future__ import annotations

import re
import shlex
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxes.base import SandboxError

if TYPE_CHECKING:
    from sandboxes.base import Sandbox

_STALE = re.compile(r"\n?__TF_[0-9a-f]+_\d+__ -?\d+ [^\n]*\n?")


@dataclass(frozen=True)
class ShellResult:
    output: str  # what the terminal printed (stdout and stderr interleaved, as on a screen)
    exit_code: int | None  # None while the command still runs (timed out)
    cwd: str | None
    duration_ms: float
    timed_out: bool = False
    output_truncated: bool = False


class ShellSession:
    """``run`` commands, ``send_keys`` to running programs, ``interrupt``, read the ``screen``."""

    def __init__(self, sandbox: Sandbox, *, width: int = 160, height: int = 48) -> None:
        self.sandbox = sandbox
        self.name = f"tf{uuid.uuid4().hex[:10]}"
        self.log = f"/tmp/.{self.name}.log"
        self._count = 0
        self._offset = 0
        boot = (
            f"tmux new-session -d -s {self.name} -x {width} -y {height} "
            f"'exec bash --noprofile --norc --noediting' && "
            f": > {self.log} && tmux pipe-pane -o -t {self.name} 'cat >> {self.log}'"
        )
        r = sandbox.exec(boot, timeout=20)
        if r.exit_code != 0:
            raise SandboxError(f"cannot start a tmux shell in the sandbox: {(r.stderr or r.stdout).strip()[:200]}")
        # no echo, no prompts: the log then holds only what commands print
        ready = self._send_and_wait("stty -echo; PS1=''; PS2=''; unset PROMPT_COMMAND; true", 20)
        if ready.exit_code is None:
            raise SandboxError("the sandbox shell did not come up within 20 s")

    def _script(self, keys: str, channel: str | None, timeout: float) -> str:
        cap = self.sandbox.config.output_cap_bytes
        parts = [f"tmux send-keys -t {self.name} -l -- {shlex.quote(keys)}", f"tmux send-keys -t {self.name} Enter"]
        if channel:
            parts.append(f'timeout {timeout:.3f} tmux wait-for {channel}; echo "wait=$?" >&2')
        parts.append(f'echo "size=$(stat -c %s {self.log})" >&2')
        parts.append(f"tail -c +{self._offset + 1} {self.log} | head -c {cap}")
        return "; ".join(parts)

    def _send_and_wait(self, command: str, timeout: float) -> ShellResult:
        self._count += 1
        marker = f"__TF_{self.name[2:]}_{self._count}__"
        channel = f"{self.name}-{self._count}"
        # Braces make bash read the whole command before running it, so a program that
        # reads stdin (a REPL) never swallows the marker line.
        keys = f'{{ {command}\n}}; __tf_rc=$?; printf \'\\n%s %s %s\\n\' {marker} "$__tf_rc" "$PWD"; tmux wait-for -S {channel}'
        start = time.monotonic()
        r = self.sandbox.exec(self._script(keys, channel, timeout), timeout=timeout + 10)
        duration = (time.monotonic() - start) * 1000
        size = int(re.search(r"size=(\d+)", r.stderr).group(1)) if "size=" in r.stderr else self._offset
        out = r.stdout.replace("\r\n", "\n")
        m = re.search(rf"\n?{re.escape(marker)} (-?\d+) ([^\n]*)\n?", out)
        truncated = size - self._offset > self.sandbox.config.output_cap_bytes
        if m is None:  # still running: keep the offset so the output is read again later
            return ShellResult(_STALE.sub("\n", out), None, None, duration, True, truncated)
        self._offset = size
        return ShellResult(_STALE.sub("\n", out[: m.start()]), int(m.group(1)), m.group(2), duration, False, truncated)

    def run(self, command: str, *, timeout: float | None = None) -> ShellResult:
        """Type ``command`` and wait until it finishes or ``timeout`` passes."""
        if not command.strip():
            raise ValueError("empty command")
        return self._send_and_wait(command, self.sandbox.config.exec_timeout_s if timeout is None else timeout)

    def send_keys(self, keys: str, *, enter: bool = False, literal: bool = True) -> None:
        """Type into whatever runs in the pane; ``literal=False`` takes tmux key names (``C-c``, ``Up``)."""
        flag = "-l -- " if literal else ""
        cmd = f"tmux send-keys -t {self.name} {flag}{shlex.quote(keys)}"
        if enter:
            cmd += f" && tmux send-keys -t {self.name} Enter"
        r = self.sandbox.exec(cmd, timeout=10)
        if r.exit_code != 0:
            raise SandboxError(f"tmux send-keys failed: {r.stderr.strip()[:200]}")

    def interrupt(self) -> None:
        self.send_keys("C-c", literal=False)

    def read_output(self) -> str:
        """What the pane printed since the last read (and advance past it)."""
        _code, data = self.sandbox.exec_bytes(f"tail -c +{self._offset + 1} {self.log}")
        self._offset += len(data)
        return _STALE.sub("\n", data.decode(errors="replace").replace("\r\n", "\n"))

    def screen(self) -> str:
        """The visible screen, as a terminal would show it now."""
        r = self.sandbox.exec(f"tmux capture-pane -p -t {self.name}", timeout=10)
        return r.stdout

    def close(self) -> None:
        if not self.sandbox.closed and self.sandbox.started:
            self.sandbox.exec(f"tmux kill-session -t {self.name} 2>/dev/null; rm -f {self.log}", timeout=10)
