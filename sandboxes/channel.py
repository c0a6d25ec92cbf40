"""A resident bash inside a sandbox that runs one script at a time, fed through its stdin.

A terminal step is a short bash script (``sandboxes.shell``); sent as an ``exec`` it pays a
chain of process starts before its first line runs (joining the cgroup, ``nsenter``, a clean
environment, ``timeout``, bash). A channel pays that chain once per shell: the script
arrives as ``TFS <bytes> <end>`` then its bytes, runs in a subshell of the resident bash,
and its stdout is followed by ``\\0<end> <exit status>\\0``, where ``end`` is a random word
made for that request only, so the reader knows where the answer stops without trusting
any length the script (or a process of the sandbox) wrote.

A channel is a speed-up, never a dependency: a backend without one, a channel that died
before a request was sent, or a script that cannot travel (a NUL byte) go by ``exec`` as
before. A request that was sent and did not answer in time kills the channel (its whole
session and every process bearing its exec mark) and reports nothing: the caller treats
it as a step whose outcome is unknown, as it treats an exec that failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import selectors
import subprocess
import time
from collections.abc import Callable

from sandboxes.procs import children_of, kill_entered

#: What the resident bash runs. Its stderr is dropped (no one would read it: a full pipe
#: would block it). The byte count is read in the C locale (bytes, not characters); the
#: script runs in a subshell with the sandbox's own locale and no stdin of the channel.
HELPER = r"""exec 2>/dev/null
export LC_ALL=C
while read -r tag n end && [ "$tag" = TFS ] && [[ $n =~ ^[0-9]+$ ]] && [[ $end =~ ^[0-9a-f]{32}$ ]]; do
  s=; IFS= read -r -N "$n" s || break
  ( unset LC_ALL; eval "$s" ) < /dev/null
  printf '\0%s %d\0' "$end" "$?"
done
"""

_TAIL = re.compile(rb"\0([0-9a-f]{32}) (\d+)\0\Z")
_TOO_LONG = object()


class Sent(Exception):
    """The request reached the channel, which then failed (died, or ran past its deadline):
    whatever the script did so far is not known."""


class Channel:
    """One resident bash (the child of ``proc``); ``kill`` kills whatever it started."""

    def __init__(self, proc: subprocess.Popen, kill: Callable[[], object]) -> None:
        self.proc = proc  # an nsenter whose child is the resident bash
        self._kill = kill  # every process the channel started, wherever it went
        self.closed = False
        self._bash: int | None = None  # the resident bash's pid, once seen

    def usable(self) -> bool:
        """Whether the resident bash is alive: looked at directly, not through the process
        above it (``nsenter``), which outlives it by a moment and would take a request then."""
        if self.closed or self.proc.poll() is not None:
            return False
        if self._bash is None:
            children = children_of(self.proc.pid)
            if not children:  # not started yet
                return True
            self._bash = children[0]
        try:
            with open(f"/proc/{self._bash}/stat", "rb") as f:
                return f.read().rsplit(b") ", 1)[1][:1] not in (b"Z", b"X")
        except (OSError, IndexError):
            return False

    def run(self, script: bytes, deadline: float, limit: int = 64 << 20) -> tuple[int, bytes] | None:
        """The script's exit status and stdout; None when it was not sent (the channel is gone,
        or the script holds a NUL byte), so the caller may send it another way. Raises
        ``Sent`` when the channel failed after the script reached it, and when the answer
        grows past ``limit`` bytes: the pipe is open to the sandbox (``/proc/PID/fd/1`` of
        the resident bash), so an agent can write into it, and what it writes is never kept
        past that (the channel is killed, its flood with it)."""
        if b"\0" in script or not self.usable():
            return None
        end = secrets.token_hex(16)
        try:
            self.proc.stdin.write(b"TFS %d %s\n" % (len(script), end.encode()) + script)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            self.close()
            return None
        out = self._read(end.encode(), deadline, limit)
        if out is None:
            self.close()
            raise Sent("the sandbox's step channel stopped answering")
        if out is _TOO_LONG:
            self.close()
            raise Sent(f"the sandbox's step channel answered more than {limit} bytes")
        return out

    def _read(self, end: bytes, deadline: float, limit: int) -> tuple[int, bytes] | object | None:
        buf = bytearray()
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(timeout=remaining):
                    return None
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                buf += chunk
                if len(buf) > limit:
                    return _TOO_LONG
                # the end word can only be last: the channel writes it once the script is done
                if buf.endswith(b"\0") and len(buf) >= 36:
                    m = _TAIL.search(buf, max(0, len(buf) - 64))
                    if m is not None and m.group(1) == end:
                        return int(m.group(2)), bytes(buf[: m.start()])

    def close(self, *, sweep: bool = True) -> None:
        """Kill the resident bash and what it started, and reap it; safe twice. ``sweep=False``
        when the sandbox's own stop kills every process it has anyway."""
        if self.closed:
            return
        self.closed = True
        kill_entered(self.proc)
        if sweep:
            self._kill()
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()
        self.proc.wait()
