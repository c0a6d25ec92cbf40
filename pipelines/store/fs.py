"""File-system access for stores, behind ``pyarrow.fs`` so object stores can follow.

A store is named by a local path or a URI that ``pyarrow.fs.FileSystem.from_uri``
understands. Durability extras (fsync, directory fsync, advisory locks) apply to local
stores; object stores get their atomicity from single-object writes instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import posixpath
from dataclasses import dataclass

import pyarrow.fs as pafs

from schemas.errors import StoreError


@dataclass(frozen=True)
class StoreFS:
    """A file system and the root path of a store on it."""

    fs: pafs.FileSystem
    root: str

    @classmethod
    def open(cls, uri: str | os.PathLike[str]) -> StoreFS:
        uri = os.fspath(uri)
        if "://" in uri:
            fs, root = pafs.FileSystem.from_uri(uri)
            return cls(fs, root.rstrip("/"))
        return cls(pafs.LocalFileSystem(), os.path.abspath(uri))

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def info(self, path: str) -> pafs.FileInfo:
        return self.fs.get_file_info(path)

    def exists(self, path: str) -> bool:
        return self.info(path).type != pafs.FileType.NotFound

    def is_dir(self, path: str) -> bool:
        return self.info(path).type == pafs.FileType.Directory

    def listdir(self, path: str) -> list[pafs.FileInfo]:
        if not self.is_dir(path):
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=False))
        return sorted(infos, key=lambda i: i.path)

    def makedirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        """Write a small file so readers see either the old or the new content, whole."""
        tmp = f"{path}.tmp-{os.getpid()}"
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        self.fsync(tmp)
        self.fs.move(tmp, path)
        self.fsync_dir(posixpath.dirname(path))

    def move(self, src: str, dst: str) -> None:
        self.fs.move(src, dst)

    def delete(self, path: str) -> None:
        self.fs.delete_file(path)

    def fsync(self, path: str) -> None:
        if self.local:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def fsync_dir(self, path: str) -> None:
        if self.local:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def lock(self, path: str):
        """Hold an exclusive advisory lock on ``path`` (local stores), or refuse at once."""
        if not self.local:
            yield
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                raise StoreError(f"{posixpath.dirname(path)}: in use by {holder} (lock {path})") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
            yield
        finally:
            os.close(fd)
