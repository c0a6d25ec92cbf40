"""File-system access for stores, behind ``pyarrow.fs``: local folders and object stores.

A store is named by a local path or a URI that ``pyarrow.fs.FileSystem.from_uri``
understands (``s3://bucket/prefix``, ``gs://bucket/prefix``; pyarrow reads the usual
``AWS_*`` variables, ``AWS_ENDPOINT_URL`` included, or options in the URI's query).

Local stores get their atomicity from fsync + rename and their exclusion from advisory
locks. Object stores have neither rename nor locks, so:

- an object appears whole or not at all (a single PUT, or a multipart upload that is
  completed only when the whole file went up), so files are finished locally and then
  *published* as one object, and a manifest object written after them is the commit;
- locks, staged shards and staged ledgers live in a local *state folder* keyed by the
  store URI (``$TRAJFORGE_STATE_DIR``, default ``~/.cache/trajforge/state``), so what a
  killed process left is found by the next run on the same machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import posixpath
import shutil
from dataclasses import dataclass

import pyarrow.fs as pafs

from schemas.errors import StoreError

STATE_ENV = "TRAJFORGE_STATE_DIR"


def state_root() -> str:
    """Where object stores keep their local state (locks, staged files)."""
    return os.environ.get(STATE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "trajforge", "state")


def inside(base: str, path: str) -> bool:
    """Whether ``path`` is ``base`` or lies under it, by the text alone (``..`` resolved)."""
    base, path = posixpath.normpath(base), posixpath.normpath(path)
    return path == base or path.startswith(base.rstrip("/") + "/")


def _patient(fs: pafs.FileSystem) -> pafs.FileSystem:
    """An S3 file system with timeouts for busy servers: the SDK's default gives up on a
    request that sends nothing for 3 s, which a loaded S3-compatible server can exceed."""
    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    _, (options,) = fs.__reduce__()
    if options["request_timeout"] < 0 and options["connect_timeout"] < 0:
        options |= {"request_timeout": 60.0, "connect_timeout": 10.0}
        return pafs.S3FileSystem(**options)
    return fs


@dataclass(frozen=True)
class StoreFS:
    """A file system and the root path of a store on it."""

    fs: pafs.FileSystem
    root: str

    @classmethod
    def open(cls, uri: str | os.PathLike[str]) -> StoreFS:
        uri = os.fspath(uri)
        if "://" in uri and not uri.startswith("file://"):
            try:
                fs, root = pafs.FileSystem.from_uri(uri)
            except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) for bad URIs
                raise StoreError(f"{uri}: cannot open this store URI ({str(exc).splitlines()[0]})") from None
            return cls(_patient(fs), root.rstrip("/"))
        return cls(pafs.LocalFileSystem(), os.path.abspath(uri.removeprefix("file://")))

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def scheme(self) -> str:
        """``file``, ``s3``, ``gcs``, ...: from the file system, so ``gs://`` and ``gcs://`` agree."""
        return "file" if self.local else self.fs.type_name

    def uri(self, path: str | None = None) -> str:
        """The URI a user would type for ``path`` (default: the store root)."""
        path = self.root if path is None else path
        return path if self.local else f"{'gs' if self.scheme == 'gcs' else self.scheme}://{path}"

    def join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def rel(self, path: str) -> str:
        """``path`` relative to the store root."""
        return posixpath.relpath(path, self.root)

    # -- confinement ---------------------------------------------------------------------------
    def confine(self, base: str, name: str) -> str:
        """The path of ``name`` inside the folder ``base``, or StoreError naming it when it
        lies outside: an absolute path or ``..`` on any store (a check of the text, which is
        all an object store has), and on a local store also a symbolic link leading out.
        Every path a manifest or a listing names goes through here before it is read."""
        path = posixpath.join(base, name)
        if posixpath.isabs(name) or not inside(base, path):
            raise StoreError(f"{self.uri(base)}: {name!r} lies outside this folder")
        if self.local and not inside(os.path.realpath(base), os.path.realpath(path)):
            raise StoreError(f"{self.uri(path)}: a symbolic link leading outside {self.uri(base)}")
        return path

    def stamp(self, path: str) -> tuple[str, str, int] | None:
        """(identity, stamp, mtime_ns) of a file, for remembering what was verified: the real
        path and size, mtime, ctime, inode and device on a local store (any write changes
        one); the URI with the endpoint, size and mtime on an object store. None if missing."""
        if self.local:
            try:
                st = os.stat(path)
            except OSError:
                return None
            stamp = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"
            return os.path.realpath(path), stamp, max(st.st_mtime_ns, st.st_ctime_ns)
        info = self.info(path)
        if info.type != pafs.FileType.File or info.mtime_ns is None:
            return None
        endpoint = self.fs.__reduce__()[1][0].get("endpoint_override", "") if self.scheme == "s3" else ""
        return f"{endpoint}|{self.uri(path)}", f"{info.size}:{info.mtime_ns}", info.mtime_ns

    # -- local state of object stores ----------------------------------------------------------
    def local_path(self, path: str) -> str:
        """A local file path standing for ``path`` in the store: the path itself on a local
        store, else its place under the store's local state folder (locks, staged files)."""
        if self.local:
            return path
        return os.path.join(state_root(), self.scheme, path.lstrip("/"))

    # -- reading and listing -------------------------------------------------------------------
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

    def files(self, path: str) -> list[str]:
        """Every file under ``path`` (recursive), sorted; none if it does not exist."""
        infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        return sorted(i.path for i in infos if i.type == pafs.FileType.File)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return f.read()

    # -- writing -------------------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        if self.local:
            self.fs.create_dir(path, recursive=True)
        # object stores have no folders: a key's prefix exists once an object under it does

    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        """Write a small file so readers see either the old or the new content, whole."""
        if not self.local:  # one PUT: the object appears whole or not at all
            with self.fs.open_output_stream(path) as f:
                f.write(data)
            return
        tmp = f"{path}.tmp-{os.getpid()}"
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        self.fsync(tmp)
        self.fs.move(tmp, path)
        self.fsync_dir(posixpath.dirname(path))

    def publish(self, local_file: str, path: str) -> None:
        """Make a finished local file the store's ``path``, whole or not at all: a rename on
        a local store (the file is removed from where it was), one upload on an object store
        (a multipart upload is completed only after its last part; the local file stays
        until the caller's commit is done, so a kill before it loses nothing)."""
        if self.local:
            self.fsync(local_file)
            try:
                os.replace(local_file, path)
            except OSError:  # another device: copy beside, then rename
                tmp = f"{path}.tmp-{os.getpid()}"
                shutil.copyfile(local_file, tmp)
                self.fsync(tmp)
                os.replace(tmp, path)
                os.unlink(local_file)
            self.fsync_dir(posixpath.dirname(path))
            return
        pafs.copy_files(local_file, path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs)

    def move(self, src: str, dst: str) -> None:
        self.fs.move(src, dst)

    def delete(self, path: str) -> None:
        self.fs.delete_file(path)

    def rmtree(self, path: str) -> None:
        """Delete a folder (every object under a prefix) if it exists."""
        if self.local:
            shutil.rmtree(path, ignore_errors=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir_contents(path, missing_dir_ok=True)
        with contextlib.suppress(FileNotFoundError, OSError):
            self.fs.delete_dir(path)

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
        """Hold an exclusive advisory lock on ``path`` (for object stores, on its place in
        the local state folder: exclusion among this machine's processes), or refuse at once."""
        local = self.local_path(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        fd = os.open(local, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                raise StoreError(f"{self.uri(posixpath.dirname(path))}: in use by {holder} (lock {local})") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
            yield
        finally:
            os.close(fd)


LOCAL = StoreFS(pafs.LocalFileSystem(), "/")  # for files outside any store (staged files, work folders)
