"""``LocalSandbox``: Linux namespaces over a read-only root, no container engine needed.

``start`` runs bubblewrap over the root folder (read-only), a writable ``/work`` and
``/tmp`` on the sandbox's own size-limited disk (``sandboxes.disk``: a loop-mounted image
of ``disk_mb``), new PID, network, IPC, UTS, user and cgroup namespaces, and a sleeping
init with a clean environment; the init's cgroup carries the memory, CPU and process
limits. Each ``exec`` enters those namespaces with ``nsenter`` (a new process in
the same cgroup, with a clean environment), so background processes and files persist
between calls while every command starts in about the time of a fork.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from sandboxes.base import (
    BASE_ENV,
    GRACE_S,
    TIMEOUT_EXIT,
    WORKDIR,
    OutputCap,
    Sandbox,
    SandboxConfig,
    SandboxDied,
    SandboxError,
)
from sandboxes.cgroups import Cgroup
from sandboxes.channel import Channel
from sandboxes.disk import Disk, claim, unmount_all_under
from sandboxes.paths import sandboxes_state
from sandboxes.procs import EXEC_MARK, kill_entered, kill_exec, pids_in_namespace_of

BWRAP = os.environ.get("TRAJFORGE_BWRAP", "bwrap")  # another bubblewrap build, if needed
SHM_MB = 64  # /dev/shm, in memory (as Docker's default shm_size)


def sandboxes_dir() -> Path:
    return sandboxes_state("local")


class LocalSandbox(Sandbox):
    backend = "local"

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        self.id = f"{config.run_id}-{uuid.uuid4().hex[:10]}"
        self.dir = sandboxes_dir() / self.id
        self.disk: Disk | None = Disk(self.dir, config.disk_mb)
        self.work = self.disk.folder("work")
        self.snapshots = self.dir / "snapshots"
        self._proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.cgroup: Cgroup | None = None
        self.limits_note = ""
        self.disk_note = ""
        self.root_note = ""
        self._channels: list[Channel] = []

    # -- life cycle ------------------------------------------------------------------------
    def _root(self) -> Path:
        if self.config.root:
            root = Path(self.config.root)
        else:
            from sandboxes.images import local_root, mounted_root

            root = local_root()
            try:  # its own file system, so that the mount table names no host folder
                root = mounted_root(root)
            except OSError as exc:
                self.root_note = f"root bound from {root} ({exc.strerror or exc})"
        if not (root / "bin").exists() or not (root / WORKDIR.lstrip("/")).is_dir():
            raise SandboxError(f"{root}: not a sandbox root (needs bin/ and work/; run: trajforge sandboxes build)")
        return root

    def start(self) -> LocalSandbox:
        self._bwrap = shutil.which(BWRAP)
        if self._bwrap is None:
            raise SandboxError(f"{BWRAP} is not installed (apt-get install bubblewrap, or make test)")
        root = self._root()
        claim(self.dir, self.config.run_id)
        self.snapshots.mkdir()
        try:
            self.disk.create()
        except OSError as exc:  # no root or no loop devices: a plain folder, and say so
            self.disk.destroy()
            self.disk = None
            self.work = self.dir / "work"
            self.work.mkdir()
            self.disk_note = f"no disk quota ({exc.strerror or exc}); /work is a host folder"
        self.cgroup = Cgroup(self.id, memory_bytes=self.config.memory_mb << 20, pids=self.config.pids, cpus=self.config.cpus)
        try:
            self.cgroup.create()
        except OSError as exc:
            self.cgroup.destroy()
            self.cgroup = None
            self.limits_note = f"no cgroup limits ({exc.strerror or exc}); need root or a delegated cgroup"
        self._spawn(root)
        self.started = True
        return self

    def _spawn(self, root: Path) -> None:
        read_fd, write_fd = os.pipe()
        size = str(self.config.disk_mb << 20)
        tmp = ["--bind", str(self.disk.folder("tmp")), "/tmp"] if self.disk else ["--size", size, "--tmpfs", "/tmp"]
        argv = [
            self._bwrap,
            "--ro-bind",
            str(root),
            "/",
            "--bind",
            str(self.work),
            WORKDIR,
            "--dev",
            "/dev",
            "--size",
            str(SHM_MB << 20),
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--proc",
            "/proc",
            *tmp,
            "--unshare-all",
            *(["--share-net"] if self.config.network else []),
            "--hostname",
            "sandbox",
            "--die-with-parent",
            "--new-session",
            "--chdir",
            WORKDIR,
            "--info-fd",
            str(write_fd),
            "--clearenv",
            "--",
            "sleep",
            "infinity",
        ]
        try:
            self._proc = subprocess.Popen(
                (self.cgroup.join_argv() if self.cgroup else []) + argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                start_new_session=True,
                env=dict(BASE_ENV),  # bwrap is the sandbox's PID 1: its environment is readable inside
            )
        finally:
            os.close(write_fd)
        with os.fdopen(read_fd, "rb") as info:
            raw = info.read()
        try:
            self.init_pid = json.loads(raw)["child-pid"]
        except (ValueError, KeyError):
            err = self._proc.stderr.read().decode(errors="replace").strip() if self._proc.stderr else ""
            self._proc.kill()
            raise SandboxError(f"bwrap did not start the sandbox: {err[:300] or 'no info'}") from None
        self._wait_ready()

    def _wait_ready(self, timeout: float = 10.0) -> None:
        """bwrap reports the pid before its mounts are done: wait until /work inside is ours,
        and is the sandbox's working folder (every exec enters with its cwd, ``nsenter -w``:
        one that came before bwrap's ``--chdir`` ran in ``/``, seen under load)."""
        want = os.stat(self.work)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                got = os.stat(f"/proc/{self.init_pid}/root{WORKDIR}")
                cwd = os.stat(f"/proc/{self.init_pid}/cwd")
                if (got.st_dev, got.st_ino) == (cwd.st_dev, cwd.st_ino) == (want.st_dev, want.st_ino):
                    return
            except OSError:
                pass
            if self._proc.poll() is not None:
                break
            time.sleep(0.002)
        err = self._proc.stderr.read().decode(errors="replace").strip() if self._proc.poll() is not None else ""
        self._stop()
        raise SandboxError(f"the local sandbox did not come up within {timeout:.0f} s {err[:300]}".strip())

    def alive(self) -> bool:
        if self.init_pid is None or self._proc is None or self._proc.poll() is not None:
            return False
        try:
            with open(f"/proc/{self.init_pid}/stat") as f:
                return f.read().split(") ", 1)[1][0] not in "ZX"
        except (OSError, IndexError):
            return False

    def _stop(self) -> None:
        for chan in self._channels:  # what they started is in the cgroup, killed below
            chan.close(sweep=False)
        self._channels = []
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            if self._proc.stderr:
                self._proc.stderr.close()
        if self.cgroup is not None:
            for pid in self.cgroup.pids():  # anything left in the group (setsid'd by an agent)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _close(self) -> None:
        self._stop()
        if self.cgroup is not None:
            self.cgroup.destroy()
        if self.disk is not None:
            self.disk.destroy()
        unmount_all_under(self.dir)  # never rmtree through a live mount
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- commands ---------------------------------------------------------------------------
    def _exec(
        self, argv: list[str], *, stdin: bytes | None, env: dict[str, str], deadline: float, cap: int
    ) -> tuple[int, OutputCap, OutputCap]:
        if not self.alive():
            raise SandboxDied(f"local sandbox {self.id} is not running")
        init_pid = self.init_pid
        proc = subprocess.Popen(
            self._enter(env) + argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        # nsenter leads the exec's session: its pid is the session of all the exec starts
        sweep = lambda: kill_exec(lambda: pids_in_namespace_of(init_pid), env[EXEC_MARK], (proc.pid,))  # noqa: E731
        return collect(proc, stdin, deadline, cap, on_deadline=sweep)

    def _enter(self, env: dict[str, str]) -> list[str]:
        """The argv prefix that runs a command inside the sandbox: in its cgroup, its
        namespaces and root, with a clean environment of ``env`` only."""
        enter = ["nsenter", "-t", str(self.init_pid), "-U", "--preserve-credentials"]
        enter += ["-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", "--", "/usr/bin/env", "-i"]
        return (self.cgroup.join_argv() if self.cgroup else []) + enter + [f"{k}={v}" for k, v in env.items()]

    def work_files(self, limit: int) -> dict[str, tuple[int, int]] | None:
        self._check_usable()
        return host_files(self.work, limit)

    def channel(self, script: str) -> Channel:
        """A resident bash running ``script`` (``sandboxes.channel``), killed with the sandbox."""
        self._check_usable()
        if not self.alive():
            raise SandboxDied(f"local sandbox {self.id} is not running")
        env = {**self.config.environment(), EXEC_MARK: uuid.uuid4().hex}
        proc = subprocess.Popen(
            [*self._enter(env), "bash", "-c", f"unset {EXEC_MARK}\n{script}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        init_pid = self.init_pid
        sweep = lambda: kill_exec(lambda: pids_in_namespace_of(init_pid), env[EXEC_MARK], (proc.pid,))  # noqa: E731
        chan = Channel(proc, sweep)
        self._channels = [c for c in self._channels if not c.closed] + [chan]
        return chan

    # -- resets -----------------------------------------------------------------------------
    def snapshot(self) -> str:
        self._check_usable()
        snap = f"snap-{len(list(self.snapshots.iterdir())):04d}"
        if self.disk is not None:
            self.disk.save(self.snapshots / snap)
        else:
            subprocess.run(["cp", "-a", "--reflink=auto", str(self.work), str(self.snapshots / snap)], check=True)
        return snap

    def restore(self, snapshot: str) -> None:
        """Back to the snapshot's files, with every process of the sandbox restarted."""
        self._check_usable()
        source = self.snapshots / snapshot
        if not source.is_dir():
            raise SandboxError(f"no snapshot {snapshot!r} in local sandbox {self.id}")
        self._stop()
        if self.disk is not None:  # mount-backed folders: emptied and refilled, not replaced
            self.disk.load(source)
        else:
            shutil.rmtree(self.work)
            subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(self.work)], check=True)
        self._spawn(self._root())

    def describe(self) -> dict:
        disk = self.disk_note or f"{self.config.disk_mb} MB loop-mounted ext4 for /work and /tmp"
        root = self.root_note or "a read-only image of the Debian root"
        return {**super().describe(), "id": self.id, "limits": self.limits_note or "cgroup", "disk": disk, "root": root}


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def host_files(top: Path, limit: int, *, max_entries: int = 50_000, max_depth: int = 64) -> dict[str, tuple[int, int]]:
    """The regular files under ``top``, a folder the sandbox writes (at most ``limit``):
    relative path -> (size, mtime in microseconds). Walked through directory descriptors
    opened without following links, so a link, or a folder swapped for one during the walk,
    never leads out of ``top``; what the agent can make costly (a million folders, a deep
    chain) is bounded by ``max_entries`` looked at and ``max_depth``, and never recursed on."""
    files: dict[str, tuple[int, int]] = {}
    try:
        stack: list[tuple[int, bytes, Iterator[bytes] | None]] = [(os.open(top, _DIR_FLAGS), b"", None)]
    except OSError:
        return files
    seen = 0
    try:
        while stack:
            fd, rel, subdirs = stack[-1]
            if subdirs is None:
                found = []
                with contextlib.suppress(OSError), os.scandir(fd) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > max_entries or len(files) >= limit:
                            return files
                        name = os.fsencode(entry.name)
                        if entry.is_dir(follow_symlinks=False):
                            found.append(name)
                        elif entry.is_file(follow_symlinks=False):
                            with contextlib.suppress(OSError):  # gone meanwhile
                                st = entry.stat(follow_symlinks=False)
                                files[(rel + name).decode(errors="backslashreplace")] = (st.st_size, st.st_mtime_ns // 1000)
                subdirs = iter(found)
                stack[-1] = (fd, rel, subdirs)
            name = next(subdirs, None) if len(stack) <= max_depth else None
            if name is None:
                os.close(stack.pop()[0])
                continue
            with contextlib.suppress(OSError):  # not a folder any more (swapped for a link): not entered
                stack.append((os.open(name, _DIR_FLAGS, dir_fd=fd), rel + name + b"/", None))
        return files
    finally:
        for fd, _rel, _it in stack:
            os.close(fd)


def collect(
    proc: subprocess.Popen, stdin: bytes | None, deadline: float, cap: int, on_deadline: Callable[[], object] = lambda: None
) -> tuple[int, OutputCap, OutputCap]:
    """Feed stdin, read both pipes up to ``cap`` (draining the rest). At ``deadline`` kill
    the process (``kill_entered``: its child first, then its group) and call ``on_deadline``
    (which kills what escaped it); a pipe still open after that (held by something beyond
    reach) is abandoned, and the exit is SIGKILL's."""
    out, err = OutputCap(cap), OutputCap(cap)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    if stdin is not None:
        view = memoryview(stdin)
        os.set_blocking(proc.stdin.fileno(), False)
        if view:
            sel.register(proc.stdin, selectors.EVENT_WRITE, None)
        else:
            proc.stdin.close()
    open_reads = 2
    killed = False
    while open_reads:
        remaining = deadline - time.monotonic()
        if remaining <= 0 and not killed:
            kill_entered(proc)
            on_deadline()
            killed = True
        elif remaining <= -GRACE_S:
            break
        for key, _ in sel.select(timeout=max(min(remaining, 1.0), 0.05)):
            if key.data is None:  # stdin writable
                try:
                    n = os.write(key.fd, view[:65536])
                except BrokenPipeError:
                    n = len(view)
                view = view[n:]
                if not view:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                continue
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                key.data.add(chunk)
            else:
                sel.unregister(key.fileobj)
                open_reads -= 1
    sel.close()
    code = proc.wait()
    if code < 0:  # killed by a signal: report it as a shell does (128 + signal)
        code = 128 - code
    if killed:
        code = TIMEOUT_EXIT
    for f in (proc.stdout, proc.stderr, proc.stdin):
        if f and not f.closed:
            f.close()
    return code, out, err
