"""The sandbox protocol every backend implements, and what they share.

A sandbox is one isolated place to run an agent's actions: a container (``DockerSandbox``)
or a set of Linux namespaces over a read-only root (``LocalSandbox``). Both give the same
calls, limits and guarantees::

    with open_sandbox(SandboxConfig(backend="local")) as sb:
        r = sb.exec("ls /", timeout=10)
        sh = sb.shell()
        sh.run("cd /tmp && export X=1")
        sh.run("echo $X $PWD").output   # "1 /tmp"
        snap = sb.snapshot(); ...; sb.restore(snap)

Agent-caused outcomes (non-zero exit, timeout, truncated output) are data in
``ExecResult``; a sandbox that is dead, or an engine that fails, raises ``SandboxError``.
"""

from __future__ import annotations

import abc
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sandboxes.channel import Channel
from sandboxes.errors import FileTooLarge, SandboxDied, SandboxError
from sandboxes.procs import EXEC_MARK
from sandboxes.shell import ShellSession

WORKDIR = "/work"
#: The environment every command starts from; host variables never pass unless listed.
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": WORKDIR,
    "LANG": "C.UTF-8",
    "TERM": "xterm-256color",
}


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    duration_ms: float
    timed_out: bool = False
    output_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class TreeEntry:
    path: str  # relative to the listed folder
    kind: str  # "file", "dir", "link", "other"
    size: int


