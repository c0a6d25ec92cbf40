"""``LocalSandbox``: Linux namespaces over a read-only root, no container engine needed.

``start`` runs bubblewrap over the root folder (read-only), a writable ``/work`` (a host
folder under the state dir), a private ``/tmp``, new PID, network, IPC, UTS, user and
cgroup namespaces, and a sleeping init; the init's cgroup carries the memory, CPU and
process limits. Each ``exec`` enters those namespaces with ``nsenter`` (a new process in
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
from pathlib import Path

from sandboxes.base import WORKDIR, OutputCap, Sandbox, SandboxConfig, SandboxDied, SandboxError
from sandboxes.cgroups import Cgroup
from sandboxes.paths import state_dir

OWNER = "owner.json"
BWRAP = os.environ.get("TRAJFORGE_BWRAP", "bwrap")  # another bubblewrap build, if needed


def sandboxes_dir() -> Path:
    d = state_dir() / "local"
    d.mkdir(parents=True, exist_ok=True)
    return d


class LocalSandbox(Sandbox):
    backend = "local"

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        self.id = f"{config.run_id}-{uuid.uuid4().hex[:10]}"
        self.dir = sandboxes_dir() / self.id
        self.work = self.dir / "work"
        self.snapshots = self.dir / "snapshots"
        self._proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.cgroup: Cgroup | None = None
        self.limits_note = ""

    # -- life cycle ------------------------------------------------------------------------
    def _root(self) -> Path:
        if self.config.root:
            root = Path(self.config.root)
        else:
            from sandboxes.images import local_root

            root = local_root()
        if not (root / "bin").exists() or not (root / WORKDIR.lstrip("/")).is_dir():
            raise SandboxError(f"{root}: not a sandbox root (needs bin/ and work/; run: trajforge sandboxes build)")
        return root

    def start(self) -> LocalSandbox:
        if shutil.which(BWRAP) is None:
            raise SandboxError(f"{BWRAP} is not installed (apt-get install bubblewrap, or make test)")
        root = self._root()
        self.work.mkdir(parents=True)
        self.snapshots.mkdir()
        (self.dir / OWNER).write_text(json.dumps({"pid": os.getpid(), "run_id": self.config.run_id}))
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
        argv = [
            BWRAP, "--ro-bind", str(root), "/", "--bind", str(self.work), WORKDIR,
            "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-all",
            *(["--share-net"] if self.config.network else []),
            "--hostname", "sandbox", "--die-with-parent", "--new-session", "--chdir", WORKDIR,
            "--info-fd", str(write_fd), "--clearenv", "--", "sleep", "infinity",
        ]  # fmt: skip
        cgroup = self.cgroup
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                preexec_fn=(lambda: cgroup.add(os.getpid())) if cgroup else None,
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
        """bwrap reports the pid before its mounts are done: wait until /work inside is ours."""
        want = os.stat(self.work)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                got = os.stat(f"/proc/{self.init_pid}/root{WORKDIR}")
                if (got.st_dev, got.st_ino) == (want.st_dev, want.st_ino):
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
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- commands ---------------------------------------------------------------------------
    def _exec(
        self, argv: list[str], *, stdin: bytes | None, env: dict[str, str], deadline: float, cap: int
    ) -> tuple[int, OutputCap, OutputCap]:
        if not self.alive():
            raise SandboxDied(f"local sandbox {self.id} is not running")
        enter = [
            "nsenter", "-t", str(self.init_pid), "-U", "--preserve-credentials", "-m", "-u", "-i", "-n", "-p",
            "-C", "-r", "-w", "--", "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
        ]  # fmt: skip
        cgroup = self.cgroup
        proc = subprocess.Popen(
            enter + argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            preexec_fn=(lambda: cgroup.add(os.getpid())) if cgroup else None,
        )
        return collect(proc, stdin, deadline, cap)

    # -- resets -----------------------------------------------------------------------------
    def snapshot(self) -> str:
        self._check_usable()
        snap = f"snap-{len(list(self.snapshots.iterdir())):04d}"
        subprocess.run(["cp", "-a", "--reflink=auto", str(self.work), str(self.snapshots / snap)], check=True)
        return snap

    def restore(self, snapshot: str) -> None:
        """Back to the snapshot's files, with every process of the sandbox restarted."""
        self._check_usable()
        source = self.snapshots / snapshot
        if not source.is_dir():
            raise SandboxError(f"no snapshot {snapshot!r} in local sandbox {self.id}")
        self._stop()
        shutil.rmtree(self.work)
        subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(self.work)], check=True)
        self._spawn(self._root())

    def describe(self) -> dict:
        return {**super().describe(), "id": self.id, "limits": self.limits_note or "cgroup"}


def collect(proc: subprocess.Popen, stdin: bytes | None, deadline: float, cap: int) -> tuple[int, OutputCap, OutputCap]:
    """Feed stdin, read both pipes up to ``cap`` (draining the rest), kill at ``deadline``."""
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
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
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
    for f in (proc.stdout, proc.stderr, proc.stdin):
        if f and not f.closed:
            f.close()
    return code, out, err
