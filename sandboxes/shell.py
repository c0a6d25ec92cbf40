"""A persistent interactive shell inside any sandbox: bash in a tmux pane.

What a terminal agent expects: cwd, variables, functions and background jobs persist
between commands; an interactive program (a Python REPL, ``less``, ``vim``) can be driven
with keys and interrupted; a command that does not finish in time leaves the shell usable.
Every step is one short bash script run in the sandbox: through the sandbox's channel
(``sandboxes.channel``, a resident bash fed through pipes: no process start before the
script runs) where the backend has one, else as a ``Sandbox.exec``, so it works the same on
every backend.

The protocol keeps data and control apart, so that nothing a command prints can forge a
result (see ``_STEP`` for the script each step runs):

* **Data**: the pane's raw output, appended to a log by ``tmux pipe-pane``. It is only ever
  cut into a head and a tail by byte offsets (``stat``, ``dd``), never
  searched for control information, so floods cost the same to read as one line.
* **Control**: the shell's own hook ``__tf_prompt`` writes files in a private folder named
  by a random secret: ``status`` (prompt count, the command's token, ``$?``, then ``$PWD``
  as raw bytes). It runs right after each typed command (in the same line, so a REPL the
  command starts cannot swallow it) and from ``PROMPT_COMMAND`` after lines typed as keys.
  ``PS0`` records in ``started`` that a line was read; an ``EXIT`` trap records an ``exit``.
  A FIFO wakes the waiting step, and ``/proc`` says whether bash is alive (pid and start
  time) and whether it owns the terminal's foreground.
* **Commands** travel as a file the step writes (a short one from a ``$'...'`` literal in
  the step's script, a long one from the exec's stdin); the pane only ever sees
  ``. ARM; __tf_tok=TOKEN; eval "$(< FILE)"; __tf_prompt line``, whatever the command holds
  (sourcing ARM re-installs the hooks, so an overwritten ``PROMPT_COMMAND`` does not lose
  them, and a folder wiped with ``/tmp`` is made again by the next step).

After a prompt, the hook also prints an OSC sequence carrying the prompt count to the pane;
it only tells the reader that the pane's output has reached the log (tmux lags behind the
command), and a forged one can at worst move part of a step's output into the next step.
A shell that is gone raises ``ShellDied``; a sandbox that is gone raises ``SandboxDied``.
"""

from __future__ import annotations

import re
import secrets
import shlex
import time
from dataclasses import dataclass
from typing import Protocol

from sandboxes.channel import HELPER, Channel, Sent
from sandboxes.errors import SandboxDied, SandboxError

#: The hook's flush mark in the pane output; removed from what a step returns.
_BARRIER = re.compile(rb"\x1b\]7717;\d+\x07")
_HEADER = re.compile(rb"TF1 ([01]) ([01]) ([01]) ([01]) ([01]) (\d+) (\d+) (\d+) (\d+) (\d+)\n")
_STATUS = re.compile(rb"(\d+) ([0-9a-f]+|-) (\d+)\n")
_ALSO = b"\0TF-ALSO\0"  # where the output of a step's ``also`` command starts
ROTATE_BYTES = 4 << 20  # a log bigger than this is emptied at the next idle step
_REOPEN = 3  # a shell's channel killed more often than this (by its agent, say): steps go by exec
# What a step's answer may hold beyond the output cap: the header, the status (a path) and an
# ``also`` listing. More is a flood an agent wrote into the step's pipe: never kept.
_FRAME_SLACK = 16 << 20


class _Limits(Protocol):
    output_cap_bytes: int
    exec_timeout_s: float


class _Output(Protocol):
    exit_code: int
    stdout: str
    stderr: str


class ShellHost(Protocol):
    """What a shell needs of its sandbox; every ``sandboxes.base.Sandbox`` has it. (A protocol,
    not the class, because ``base`` builds shells: the shell module stays below it.)"""

    backend: str
    config: _Limits
    started: bool
    closed: bool

    def alive(self) -> bool: ...

    def exec(self, cmd: str, *, timeout: float | None = None, stdin: str | bytes | None = None) -> _Output: ...

    def exec_bytes(
        self, cmd: str, *, stdin: bytes | None = None, timeout: float | None = None, cap: int | None = None
    ) -> tuple[int, bytes]: ...

    def channel(self, script: str) -> Channel | None: ...


