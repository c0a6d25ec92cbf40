"""A release's manifest, and the one check of release files against it.

A release folder holds ``manifest.json`` and exactly the files it lists, each with its
size and sha256. Every reader (``release verify``, ``export``, ``diff``, training,
evaluation) opens a release through :func:`open_release`, which refuses

- a manifest that is not what ``release create`` writes: not JSON, wrong types, a
  ``format``, name or version that is not this release's, a path that leaves the folder
  (``../``, absolute, a symlink out) or would not print on one line;
- a folder whose files are not the manifest's (missing, another size, extra): a listing,
  no file is read;

and then the reader hashes only the files it is about to read (:meth:`Release.check`,
streamed 8 MiB at a time). Every refusal is one line naming the file::

    rel = open_release("store/releases/wm/1")
    paths = rel.check(rel.entries("sft", "train"))  # ShardError on a changed file

What it cannot establish: the manifest has no signature, so one rewritten together with
the files it lists passes; pin ``Release.manifest_sha256`` (training reports record it).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipelines.store import Store, StoreFS
from pipelines.store.manifest import MAX_MANIFEST_BYTES
from pipelines.store.shards import file_sha256
from schemas.config import validation_message
from schemas.errors import ShardError, StoreError, TrajforgeError, one_line

MANIFEST = "manifest.json"
FORMAT = "trajforge.release/1"
CHANGED = "changed (sha256 differs from the manifest)"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # release names and versions
Count = Annotated[int, Field(strict=True, ge=0)]


def safe_relative(path: str) -> str:
    """A path inside a folder, POSIX form: no absolute path, ``..``, empty or dot part,
    backslash or control character (errors quote paths and must stay one line)."""
    if not path or path.startswith("/") or "\\" in path or any(ord(c) < 32 or c == "\x7f" for c in path):
        raise ValueError(f"{path!r} is not a relative path inside the release")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"{path!r} leaves the release folder or is not normalised")
    return path


class FileEntry(BaseModel):
    """One file of a release, as ``build_manifest`` writes it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    path: str
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    bytes: Count
    rows: Count | None = None
    tokens: Count | None = None
    stage: Literal["cpt", "sft", "rl"] | None = None
    split: Literal["train", "validation", "test"] | None = None

    @field_validator("path")
    @classmethod
    def _inside(cls, path: str) -> str:
        return safe_relative(path)

    @model_validator(mode="after")
    def _data_file_in_its_place(self) -> FileEntry:
        if (self.stage is None) != (self.split is None):
            raise ValueError(f"{self.path}: stage and split go together")
        if self.stage and not (self.path.startswith(f"data/{self.stage}/{self.split}-") and self.path.endswith(".parquet")):
            raise ValueError(f"{self.path}: a {self.stage} {self.split} file must be data/{self.stage}/{self.split}-*.parquet")
        return self


class Manifest(BaseModel):
    """The checked part of ``manifest.json``; the rest (config, plan, lineage) rides along."""

    model_config = ConfigDict(extra="allow", frozen=True)
    format: Literal["trajforge.release/1"]
    name: Annotated[str, Field(strict=True, pattern=NAME.pattern)]
    version: Annotated[str, Field(strict=True, pattern=NAME.pattern)]
    files: list[FileEntry]
    curations: list[str] = []
    config_hash: str = ""
    tokenizer_sha256: str | None = None

    @model_validator(mode="after")
    def _each_path_once(self) -> Manifest:
        seen: set[str] = set()
        for f in self.files:
            if f.path == MANIFEST or f.path in seen:
                raise ValueError(f"{f.path}: listed twice (or lists the manifest itself)")
            seen.add(f.path)
        return self


