"""``DockerSandbox``: a container through any Docker Engine API endpoint (Docker, or
Podman's compatible service), with the ``docker`` SDK.

The container idles under a bash that reaps orphans; each ``exec`` is an API exec whose
output is streamed and capped; what an exec leaves holding its output past its deadline
is killed (``sandboxes.procs``). Limits map to the engine's: ``mem_limit`` (and no swap),
``pids_limit``, ``nano_cpus``, ``network_mode="none"`` unless the config allows network.

Disk: when the engine runs on this host (the usual case: Docker or the project's Podman
service), the container's root file system is read-only and ``/work``, ``/tmp`` and
``/var/tmp`` are bind mounts of the sandbox's own ``disk_mb`` file system
(``sandboxes.disk``), as on the local backend; snapshots copy ``/work`` on the host and a
restore recreates the container over the snapshot's files. With a remote engine, the
container writes to its own layer, without a quota (``describe()`` says so), and
snapshots are ``commit``s. Every container carries ``trajforge.run_id`` and owner labels,
which ``trajforge sandboxes gc`` uses to remove what dead runs left behind.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import shutil
import socket
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path

from sandboxes.base import GRACE_S, TIMEOUT_EXIT, WORKDIR, OutputCap, Sandbox, SandboxConfig, SandboxDied, SandboxError
from sandboxes.disk import Disk, claim, unmount_all_under
from sandboxes.engine import client, find_engine
from sandboxes.paths import sandboxes_state
from sandboxes.procs import EXEC_MARK, KILL_EXEC_SCRIPT, holding_output, kill_exec, pids_in_namespace_of, session_of

LABEL_RUN = "trajforge.run_id"
LABEL_OWNER = "trajforge.owner"
LABEL_SANDBOX = "trajforge.sandbox"
SNAPSHOT_REPO = "localhost/trajforge-snapshot"
SHM_MB = 64  # /dev/shm, in memory (Docker's default)
RUN_TMPFS = "size=16m,mode=755"  # /run on a read-only root: a little room, in memory
#: The container's PID 1: bash reaps every child it inherits (``sleep`` would not, and the
#: zombies of a fork bomb's orphans would hold the process limit until the container ends).
REAPER = "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"


def sandboxes_dir() -> Path:
    """Host folders of docker sandboxes' disks (owner.json, disk image, snapshots)."""
    return sandboxes_state("docker")