class ShellDied(SandboxError):
    """The shell (bash or its tmux server) is gone while its sandbox may still run."""


@dataclass(frozen=True)
class ShellResult:
    output: str  # what the terminal printed during the step (head and tail when over the cap)
    exit_code: int | None  # the last command's status when the shell is back at its prompt
    cwd: str | None
    duration_ms: float
    timed_out: bool = False  # the step's time ran out before the command finished
    output_truncated: bool = False
    running: bool = False  # a command or foreground program still runs (the shell is not at its prompt)
    note: str | None = None  # why a command was not typed, or why the state is unknown
    also: bytes | None = None  # the stdout of the step's ``also`` command, when it ran


# The hooks, sourced by the rc file and again before every command, so that a shell whose
# PROMPT_COMMAND or PS0 was overwritten gets them back. {d} is the private folder.
_ARM = r"""
__tf_dir={d}; __tf_tok=-
[[ ${{__tf_n-}} =~ ^[0-9]+$ ]] || {{ read -r __tf_n _ < "$__tf_dir/status"; [[ $__tf_n =~ ^[0-9]+$ ]] || __tf_n=0; }} 2>/dev/null
__tf_ret() {{ return "${{__tf_rc:-0}}"; }}
__tf_prompt() {{
  local rc=$?; __tf_rc=$rc; unset __tf_cmd
  # the typed line's own call ("line") reports; PROMPT_COMMAND's right after it has nothing new
  if [[ $1 == line ]]; then __tf_line=1; elif [[ ${{__tf_line-}} == 1 ]]; then __tf_line=; return $rc; fi
  __tf_n=$((__tf_n + 1))
  # the hook's own programs run in bash's process group (no job control), so that they never
  # hold the terminal: a reader that saw the new status meanwhile would think a program still ran
  local jc=0; [[ $- == *m* ]] && jc=1 && set +m
  [ -d "$__tf_dir" ] || mkdir -m 700 "$__tf_dir"
  printf '%s %s %s\n%s' "$__tf_n" "$__tf_tok" "$rc" "$PWD" > "$__tf_dir/status.tmp" \
    && mv -f "$__tf_dir/status.tmp" "$__tf_dir/status"
  stty -echo 2>/dev/null
  [ "$jc" = 1 ] && set -m
  printf '\033]7717;%s\007' "$__tf_n"
  printf x 1<> "$__tf_dir/wake"
  return $rc
}} 2>/dev/null
__tf_ps0() {{ printf '%s\n' "$__tf_n" 1<> "$__tf_dir/started"; }} 2>/dev/null
[[ " ${{PROMPT_COMMAND[*]-}} " == *" __tf_prompt "* ]] || PROMPT_COMMAND=(__tf_prompt "${{PROMPT_COMMAND[@]}}")
[[ ${{PS0-}} == *__tf_ps0* ]] || PS0+='$(__tf_ps0)'
"""

# The pane's bash runs this first (--rcfile): no prompt text, no echo, no history file.
_RC = r"""
PS1=''; PS2=''; HISTFILE=''; unset TMUX TMUX_PANE
. {d}/arm
trap 'printf "%s\n" "$?" > "$__tf_dir/exited"; printf x 1<> "$__tf_dir/wake"' EXIT
stty -echo 2>/dev/null
"""

