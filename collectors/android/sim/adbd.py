"""The device side of adb's transport protocol over TCP, so ``adb connect 127.0.0.1:PORT``
and any adb client (adbutils) talk to a simulated phone as to a real device.

Messages are a 24-byte header (command, arg0, arg1, data length, data checksum, magic =
command ^ 0xffffffff) and a payload. The host connects (CNXN, answered without AUTH),
then opens streams: ``shell:CMD`` (the output is written raw and the stream closed: no
``shell_v2`` is advertised, so there is no exit-status framing, as on old devices) and
``sync:`` (``STAT``, ``SEND`` for push, ``RECV`` for pull). Each stream runs in its own thread and
waits for the host's OKAY after every WRTE (adb's flow control).
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
from collections.abc import Callable

A_CNXN, A_OPEN, A_OKAY, A_WRTE, A_CLSE = (int.from_bytes(c, "little") for c in (b"CNXN", b"OPEN", b"OKAY", b"WRTE", b"CLSE"))
A_VERSION = 0x01000001  # checksums may be zero from this version on
BANNER = b"device::ro.product.name=trajforge_sim;ro.product.model=TrajforgeSim;ro.product.device=sim;features=cmd,stat_v2"

Shell = Callable[[str], bytes]
Files = dict[str, bytes]


def message(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    return struct.pack("<6I", command, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF, command ^ 0xFFFFFFFF) + data


class Stream:
    """One open stream: bytes the host wrote arrive in ``inbox``; ``write`` waits for OKAY."""

    def __init__(self, conn: Connection, local: int, remote: int) -> None:
        self.conn, self.local, self.remote = conn, local, remote
        self.inbox: queue.Queue[bytes | None] = queue.Queue()
        self.acked = threading.Event()
        self.buffer = b""

    def write(self, data: bytes) -> None:
        for i in range(0, len(data), self.conn.max_data):
            self.acked.clear()
            self.conn.send(A_WRTE, self.local, self.remote, data[i : i + self.conn.max_data])
            if not self.acked.wait(30):
                raise ConnectionError("the host did not acknowledge a write")

    def read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.inbox.get(timeout=30)
            if chunk is None:
                raise ConnectionError("stream closed by the host")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def close(self) -> None:
        self.conn.send(A_CLSE, self.local, self.remote)
        self.conn.streams.pop(self.local, None)


class Connection:
    """One host connection (the adb server): reads messages, runs a thread per stream."""

    def __init__(self, sock: socket.socket, shell: Shell, files: Files) -> None:
        self.sock, self.shell, self.files = sock, shell, files
        self.lock = threading.Lock()
        self.streams: dict[int, Stream] = {}
        self.next_id = 1
        self.max_data = 4096

    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        with self.lock:
            self.sock.sendall(message(command, arg0, arg1, data))

    def _recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("host disconnected")
            out += chunk
        return out

    def serve(self) -> None:
        try:
            while True:
                command, arg0, arg1, length, _, _ = struct.unpack("<6I", self._recv(24))
                data = self._recv(length) if length else b""
                self._dispatch(command, arg0, arg1, data)
        except (ConnectionError, OSError):
            pass
        finally:
            for stream in list(self.streams.values()):
                stream.inbox.put(None)
            self.sock.close()

    def _dispatch(self, command: int, arg0: int, arg1: int, data: bytes) -> None:
        if command == A_CNXN:
            self.max_data = min(arg1, 256 * 1024) or 4096
            self.send(A_CNXN, A_VERSION, self.max_data, BANNER)
        elif command == A_OPEN:
            local, self.next_id = self.next_id, self.next_id + 1
            stream = self.streams[local] = Stream(self, local, arg0)
            self.send(A_OKAY, local, arg0)
            threading.Thread(target=self._run, args=(stream, data.rstrip(b"\0").decode()), daemon=True).start()
        elif (stream := self.streams.get(arg1)) is not None:
            if command == A_OKAY:
                stream.acked.set()
            elif command == A_WRTE:
                stream.inbox.put(data)
                self.send(A_OKAY, stream.local, stream.remote)
            elif command == A_CLSE:
                stream.inbox.put(None)
                stream.acked.set()
                self.streams.pop(arg1, None)

    def _run(self, stream: Stream, service: str) -> None:
        try:
            if service.startswith("shell:"):
                stream.write(self.shell(service[len("shell:") :]))
            elif service.startswith("sync:"):
                self._sync(stream)
            else:
                stream.write(f"FAIL: unsupported service {service}\n".encode())
        except (ConnectionError, OSError, queue.Empty):
            pass
        finally:
            stream.close()

    def _sync(self, stream: Stream) -> None:
        while True:
            ident, length = stream.read(4), struct.unpack("<I", stream.read(4))[0]
            if ident == b"QUIT":
                return
            path = stream.read(length).decode()
            if ident == b"SEND":
                path, data = path.rsplit(",", 1)[0], b""
                while stream.read(4) == b"DATA":
                    data += stream.read(struct.unpack("<I", stream.read(4))[0])
                stream.read(4)  # DONE's mtime
                self.files[path] = data
                stream.write(b"OKAY\0\0\0\0")
            elif ident == b"STAT":  # mode, size, mtime; zeros for a missing path
                data = self.files.get(path)
                stream.write(b"STAT" + struct.pack("<3I", 0o100644 if data is not None else 0, len(data or b""), 0))
            elif ident == b"RECV" and path in self.files:
                data = self.files[path]
                stream.write(b"DATA" + struct.pack("<I", len(data)) + data + b"DONE\0\0\0\0")
            else:
                message_ = f"{path}: No such file or directory".encode()
                stream.write(b"FAIL" + struct.pack("<I", len(message_)) + message_)


def serve(port: int, shell: Shell, files: Files, ready: Callable[[int], None] | None = None) -> None:
    """Accept host connections on 127.0.0.1:``port`` (0: any free port) forever."""
    server = socket.create_server(("127.0.0.1", port))
    if ready is not None:
        ready(server.getsockname()[1])
    while True:
        sock, _ = server.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=Connection(sock, shell, files).serve, daemon=True).start()