def parse_manifest(data: bytes, where: str) -> Manifest:
    """A manifest from its bytes, or a one-line StoreError naming ``where`` and the field."""
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        at = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise StoreError(f"{where}: unreadable manifest (not JSON{at})") from None
    except RecursionError:
        raise StoreError(f"{where}: unreadable manifest (nested too deeply)") from None
    if not isinstance(body, dict):
        raise StoreError(f"{where}: unreadable manifest (not a JSON object)")
    try:
        return Manifest.model_validate(body)
    except ValidationError as exc:
        raise StoreError(f"{where}: bad manifest: {validation_message(exc)}") from None


@dataclass(frozen=True)
class Release:
    """An opened release: its manifest checked and its folder's listing matching it."""

    sfs: StoreFS
    manifest: Manifest
    manifest_sha256: str

    @property
    def root(self) -> str:
        return self.sfs.root

    def uri(self, entry: FileEntry) -> str:
        return self.sfs.uri(self.sfs.join(entry.path))

    def entries(self, stage: str | None = None, split: str | None = None) -> list[FileEntry]:
        """The data files of a stage (and split), in path order; every file without a stage."""
        if stage is None:
            return list(self.manifest.files)
        return [f for f in self.manifest.files if f.stage == stage and (split is None or f.split == split)]

    def stages(self) -> list[str]:
        return sorted({f.stage for f in self.manifest.files if f.stage})

    def content_problem(self, entry: FileEntry) -> ShardError | None:
        """The one content check: the file's sha256 (streamed) against the manifest's."""
        path = self.sfs.join(entry.path)
        try:
            digest = file_sha256(self.sfs, path)
        except (OSError, ShardError) as exc:  # vanished since the listing, unreadable
            return ShardError(self.sfs.uri(path), f"unreadable ({one_line(getattr(exc, 'problem', str(exc)), 160)})")
        if digest != entry.sha256:
            return ShardError(self.sfs.uri(path), CHANGED)
        return None

    def problems(self) -> Iterator[ShardError]:
        """Every problem: the folder's shape, then the content of each listed file of the right size."""
        shape = shape_problems(self.sfs, self.manifest)
        yield from shape
        bad = {p.path for p in shape}
        for entry in self.manifest.files:
            if self.uri(entry) not in bad and (problem := self.content_problem(entry)):
                yield problem

    def check(self, entries: list[FileEntry]) -> list[str]:
        """Hash the files a reader is about to read, and compare a data file's row count in
        its Parquet footer with the manifest's (a manifest damaged in a number); their
        paths, or ShardError on the first mismatch."""
        for entry in entries:
            if problem := self.content_problem(entry):
                raise problem
            if entry.rows is not None and (rows := self._footer_rows(entry)) != entry.rows:
                raise ShardError(self.uri(entry), f"has {rows} rows, the manifest says {entry.rows}")
        return [self.sfs.join(e.path) for e in entries]

    def _footer_rows(self, entry: FileEntry) -> int:
        try:
            with self.sfs.fs.open_input_file(self.sfs.join(entry.path)) as f:
                return pq.ParquetFile(f).metadata.num_rows
        except (OSError, pa.ArrowException) as exc:
            raise ShardError(self.uri(entry), f"unreadable Parquet ({one_line(str(exc), 160)})") from None


def _outside(sfs: StoreFS, path: str) -> bool:
    """A file that leaves the release folder (a symbolic link leading out): the store's own check."""
    try:
        sfs.confine(sfs.root, posixpath.relpath(path, sfs.root))
    except StoreError:
        return True
    return False


def shape_problems(sfs: StoreFS, manifest: Manifest) -> list[ShardError]:
    """Each file missing, of another size, linked out of the folder, or not listed: one
    listing of the folder, no file read."""
    listing = sfs.fs.get_file_info(pafs.FileSelector(sfs.root, recursive=True, allow_not_found=True))
    found = {sfs.rel(i.path): i for i in listing}
    problems = []
    for f in manifest.files:
        path, info = sfs.join(f.path), found.get(f.path)
        if info is None or info.type.name != "File":
            problems.append(ShardError(sfs.uri(path), "missing"))
        elif _outside(sfs, path):
            problems.append(ShardError(sfs.uri(path), "links outside the release folder"))
        elif info.size != f.bytes:
            problems.append(ShardError(sfs.uri(path), CHANGED))  # another size: another sha256, no need to read it
    listed = {f.path for f in manifest.files} | {MANIFEST}
    for rel, info in sorted(found.items()):
        if info.type.name != "Directory" and rel not in listed:  # its name may hold a newline: escaped
            problems.append(ShardError(one_line(sfs.uri(info.path)), "extra file, not in the manifest"))
    return problems