# One step, run through the channel or by ``Sandbox.exec``: MODE run types the command (once the shell is at its
# prompt) and waits for its token in the status; keys sends keys and waits up to SETTLE
# for the shell to come back to its prompt; boot waits for the first prompt. It writes a
# frame on stdout: a header line of integers (alive, done, at prompt, typed, rotated,
# prompt count, log size, head length, tail length, offset), the head and tail of the
# step's output, then the status file. Stderr is never parsed.
_STEP = r"""
D={d}; P={pid}; S0={start}; OFF={off}; MODE={mode}; TOK={tok}; HEAD={head}; TAIL={tail}
end=$(( ${{EPOCHREALTIME/./}} + {budget_us} )); settle_end=$(( ${{EPOCHREALTIME/./}} + {settle_us} ))
heal() {{  # an agent that wiped /tmp took the folder: make it again (the shell's own state lives on)
  [ -e "$D/arm" ] && [ -e "$D/log" ] && [ -p "$D/wake" ] && [ -S "$D/sock" ] && return 0
  mkdir -p -m 700 "$D"; [ -p "$D/wake" ] || {{ rm -f "$D/wake"; mkfifo "$D/wake"; }}
  [ -S "$D/sock" ] || {{ kill -USR1 {tmux}; for _ in 1 2 3 4 5 6 7 8 9 10; do [ -S "$D/sock" ] && break; sleep 0.1; done; }}
  [ -e "$D/log" ] || {{ : > "$D/log"; tmux -S "$D/sock" pipe-pane -t tf; tmux -S "$D/sock" pipe-pane -t tf "exec cat >>$D/log"; }}
  cat > "$D/arm" <<'__TF_ARM_END__'
{arm}
__TF_ARM_END__
}}
heal 2>/dev/null
exec 9<>"$D/wake"
alive() {{
  local st; read -r st < /proc/$P/stat 2>/dev/null || return 1
  set -- ${{st##*) }}; [ "$1" != Z ] && [ "${{20}}" = "$S0" ] && [ ! -e "$D/exited" ] || return 1
  pgrp=$3; tpgid=$6
}}
state() {{
  n=0 tok=- rc=0 k=0
  # no status: /proc decides. Looked for before it is read: one written in between is then
  # read whole, never taken for a status of prompt 0 that exists
  local have=1; [ -e "$D/status" ] || have=0
  read -r n tok rc < "$D/status" 2>/dev/null; read -r k < "$D/started" 2>/dev/null
  read -r LAST < "$D/last" 2>/dev/null || LAST=$tok  # the token of the last command typed
  [[ $n =~ ^[0-9]+$ ]] || n=0; [[ $k =~ ^[0-9]+$ ]] || k=0; [ "$have" = 1 ] || k=-1
  if alive; then up=1; else up=0; fi
  # free: the last typed command is done and bash owns the terminal; prompt: and no line was read since
  free=0; [ "$up" = 1 ] && [ "$pgrp" = "$tpgid" ] && [ "$tok" = "$LAST" ] && free=1
  prompt=0; [ "$free" = 1 ] && (( n > k )) && prompt=1
}}
nap() {{  # until the shell wakes us, at most $1 microseconds and never past the step's end
  local now=${{EPOCHREALTIME/./}} t=$1; (( now + t > end )) && t=$(( end - now )); (( t <= 0 )) && return 1
  printf -v t '%d.%06d' $(( t / 1000000 )) $(( t % 1000000 )); read -r -t "$t" -n 1 -u 9 _; return 0
}}
idle() {{  # the terminal's foreground program waits (for input): a running or exiting one may yet print
  local st; read -r st < /proc/$tpgid/stat 2>/dev/null || return 1
  set -- ${{st##*) }}; [ "$1" = S ] || [ "$1" = T ] || [ "$1" = t ]
}}
tx() {{ tmux -S "$D/sock" send-keys -t tf "$@"; }}
state; n0=$n; done=0; typed=0; rotated=0; flush=1
if [ "$MODE" = run ]; then
  while [ "$up" = 1 ] && [ "$free" = 0 ]; do nap 250000 || break; state; done
  if [ "$free" = 1 ]; then
    # the log only grows past OFF: a log that can be rotated (all read, over the limit) has OFF over it
    if (( OFF > {rotate} )) && [ "$(stat -c %s "$D/log")" = "$OFF" ]; then : > "$D/log"; OFF=0; rotated=1; fi
    # read by a builtin (no fork); __tf_ret gives the command the last status as its $?, as a terminal would
    line=". $D/arm; __tf_tok=$TOK; IFS= read -r -d '' __tf_cmd < $D/cmd; __tf_ret; eval \"\$__tf_cmd\"; __tf_prompt line"
    # one tmux call for the three keys: each tmux process start costs milliseconds
    {write_cmd} > "$D/cmd" && printf '%s\n' "$TOK" > "$D/last" \
      && tx C-u \; send-keys -t tf -l -- "$line" \; send-keys -t tf Enter && typed=1
  fi
  while [ "$up" = 1 ] && [ "$typed" = 1 ] && [ "$tok" != "$TOK" ]; do nap 250000 || break; state; done
  [ "$tok" = "$TOK" ] && done=1
elif [ "$MODE" = keys ]; then
  size0=$(stat -c %s "$D/log"); seen=$size0; quiet=${{EPOCHREALTIME/./}}
  fg0=0; [ "$up" = 1 ] && [ "$pgrp" = "$tpgid" ] && fg0=1  # bash itself owned the terminal before the keys
  {keys}
  while nap 50000; do  # until the prompt is back, or the program's answer has stopped growing for 0.3 s and it waits
    state; [ "$up" = 0 ] && break; [ "$prompt" = 1 ] && (( n > n0 )) && break
    now=${{EPOCHREALTIME/./}}
    # the program that ran has ended and bash owns the terminal again: its hook is about to
    # report (slowly on a loaded host), so wait for it up to the step's end, not for quiet
    [ "$fg0" = 0 ] && [ "$pgrp" = "$tpgid" ] && quiet=$now && settle_end=$end
    (( now >= settle_end )) && break
    sz=$(stat -c %s "$D/log")
    if [ "$sz" != "$seen" ]; then seen=$sz; quiet=$now; elif (( sz > size0 && now - quiet >= 300000 )) && idle; then break; fi
  done
  state; [ "$prompt" = 1 ] && (( n > n0 )) && done=1
else  # boot: up to the first prompt, the rc's own (its stty -echo has run: a line typed before would be echoed)
  while [ "$up" = 1 ] && {{ [ "$free" = 0 ] || (( n == 0 )); }}; do nap 250000 || break; state; done
  (( n > 0 )) || prompt=0; done=$prompt; flush=0
fi
if [ "$done" = 1 ] && [ "$flush" = 1 ]; then  # the pane's output has reached the log once the hook's mark is in it
  # Scanned incrementally from the step's offset (a background job may print after the mark);
  # waited for while the log still grows (tmux can lag far behind a flood), never past the
  # step's end (at least 3 s), nor once the log has stopped growing for 1 s.
  printf -v bar '\033]7717;%s\007' "$n"; now=${{EPOCHREALTIME/./}}; grow=$now
  flush_end=$(( end > now + 3000000 ? end : now + 3000000 )); pos=$OFF; last=-1
  # mostly the mark is among the log's last bytes already (prompt counts only grow: it is this step's)
  [[ $(exec tail -c 4096 "$D/log" 2>/dev/null) == *"$bar"* ]] 2>/dev/null && flush=2  # exec: one process, not two
  while [ "$flush" = 1 ]; do
    sz=$(stat -c %s "$D/log")
    if (( sz > pos )); then
      tail -c +$(( pos + 1 )) "$D/log" | head -c $(( sz - pos )) | grep -qaF -- "$bar" && break
      pos=$(( sz - ${{#bar}} > OFF ? sz - ${{#bar}} : OFF ))
    fi
    now=${{EPOCHREALTIME/./}}; (( now >= flush_end )) && break
    if (( sz != last )); then last=$sz; grow=$now; elif (( now - grow >= 1000000 )); then break; fi
    read -r -t 0.02 -u 9 _
  done
  state
fi
heal 2>/dev/null; size=$(stat -c %s "$D/log"); (( size < OFF )) && OFF=$size
len=$(( size - OFF )); h=$len; t=0
if (( len > HEAD + TAIL )); then h=$HEAD; t=$TAIL; fi
printf 'TF1 %s %s %s %s %s %s %s %s %s %s\n' "$up" "$done" "$prompt" "$typed" "$rotated" "$n" "$size" "$h" "$t" "$OFF"
cut() {{ dd if="$D/log" iflag=skip_bytes,count_bytes skip="$1" count="$2" bs=64K status=none; }}  # one process, not tail | head
cut "$OFF" "$h"
(( t > 0 )) && cut $(( size - t )) "$t"
st=; IFS= read -r -d '' st < "$D/status" 2>/dev/null; printf '%s' "$st"  # a path holds no NUL
{also}
exit 0
"""


