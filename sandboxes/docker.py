"""``DockerSandbox``: a container through any Docker Engine API endpoint (Docker, or
Podman's compatible service), with the ``docker`` SDK.

The container idles on ``sleep infinity``; each ``exec`` is an API exec whose output is
streamed and capped. Limits map to the engine's: ``mem_limit`` (and no swap),
``pids_limit``, ``nano_cpus``, ``network_mode="none"`` unless the config allows network.
Snapshots are ``commit``s (the whole file system, not just /work); restoring recreates
the container from one. Every container carries ``trajforge.run_id`` and owner labels,
which ``trajforge sandboxes gc`` uses to remove what dead runs left behind.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import threading
import time
import uuid

from sandboxes.base import WORKDIR, OutputCap, Sandbox, SandboxConfig, SandboxDied, SandboxError
from sandboxes.engine import client, find_engine

LABEL_RUN = "trajforge.run_id"
LABEL_OWNER = "trajforge.owner"
LABEL_SANDBOX = "trajforge.sandbox"
SNAPSHOT_REPO = "localhost/trajforge-snapshot"


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

    def _docker(self):
        return __import__("docker")

    def start(self) -> DockerSandbox:
        self.host = find_engine(self.config.docker_host)
        self.client = client(self.host)
        self.container = self._create(self.config.image)
        self.started = True
        return self

    def _create(self, image: str):
        docker = self._docker()
        c = self.config
        self._generation += 1  # each restore makes a new container: a new name
        try:
            return self.client.containers.run(
                image,
                command=["sleep", "infinity"],
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
            )
        except docker.errors.ImageNotFound:
            raise SandboxError(f"image {image} not found on {self.host} (run: trajforge sandboxes build)") from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot start a container from {image}: {exc.explanation or exc}") from None

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
        for image in self.snapshots:
            with contextlib.suppress(docker.errors.APIError):
                self.client.images.remove(image, force=True)

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
        if stdin is not None:
            self._exec_with_stdin(exec_id, stdin, out, err, deadline)
        else:
            stream = api.exec_start(exec_id, stream=True, demux=True)
            watchdog = threading.Timer(max(deadline - time.monotonic(), 0.01), _close_stream, (stream,))
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
        info = api.exec_inspect(exec_id)
        code = info.get("ExitCode")
        if code is None or info.get("Running"):
            if not self.alive():
                raise SandboxDied(f"docker sandbox {self.id} died during exec")
            code = 137  # the engine guard fired: treat as killed
        return int(code), out, err

    def _exec_with_stdin(self, exec_id: str, data: bytes, out: OutputCap, err: OutputCap, deadline: float) -> None:
        sock = self.client.api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)
        raw.settimeout(max(deadline - time.monotonic(), 0.01))
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)
        buf = b""
        try:
            while True:
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
            pass
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
        image = self.container.commit(repository=SNAPSHOT_REPO, tag=tag, conf={"Labels": {LABEL_SANDBOX: self.id}})
        self.snapshots.append(image.id)
        return image.id

    def restore(self, snapshot: str) -> None:
        self._check_usable()
        if snapshot not in self.snapshots:
            raise SandboxError(f"no snapshot {snapshot[:19]} in docker sandbox {self.id}")
        old = self.container
        self.container = self._create(snapshot)
        try:
            old.remove(force=True)
        except self._docker().errors.APIError:
            pass

    def describe(self) -> dict:
        return {**super().describe(), "id": self.id, "engine": self.host, "image": self.config.image}


def _close_stream(stream) -> None:
    for attr in ("close",):
        with contextlib.suppress(Exception):
            getattr(stream, attr)()