def load(root: str | os.PathLike[str]) -> Release:
    """A release with its manifest checked, its folder not yet (``open_release`` does both)."""
    sfs = StoreFS.open(root)
    path = sfs.join(MANIFEST)
    info = sfs.info(path)
    if info.type.name != "File":
        if not sfs.is_dir(sfs.root):
            raise StoreError(f"{sfs.uri()}: not a release (no such folder)")
        raise StoreError(f"{sfs.uri()}: not a release (no {MANIFEST})")
    if info.size is not None and info.size > MAX_MANIFEST_BYTES:
        raise StoreError(f"{sfs.uri(path)}: unreadable manifest ({info.size:,} bytes, more than a release writes)")
    if _outside(sfs, path):
        raise StoreError(f"{sfs.uri(path)}: links outside the release folder")
    data = sfs.read_bytes(path)
    manifest = parse_manifest(data, sfs.uri(path))
    name, version = Path(sfs.root).parent.name, Path(sfs.root).name
    if Path(sfs.root).parent.parent.name == "releases" and (manifest.name, manifest.version) != (name, version):
        raise StoreError(
            f"{sfs.uri(path)}: names release {manifest.name} {manifest.version}, but lies in releases/{name}/{version}"
        )
    return Release(sfs, manifest, hashlib.sha256(data).hexdigest())


def open_release(root: str | os.PathLike[str]) -> Release:
    """A release to read: its manifest checked and its folder holding exactly the listed
    files at their sizes (StoreError / ShardError otherwise, one line naming the file)."""
    rel = load(root)
    if shape := shape_problems(rel.sfs, rel.manifest):
        more = f" (and {len(shape) - 1} more: trajforge release verify lists them)" if len(shape) > 1 else ""
        raise ShardError(shape[0].path, shape[0].problem + more)
    return rel


def in_store(store: Store | str | os.PathLike[str], release: str) -> str:
    """The folder of ``NAME/VERSION`` in a store; a name or version that could leave it is refused."""
    name, _, version = release.partition("/")
    for part, what in ((name, "name"), (version, "version")):
        if not NAME.match(part):
            raise StoreError(f"release {release!r}: expected NAME/VERSION, the {what} being letters, digits, '.', '_' or '-'")
    store = Store.open(store)  # StoreError if there is no such store
    return store.sfs.uri(store.layout.release_dir(name, version))


def store_releases(store: Store | str | os.PathLike[str]) -> Iterator[tuple[str, Release | TrajforgeError]]:
    """(folder, opened release or the one-line error that refused it) of every release of a
    store, for readers that go over them all (``release list``, the query views): a release
    exists once its ``manifest.json`` does (written last, also on object stores). StoreError
    if the store itself does not exist. Hash the files read with ``Release.check``."""
    store = Store.open(store)  # StoreError if there is no such store
    sfs = store.sfs
    for name in sfs.listdir(store.layout.releases_root()):
        for version in sfs.listdir(name.path) if name.type.name == "Directory" else ():
            if version.type.name != "Directory" or version.base_name.startswith("."):
                continue  # a release being built (.VERSION.building)
            if not sfs.exists(f"{version.path}/{MANIFEST}"):
                continue
            try:
                yield sfs.uri(version.path), open_release(sfs.uri(version.path))
            except TrajforgeError as exc:
                yield sfs.uri(version.path), exc