@dataclass(frozen=True)
class _Frame:
    alive: bool
    done: bool
    at_prompt: bool
    typed: bool
    prompts: int
    size: int
    head: bytes
    tail: bytes
    skipped: int
    exit_code: int | None
    cwd: str | None
    also: bytes | None = None


def _parse(raw: bytes) -> _Frame | None:
    """The step script's frame, or None when it is not exactly what the script writes."""
    m = _HEADER.match(raw)
    if m is None:
        return None
    up, done, prompt, typed, _rotated, n, size, h, t, off = (int(x) for x in m.groups())
    body = raw[m.end() :]
    if len(body) < h + t or off + h + t > size:
        return None
    head, tail, status = body[:h], body[h : h + t], body[h + t :]
    also = None
    if _ALSO in status:  # no status or path holds a NUL: the first mark is the one the script wrote
        status, also = status.split(_ALSO, 1)
    code, cwd = None, None
    s = _STATUS.match(status)
    if s is not None:
        code, cwd = int(s.group(3)), status[s.end() :].decode(errors="backslashreplace")
    return _Frame(up == 1, done == 1, prompt == 1, typed == 1, n, size, head, tail, size - off - h - t, code, cwd, also)


_LITERAL_MAX = 4096  # bytes of a command passed in the script (4x that escaped: far below an argument's 128 KiB)
_PLAIN = frozenset(b'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 _-+=.,:/@%^*()[]{}<>|&;!?#~$`"')