def engine_is_here(host: str) -> bool:
    """Whether the engine's bind mounts and processes are this machine's (a local socket)."""
    return host.startswith("unix://") and Path(host[len("unix://") :]).exists()


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class DockerSandbox(Sandbox):
    backend = "docker"

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config)
        self.id = f"{config.run_id}-{uuid.uuid4().hex[:10]}"
        self.host: str | None = None
        self.client = None
        self.container = None
        self.snapshots: list[str] = []
        self._generation = 0
        self.dir = sandboxes_dir() / self.id
        self.disk: Disk | None = None
        self.disk_note = ""
        self._init: int | None = None

    def _docker(self):
        return __import__("docker")

    def start(self) -> DockerSandbox:
        self.host = find_engine(self.config.docker_host)
        self.client = client(self.host)
        self._make_disk()
        try:
            self.container = self._create(self.config.image)
        except SandboxError:
            self._drop_disk()
            raise
        self.started = True
        return self

    def _make_disk(self) -> None:
        if not engine_is_here(self.host):
            self.disk_note = f"no disk quota (engine {self.host} is not on this host); the container layer is unbounded"
            return
        claim(self.dir, self.config.run_id)
        disk = Disk(self.dir, self.config.disk_mb, tuple(f"w{i}" for i in range(len(self.config.writable))))
        try:
            disk.create()
        except OSError as exc:
            disk.destroy()
            self._drop_disk()
            self.disk_note = f"no disk quota ({exc.strerror or exc}); the container layer is unbounded"
            return
        self.disk = disk

    def _drop_disk(self) -> None:
        if self.disk is not None:
            self.disk.destroy()
        unmount_all_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _create(self, image: str):
        docker = self._docker()
        c = self.config
        self._generation += 1  # each restore makes a new container: a new name
        self._init = None
        disk = {}
        if self.disk is not None:  # read-only root; everything writable is on the sandbox's disk
            binds = {"work": WORKDIR, "tmp": "/tmp", "var-tmp": "/var/tmp"}
            binds.update({f"w{i}": path for i, path in enumerate(c.writable)})
            if self._generation == 1:  # a fresh disk: the writable paths start with the image's content
                for i, path in enumerate(c.writable):
                    self._fill_from_image(image, path, self.disk.folder(f"w{i}"))
            disk = {
                "read_only": True,
                "volumes": {str(self.disk.folder(k)): {"bind": v, "mode": "rw"} for k, v in binds.items()},
                "tmpfs": {"/run": RUN_TMPFS},
            }
        try:
            return self.client.containers.run(
                image,
                command=["bash", "-c", REAPER],
                detach=True,
                name=f"trajforge-{self.id}-{self._generation}",
                hostname="sandbox",
                labels={LABEL_RUN: c.run_id, LABEL_OWNER: owner_label(), LABEL_SANDBOX: self.id},
                network_mode=None if c.network else "none",
                mem_limit=f"{c.memory_mb}m",
                memswap_limit=f"{c.memory_mb}m",
                pids_limit=c.pids,
                nano_cpus=int(c.cpus * 1e9),
                working_dir=WORKDIR,
                environment=c.environment(),
                security_opt=["no-new-privileges"],
                cap_drop=["MKNOD"],  # no device nodes on the disk, which snapshots copy to the host
                shm_size=f"{SHM_MB}m",
                **disk,
            )
        except docker.errors.ImageNotFound:
            raise SandboxError(f"image {image} not found on {self.host} (run: trajforge sandboxes build)") from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot start a container from {image}: {exc.explanation or exc}") from None

    def _fill_from_image(self, image: str, path: str, folder: Path) -> None:
        """Copy what ``image`` holds at ``path`` into ``folder`` (on the quota disk: a full disk
        is ENOSPC, as in the sandbox), through a container that is created and never run."""
        docker = self._docker()
        try:
            probe = self.client.containers.create(image, command=["true"], labels={LABEL_OWNER: owner_label()})
        except docker.errors.ImageNotFound:
            raise SandboxError(f"image {image} not found on {self.host} (run: trajforge sandboxes build)") from None
        try:
            try:
                stream, _ = probe.get_archive(path)
            except docker.errors.NotFound:
                return  # nothing there in the image: the path starts empty
            with tempfile.TemporaryFile(dir=folder) as buf:
                for chunk in stream:
                    buf.write(chunk)
                buf.seek(0)
                with tarfile.open(fileobj=buf) as tar:
                    top = posixpath.basename(path.rstrip("/"))
                    members = []
                    for m in tar.getmembers():
                        rel = m.name.split("/", 1)[1] if "/" in m.name else ""
                        if m.name.split("/", 1)[0] != top or not rel:
                            continue
                        m.name = rel
                        members.append(m)
                    tar.extractall(folder, members=members, filter="data")
        finally:
            with contextlib.suppress(docker.errors.APIError):
                probe.remove(force=True)

    def alive(self) -> bool:
        if self.container is None:
            return False
        try:
            self.container.reload()
        except self._docker().errors.NotFound:
            return False
        except Exception:
            return False
        return self.container.status == "running"

    def _close(self) -> None:
        docker = self._docker()
        if self.container is not None:
            try:
                self.container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if "no such" not in str(exc).lower():
                    raise SandboxError(f"cannot remove container {self.container.id[:12]}: {exc}") from None
        if self.disk is None:
            for image in self.snapshots:
                with contextlib.suppress(docker.errors.APIError):
                    self.client.images.remove(image, force=True)
        self._drop_disk()

    def _exec(
        self, argv: list[str], *, stdin: bytes | None, env: dict[str, str], deadline: float, cap: int
    ) -> tuple[int, OutputCap, OutputCap]:
        docker = self._docker()
        api = self.client.api
        try:
            exec_id = api.exec_create(self.container.id, argv, stdin=stdin is not None, environment=env, workdir=WORKDIR)["Id"]
        except docker.errors.APIError as exc:
            if not self.alive():
                raise SandboxDied(f"docker sandbox {self.id} is not running") from None
            raise SandboxError(f"exec failed: {exc.explanation or exc}") from None
        out, err = OutputCap(cap), OutputCap(cap)
        overran = threading.Event()

        def on_deadline(stream=None) -> None:
            overran.set()
            self._kill_exec(exec_id, env[EXEC_MARK])
            if stream is not None:  # what is beyond reach may still hold the output: stop reading
                closer = threading.Timer(GRACE_S, _close_stream, (stream,))
                closer.daemon = True
                closer.start()

        if stdin is not None:
            self._exec_with_stdin(exec_id, stdin, out, err, deadline, on_deadline)
        else:
            stream = api.exec_start(exec_id, stream=True, demux=True)
            watchdog = threading.Timer(max(deadline - time.monotonic(), 0.01), on_deadline, (stream,))
            watchdog.daemon = True
            watchdog.start()
            try:
                for o, e in stream:
                    if o:
                        out.add(o)
                    if e:
                        err.add(e)
            except Exception:  # the stream broke: engine gone, container killed, or the watchdog
                pass
            finally:
                watchdog.cancel()
        if not overran.is_set():
            self._await_leftovers(env[EXEC_MARK], deadline, on_deadline)
        info = api.exec_inspect(exec_id)
        code = info.get("ExitCode")
        if code is None or info.get("Running") or overran.is_set():
            if not self.alive():
                raise SandboxDied(f"docker sandbox {self.id} died during exec")
            code = TIMEOUT_EXIT  # killed at the deadline
        return int(code), out, err

    def _init_pid(self) -> int | None:
        """The container's init as this host numbers it, when the engine runs here (asked
        once per container; a dead init's namespace lists nothing, so a stale pid is harmless)."""
        if self._init is None and engine_is_here(self.host):
            with contextlib.suppress(Exception):
                self._init = self.client.api.inspect_container(self.container.id)["State"]["Pid"] or None
        return self._init if self._init and os.path.exists(f"/proc/{self._init}/ns/pid") else None

    def _await_leftovers(self, mark: str, deadline: float, on_deadline) -> None:
        """The engine ends an exec's stream when its leader exits; background copies of its
        bash (a fork bomb) may still hold the output. Wait for them as the local backend's
        pipes do, and kill them at the deadline."""
        init = self._init_pid()
        if init is None:
            return
        while holding_output(lambda: pids_in_namespace_of(init), mark):
            if time.monotonic() >= deadline:
                on_deadline()
                return
            time.sleep(0.05)

    def _kill_exec(self, exec_id: str, mark: str) -> None:
        """Kill an overrunning exec and everything it left (``sandboxes.procs``): from the host
        when the engine is here, else by a sweep inside; a sandbox that cannot even run that
        (its process limit is full) is killed, and its next call raises ``SandboxDied``."""
        api = self.client.api
        init = self._init_pid()
        if init is not None:
            with contextlib.suppress(Exception):
                info = api.exec_inspect(exec_id)
                lead = session_of(info["Pid"]) if info.get("Running") and info.get("Pid") else None
                kill_exec(lambda: pids_in_namespace_of(init), mark, [lead] if lead else [])
                return
        try:
            sweep = api.exec_create(self.container.id, ["bash", "-c", KILL_EXEC_SCRIPT, "sweep", f"{EXEC_MARK}={mark}"])
            api.exec_start(sweep["Id"])
            if api.exec_inspect(sweep["Id"]).get("ExitCode") == 0:
                return
        except Exception:  # the engine cannot start a process in it: fall through
            pass
        with contextlib.suppress(Exception):
            self.container.kill()

    def _exec_with_stdin(self, exec_id: str, data: bytes, out: OutputCap, err: OutputCap, deadline: float, on_deadline) -> None:
        sock = self.client.api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)
        raw.settimeout(max(deadline - time.monotonic(), 0.01))
        buf = b""
        try:
            raw.sendall(data)
            raw.shutdown(socket.SHUT_WR)
            while True:
                if time.monotonic() >= deadline:
                    raise TimeoutError
                chunk = raw.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 8:  # the engine's multiplexed stream: 8-byte header per frame
                    kind, size = buf[0], int.from_bytes(buf[4:8], "big")
                    if len(buf) < 8 + size:
                        break
                    (out if kind == 1 else err).add(buf[8 : 8 + size])
                    buf = buf[8 + size :]
        except TimeoutError:
            on_deadline()
        finally:
            raw.close()
        for _ in range(100):  # the exec may report its exit a moment after the stream ends
            if not self.client.api.exec_inspect(exec_id).get("Running"):
                break
            time.sleep(0.02)

    def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        """Through the archive API: fast for large files, no stdin plumbing."""
        raw = data.encode() if isinstance(data, str) else data
        directory, name = os.path.split(path if path.startswith("/") else f"{WORKDIR}/{path}")
        r = self.exec(f"mkdir -p -- '{directory}'", timeout=30)
        if r.exit_code != 0:
            raise OSError(f"{path}: {r.stderr.strip()}")
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w") as t:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(raw), mode, int(time.time())
            t.addfile(info, io.BytesIO(raw))
        if not self.container.put_archive(directory, tar.getvalue()):
            raise OSError(f"{path}: the engine refused the archive")

    def snapshot(self) -> str:
        self._check_usable()
        tag = f"{self.id}-{len(self.snapshots)}"
        if self.disk is not None:  # the root is read-only: /work on the host is all there is to keep
            self.disk.save(self.dir / tag)
            self.snapshots.append(tag)
            return tag
        image = self.container.commit(repository=SNAPSHOT_REPO, tag=tag, conf={"Labels": {LABEL_SANDBOX: self.id}})
        self.snapshots.append(image.id)
        return image.id

    def restore(self, snapshot: str) -> None:
        """Back to the snapshot's files, in a new container (every process restarted)."""
        self._check_usable()
        if snapshot not in self.snapshots:
            raise SandboxError(f"no snapshot {snapshot[:19]} in docker sandbox {self.id}")
        old = self.container
        if self.disk is not None:
            with contextlib.suppress(self._docker().errors.APIError):
                old.remove(force=True)
            self.disk.load(self.dir / snapshot)
            self.container = self._create(self.config.image)
            return
        self.container = self._create(snapshot)
        try:
            old.remove(force=True)
        except self._docker().errors.APIError:
            pass

    def describe(self) -> dict:
        disk = self.disk_note or f"{self.config.disk_mb} MB loop-mounted ext4 for /work, /tmp, /var/tmp; read-only root"
        return {**super().describe(), "id": self.id, "engine": self.host, "image": self.config.image, "disk": disk}


def _close_stream(stream) -> None:
    for attr in ("close",):
        with contextlib.suppress(Exception):
            getattr(stream, attr)()