@dataclass(frozen=True)
class SandboxConfig:
    """What a sandbox is and what it may use. Loaded from job YAML by the collectors."""

    backend: str = "auto"  # docker | local | auto (docker when an engine answers)
    image: str = "localhost/trajforge-terminal:latest"  # docker backend
    root: str | None = None  # local backend: a root folder (default: the built Debian root)
    network: bool = False
    memory_mb: int = 1024
    cpus: float = 1.0
    pids: int = 256
    disk_mb: int = 2048  # everything the sandbox may write (/work, /tmp), on its own file system
    exec_timeout_s: float = 60.0
    output_cap_bytes: int = 1 << 20
    env: dict[str, str] = field(default_factory=dict)  # set inside
    pass_env: tuple[str, ...] = ()  # host variables allowed in, by name
    run_id: str = "adhoc"
    docker_host: str | None = None  # default: DOCKER_HOST, else the project's Podman socket
    # docker backend: more paths the sandbox may write (the root is read-only), on its disk
    # under the same quota, first filled with what the image holds there (a Harbor task's /app, /logs)
    writable: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from schemas.errors import ConfigError

        if self.backend not in ("docker", "local", "auto"):
            raise ConfigError(f"sandbox.backend: {self.backend!r} is not one of docker, local, auto")
        for name in ("memory_mb", "pids", "disk_mb", "output_cap_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"sandbox.{name}: must be >= 1, got {getattr(self, name)}")
        if not 0 < self.cpus <= 256:
            raise ConfigError(f"sandbox.cpus: must be in (0, 256], got {self.cpus}")
        if self.exec_timeout_s <= 0:
            raise ConfigError(f"sandbox.exec_timeout_s: must be > 0, got {self.exec_timeout_s}")
        if not self.run_id or "/" in self.run_id:
            raise ConfigError(f"sandbox.run_id: {self.run_id!r} is not a valid run id")
        object.__setattr__(self, "writable", tuple(self.writable))
        for path in self.writable:
            parts = path.split("/")
            if not path.startswith("/") or path == "/" or ".." in parts or any(not p for p in parts[1:]):
                raise ConfigError(f"sandbox.writable: {path!r} is not a plain absolute path below /")
            if path in ("/work", "/tmp", "/var/tmp", "/run", "/proc", "/sys", "/dev") or path.startswith(
                ("/proc/", "/sys/", "/dev/", "/run/")
            ):
                raise ConfigError(f"sandbox.writable: {path!r} is a path the sandbox manages itself")

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        import os

        env = dict(BASE_ENV)
        env.update({k: os.environ[k] for k in self.pass_env if k in os.environ})
        env.update(self.env)
        env.update(extra or {})
        return env


class OutputCap:
    """Collects a stream up to ``cap`` bytes and remembers whether it dropped any."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: list[bytes] = []
        self.size = 0
        self.seen = 0

    def add(self, data: bytes) -> None:
        self.seen += len(data)
        room = self.cap - self.size
        if room > 0:
            self.parts.append(data[:room])
            self.size += min(room, len(data))

    @property
    def truncated(self) -> bool:
        return self.seen > self.size

    def text(self) -> str:
        return b"".join(self.parts).decode("utf-8", errors="replace")


def wrap_command(cmd: str, *, cwd: str | None, timeout: float) -> list[str]:
    """The argv that runs ``cmd`` in bash inside a sandbox, killed with its whole process
    group after ``timeout`` seconds (GNU timeout makes itself the group leader). Bash drops
    the exec's mark (``sandboxes.procs``) from what it passes on, keeping it only in its own
    forks, which is how the host finds them if they outlive the group."""
    script = cmd if cwd is None else f"cd {shlex.quote(cwd)} && {cmd}"
    return ["timeout", "-s", "KILL", f"{max(timeout, 0.001):.3f}", "bash", "-c", f"unset {EXEC_MARK}\n{script}"]


TIMEOUT_EXIT = 137  # SIGKILL from timeout(1)
#: How long past its timeout an exec may take before the host kills what it left behind.
GRACE_S = 2.0


class Sandbox(abc.ABC):
    """One isolated execution environment. Use as a context manager; ``close`` is idempotent."""

    backend: str = "?"

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.started = False
        self.closed = False

    # life cycle
    @abc.abstractmethod
    def start(self) -> Sandbox: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.started:
            self._close()

    def __enter__(self) -> Sandbox:
        return self if self.started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abc.abstractmethod
    def alive(self) -> bool: ...

    # commands
    @abc.abstractmethod
    def _exec(
        self, argv: list[str], *, stdin: bytes | None, env: dict[str, str], deadline: float, cap: int
    ) -> tuple[int, OutputCap, OutputCap]:
        """Run ``argv``; past ``deadline`` kill it and whatever bears the mark in ``env`` (a
        fork bomb, background copies holding the output open) and report SIGKILL (137)."""

    def _run(self, argv: list[str], *, stdin: bytes | None, env: dict[str, str], timeout: float, cap: int):
        env = {**env, EXEC_MARK: uuid.uuid4().hex}
        return self._exec(argv, stdin=stdin, env=env, deadline=time.monotonic() + timeout + GRACE_S, cap=cap)

    def exec(
        self,
        cmd: str,
        *,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` with bash; the wall-clock limit kills its whole process group."""
        self._check_usable()
        timeout = self.config.exec_timeout_s if timeout is None else timeout
        data = stdin.encode() if isinstance(stdin, str) else stdin
        start = time.monotonic()
        code, out, err = self._run(
            wrap_command(cmd, cwd=cwd, timeout=timeout),
            stdin=data,
            env=self.config.environment(env),
            timeout=timeout,  # the in-sandbox timeout fires first; the deadline catches what escaped it
            cap=self.config.output_cap_bytes,
        )
        duration = (time.monotonic() - start) * 1000
        timed_out = code == TIMEOUT_EXIT and duration >= timeout * 1000 * 0.95
        if code == TIMEOUT_EXIT and not timed_out and self._seen_dead(within=1.0):
            raise SandboxDied(f"{self.backend} sandbox died while running {cmd[:80]!r}")
        return ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            duration_ms=duration,
            timed_out=timed_out,
            output_truncated=out.truncated or err.truncated,
        )

    def _seen_dead(self, *, within: float) -> bool:
        """Whether the sandbox is gone, looking again for ``within`` seconds: a command killed with its
        sandbox can report SIGKILL a moment before the sandbox's init is seen gone."""
        deadline = time.monotonic() + within
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _check_usable(self) -> None:
        if self.closed:
            raise SandboxError(f"{self.backend} sandbox is closed")
        if not self.started:
            raise SandboxError(f"{self.backend} sandbox is not started")

    def exec_bytes(
        self, cmd: str, *, stdin: bytes | None = None, timeout: float | None = None, cap: int | None = None
    ) -> tuple[int, bytes]:
        """Run a command for its raw stdout (file transfer); stderr goes to the error. ``cap``:
        keep at most that many bytes of stdout (the rest is read and dropped)."""
        self._check_usable()
        timeout = self.config.exec_timeout_s if timeout is None else timeout
        code, out, err = self._run(
            wrap_command(cmd, cwd=None, timeout=timeout),
            stdin=stdin,
            env=self.config.environment(),
            timeout=timeout,
            cap=1 << 62 if cap is None else cap,
        )
        if code != 0 and not self.alive():
            raise SandboxDied(f"{self.backend} sandbox died")
        return code, b"".join(out.parts) if code == 0 else err.text().encode()

    # files
    def read_file(self, path: str, *, limit: int | None = None) -> bytes:
        """A file's bytes. With ``limit``, never more than that many are read (the file is
        the agent's: a sparse one can claim terabytes) and a longer file raises
        ``FileTooLarge``."""
        q = shlex.quote(path)
        if limit is None:
            code, data = self.exec_bytes(f"cat -- {q}")
        else:
            code, data = self.exec_bytes(f"head -c {int(limit) + 1} -- {q}", cap=int(limit) + 1)
        if code != 0:
            raise FileNotFoundError(f"{path}: {data.decode(errors='replace').strip()}")
        if limit is not None and len(data) > limit:
            raise FileTooLarge(f"{path}: longer than {limit} bytes")
        return data

    def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        raw = data.encode() if isinstance(data, str) else data
        q = shlex.quote(path)
        code, err = self.exec_bytes(f'mkdir -p -- "$(dirname -- {q})" && cat > {q} && chmod {mode:o} {q}', stdin=raw)
        if code != 0:
            raise OSError(f"{path}: {err.decode(errors='replace').strip()}")

    def list_tree(self, path: str = WORKDIR, depth: int = 2) -> list[TreeEntry]:
        """Entries under ``path``, sorted by path. Fields are NUL-separated, so a name with
        newlines, tabs or bytes that are not UTF-8 is only data (shown backslash-escaped)."""
        code, out = self.exec_bytes(f"find {shlex.quote(path)} -mindepth 1 -maxdepth {int(depth)} -printf '%y\\0%s\\0%P\\0'")
        if code != 0:
            raise FileNotFoundError(f"{path}: {out.decode(errors='replace').strip()}")
        kinds = {"f": "file", "d": "dir", "l": "link"}
        fields = out.split(b"\0")
        entries = [
            TreeEntry(rel.decode(errors="backslashreplace"), kinds.get(kind.decode(errors="replace"), "other"), int(size))
            for kind, size, rel in zip(fields[0::3], fields[1::3], fields[2::3], strict=False)
            if size.isdigit()
        ]
        return sorted(entries, key=lambda e: e.path)

    # resets
    @abc.abstractmethod
    def snapshot(self) -> str: ...

    @abc.abstractmethod
    def restore(self, snapshot: str) -> None: ...

    def work_files(self, limit: int) -> dict[str, tuple[int, int]] | None:
        """/work's regular files (at most ``limit``): path -> (size, mtime in microseconds),
        read by the host where /work is a host folder; None elsewhere (a listing then runs
        inside the sandbox). Paths are relative, bytes that are not UTF-8 backslash-escaped."""
        return None

    def channel(self, script: str) -> Channel | None:
        """A resident bash running ``script`` and fed through pipes (``sandboxes.channel``),
        where the backend has one: the local backend does; others run every step as an exec."""
        return None

    def shell(self, *, width: int = 160, height: int = 48) -> ShellSession:
        return ShellSession(self, width=width, height=height)

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "run_id": self.config.run_id}