def _ansi_c(data: bytes) -> str:
    """``data`` as a bash ``$'...'`` word: the same bytes, every one but plain ASCII as ``\\xHH``."""
    return "$'" + "".join(chr(b) if b in _PLAIN else f"\\x{b:02x}" for b in data) + "'"


def _text(data: bytes) -> str:
    return _BARRIER.sub(b"", data).decode(errors="replace").replace("\r\n", "\n")


class ShellSession:
    """``run`` commands, ``send_keys`` to running programs, ``interrupt``, read the ``screen``."""

    def __init__(self, sandbox: ShellHost, *, width: int = 160, height: int = 48) -> None:
        self.sandbox = sandbox
        self.dir = f"/tmp/.tf-{secrets.token_hex(16)}"
        self._offset = 0
        d = shlex.quote(self.dir)
        self._arm = _ARM.format(d=d)
        self._chan: Channel | None = None
        self._chan_opens = 0
        self._limit = sandbox.config.output_cap_bytes + _FRAME_SLACK  # the most a step's answer is read to
        # one tmux client starts the server, pipes the pane to the log and names the pids
        tmux = (
            f"tmux -S {d}/sock new-session -d -s tf -x {width} -y {height}"
            f" 'exec bash --noprofile --rcfile {d}/rc --noediting -i'"
            f" \\; pipe-pane -o -t tf 'exec cat >> {d}/log' \\; display -p -t tf '#{{pane_pid}} #{{pid}}'"
        )
        boot = (
            f"umask 077 && mkdir {d} && mkfifo {d}/wake && : > {d}/log && echo 0 > {d}/started"
            f" && printf %s {shlex.quote(self._arm)} > {d}/arm && printf %s {shlex.quote(_RC.format(d=d))} > {d}/rc"
            f" && ids=$(exec {tmux}) && set -- $ids && p=$1 s=$2 && read -r st < /proc/$p/stat"
            ' && set -- ${st##*) } && echo "TF1 $p ${20} $s"'
        )
        code, raw = self._send(boot, stdin=None, timeout=20)
        m = re.fullmatch(rb"TF1 (\d+) (\d+) (\d+)\n", raw) if code == 0 else None
        if m is None:
            raise SandboxError(f"cannot start a tmux shell in the sandbox: {raw.decode(errors='replace').strip()[:200]}")
        self.pid, self._start, self._tmux = int(m.group(1)), int(m.group(2)), int(m.group(3))
        try:
            first = self._step("boot", budget=20.0)
        except _Unknown as exc:
            raise SandboxError(f"the sandbox shell did not come up: {exc}") from None
        if not first.at_prompt:
            raise SandboxError("the sandbox shell did not come up within 20 s")

    # -- the protocol ------------------------------------------------------------------------
    def _step(
        self,
        mode: str,
        *,
        budget: float,
        settle: float = 0.0,
        keys: str = ":",
        tok: str = "-",
        also: str | None = None,
        command: bytes | None = None,
    ) -> _Frame:
        """Run the step script once; a frame that is not exactly right is never guessed at.
        ``also``: a command run at the end of the same exec (a listing of the files), whose
        stdout is the frame's ``also``: one round trip for the step and what the caller reads
        after it. ``command``: what ``run`` types; a short one is a literal in the script,
        written by a builtin (no process), a long one comes through the exec's stdin."""
        cap = self.sandbox.config.output_cap_bytes
        literal = command is not None and len(command) <= _LITERAL_MAX and b"\0" not in command
        script = _STEP.format(
            d=shlex.quote(self.dir),
            pid=self.pid,
            start=self._start,
            off=self._offset,
            mode=mode,
            tok=tok,
            head=cap // 2,
            tail=cap - cap // 2,
            budget_us=int(budget * 1e6),
            settle_us=int(settle * 1e6),
            rotate=ROTATE_BYTES,
            keys=keys,
            tmux=self._tmux,
            arm=self._arm,
            also=f"printf '\\0TF-ALSO\\0'; {{ {also}\n}} 2>/dev/null" if also else "",
            write_cmd=f"printf %s {_ansi_c(command)}" if literal else "cat",
        )
        code, raw = self._send(script, stdin=None if literal else command, timeout=budget + 15)
        frame = _parse(raw) if code == 0 else None
        if frame is None:
            self.check_alive()
            raise _Unknown(raw.decode(errors="replace").strip()[-200:] or f"exit {code}")
        if not frame.alive:
            raise self._died()
        self._offset = frame.size
        return frame

    def _send(self, script: str, *, stdin: bytes | None, timeout: float) -> tuple[int, bytes]:
        """Run a step script through the shell's channel (``sandboxes.channel``: no process
        start before it runs) where the sandbox has one and the script needs no stdin, else
        as an exec. A channel that is gone is opened again, at most ``_REOPEN`` times."""
        if stdin is None and self._chan_opens <= _REOPEN:
            if self._chan is None or not self._chan.usable():
                self._chan = self.sandbox.channel(HELPER) if self.sandbox.alive() else None
                self._chan_opens += 1
            if self._chan is not None:
                try:
                    got = self._chan.run(script.encode(errors="surrogateescape"), time.monotonic() + timeout, self._limit)
                except Sent:
                    return -1, b""
                if got is not None:
                    return got
        return self.sandbox.exec_bytes(script, stdin=stdin, timeout=timeout, cap=self._limit)

    def check_alive(self) -> None:
        """Raise when the sandbox or the shell is gone; return when alive or when it cannot tell."""
        if not self.sandbox.alive():
            raise SandboxDied(f"{self.sandbox.backend} sandbox died under the shell")
        probe = (  # builtins only: it answers "down" only when it could look
            f'if read -r st < /proc/{self.pid}/stat && set -- ${{st##*) }} && [ "$1" != Z ]'
            f' && [ "${{20}}" = {self._start} ] && [ ! -e {shlex.quote(self.dir)}/exited ]; then echo up; else echo down; fi'
        )
        code, out = self._send(probe, stdin=None, timeout=10)
        if code != 0:  # the channel died under the probe (an agent's `kill -9 -1` may still be sweeping): ask by exec
            _code, out = self.sandbox.exec_bytes(probe, timeout=10)
        if out == b"down\n":
            if not self.sandbox.alive():
                raise SandboxDied(f"{self.sandbox.backend} sandbox died under the shell")
            raise self._died()

    def _died(self) -> ShellDied:
        """Why the shell is gone: an ``exit`` (the EXIT trap's status), its terminal killed, or bash killed."""
        probe = f'read -r s < {shlex.quote(self.dir)}/exited; read -r c < /proc/{self._tmux}/comm; echo "${{s:--}} ${{c:--}}"'
        _code, out = self.sandbox.exec_bytes(probe, timeout=10)
        m = re.fullmatch(rb"(\d+|-) (\S+)\n", out)
        status, tmux_up = (m.group(1).decode(), m.group(2).startswith(b"tmux")) if m else ("-", True)
        exited = f"bash exited (status {status})" if status != "-" else "bash was killed"
        if not tmux_up:
            return ShellDied(f"the sandbox shell is gone: its terminal (tmux) was killed and {exited}")
        if status != "-":
            return ShellDied(f"the sandbox shell exited (status {status})")
        return ShellDied("the sandbox shell is gone: bash was killed")

    def _result(self, frame: _Frame, start: float, *, running: bool, timed_out: bool, note: str | None = None) -> ShellResult:
        output = _text(frame.head)
        if frame.tail:
            output += f"\n[... {frame.skipped} bytes of output omitted ...]\n" + _text(frame.tail)
        return ShellResult(
            output=output,
            exit_code=frame.exit_code if frame.done else None,
            cwd=None if running else frame.cwd,
            duration_ms=(time.monotonic() - start) * 1000,
            timed_out=timed_out,
            output_truncated=frame.skipped > 0,
            running=running,
            note=note,
            also=frame.also,
        )

    # -- what callers use --------------------------------------------------------------------
    def run(self, command: str, *, timeout: float | None = None, also: str | None = None) -> ShellResult:
        """Type ``command`` and wait until it finishes or ``timeout`` passes.

        When a program still runs in the foreground (an earlier command that timed out),
        the step first waits for it, up to ``timeout``; if it still runs then, the command
        is not typed (``note`` says so): keys for that program go by ``send_keys``.
        """
        if not command.strip():
            raise ValueError("empty command")
        timeout = self.sandbox.config.exec_timeout_s if timeout is None else timeout
        start = time.monotonic()
        try:
            tok = secrets.token_hex(8)
            frame = self._step("run", budget=timeout, command=command.encode(errors="surrogateescape"), tok=tok, also=also)
        except _Unknown as exc:
            return _unknown(exc, start, timed_out=True)
        if frame.done:
            return self._result(frame, start, running=False, timed_out=False)
        note = None if frame.typed else "a program still runs in the foreground; the command was not typed"
        return self._result(frame, start, running=True, timed_out=True, note=note)

    def send_keys(
        self, keys: str, *, enter: bool = False, literal: bool = True, settle: float = 3.0, also: str | None = None
    ) -> ShellResult:
        """Type into whatever runs in the pane; ``literal=False`` takes tmux key names (``C-c``, ``Up``).

        Waits until the shell is back at its prompt, or the program's answer has stopped
        growing for 0.3 s while it waits for input, or ``settle`` seconds; reports what the pane printed and whether
        a program still runs."""
        flag = "-l -- " if literal else ""
        cmd = f"tx {flag}{shlex.quote(keys)}" + (" && tx Enter" if enter else "")
        return self._observe(cmd, settle, also)

    def interrupt(self, *, settle: float = 3.0, also: str | None = None) -> ShellResult:
        """Ctrl-C to the foreground program (or to the prompt, which starts a fresh line)."""
        return self.send_keys("C-c", literal=False, settle=settle, also=also)

    def observe(self, *, settle: float = 0.0, also: str | None = None) -> ShellResult:
        """What the pane printed since the last step, and the shell's state, without typing."""
        return self._observe(":", settle, also)

    def _observe(self, keys_cmd: str, settle: float, also: str | None = None) -> ShellResult:
        start = time.monotonic()
        try:
            frame = self._step("keys", budget=settle + 5.0, settle=settle, keys=keys_cmd, also=also)
        except _Unknown as exc:
            return _unknown(exc, start, timed_out=False)
        return self._result(frame, start, running=not frame.at_prompt, timed_out=False)

    def read_output(self) -> str:
        """What the pane printed since the last read (and advance past it)."""
        return self.observe().output

    def screen(self) -> str:
        """The visible screen, as a terminal would show it now."""
        code, out = self.sandbox.exec_bytes(f"tmux -S {shlex.quote(self.dir)}/sock capture-pane -p -t tf", timeout=10)
        return out.decode(errors="replace") if code == 0 else ""

    def close(self) -> None:
        if self._chan is not None:
            self._chan.close()
        if not self.sandbox.closed and self.sandbox.started and self.sandbox.alive():
            d = shlex.quote(self.dir)
            self.sandbox.exec(f"tmux -S {d}/sock kill-server 2>/dev/null; rm -rf {d}", timeout=10)


class _Unknown(Exception):
    """The step script's frame could not be read (the sandbox could not run it)."""


def _unknown(exc: _Unknown, start: float, *, timed_out: bool) -> ShellResult:
    note = f"the sandbox could not report the shell's state ({exc})"
    return ShellResult("", None, None, (time.monotonic() - start) * 1000, timed_out, False, True, note)
