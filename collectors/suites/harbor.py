"""Harbor task folders (Harbor, Terminal-Bench 2): ``task.toml``, ``instruction.md``,
``environment/Dockerfile``, ``tests/test.sh`` (writes ``/logs/verifier/reward.txt``) and
``solution/solve.sh``. Each becomes a terminal task:

- its image is built from the task's Dockerfile through the container engine (tag
  ``localhost/harbor-<name>:<hash of the environment folder>``), or is the prebuilt image
  ``[environment] docker_image`` names, or ``--image`` replaces it (offline: the
  Dockerfile's base cannot be pulled);
- the sandbox may write the Dockerfile's ``WORKDIR`` (filled with the image's content
  there) and Harbor's ``/tests``, ``/solution`` and ``/logs`` (``extra.sandbox.writable``),
  on its quota disk;
- after the episode the tests are copied in (the agent never sees them) and ``test.sh``
  runs from the workdir; its ``reward.txt`` is the reward (``extra.reward_file``);
- ``solution/solve.sh`` is the scripted solution (``actions``: every file of ``solution/``
  copied to ``/solution``, then ``solve.sh`` run from the workdir): the oracle policy is
  ``policy: {kind: scripted}``;
- ``task.toml``'s timeouts and resources are honoured: ``[agent] timeout_sec`` (the
  episode), ``[verifier] timeout_sec``, ``[environment]`` ``cpus``, ``memory = "2G"`` or
  ``memory_mb``, ``storage = "10G"`` or ``storage_mb`` (the disk quota).

A task folder comes from outside: every file of it that is read is a regular file inside
the folder (``_file``), never through a symbolic link (a test file linked to a host's
secret would be copied into the sandbox), and at most ``MAX_FILE_BYTES``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import stat
import tomllib
from pathlib import Path
from typing import Any

from schemas.errors import ConfigError

HARBOR_DIRS = ("/tests", "/solution", "/logs")
MAX_FILE_BYTES = 16 << 20  # a task's instruction, tests or solution: text, never this long
MAX_BINARY_SOLUTION = 256 << 10  # a binary file of solution/ is typed into the shell as base64
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[kmgt])?\s*$", re.I)
_UNITS = {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def size_mb(value: Any, where: str) -> int:
    """``"2G"``, ``"512M"``, ``"1.5GiB"`` or a number of bytes -> MiB."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return max(1, int(value / (1 << 20)))
    m = _SIZE.match(value) if isinstance(value, str) else None
    if not m:
        raise ConfigError(f"{where}: {value!r} is not a size such as 2G or 512M")
    unit = (m.group(2) or "")[:1].upper()
    return max(1, int(float(m.group(1)) * _UNITS[unit]))


def workdir_of(dockerfile: str) -> str:
    """The last ``WORKDIR`` of a Dockerfile (absolute; ``/`` when there is none)."""
    found = "/"
    for line in dockerfile.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and parts[0].upper() == "WORKDIR":
            path = parts[1].strip().strip('"')
            found = path if path.startswith("/") else f"{found.rstrip('/')}/{path}"
    return found


def _file(path: Path, root: Path, where: str) -> bytes:
    """The bytes of a regular file inside ``root``, read without following a symbolic link
    anywhere below ``root``; ``ConfigError`` naming ``where`` otherwise."""
    rel = path.relative_to(root)
    for depth in range(1, len(rel.parts) + 1):
        part = root.joinpath(*rel.parts[:depth])
        if part.is_symlink():
            raise ConfigError(f"{where}: {part.relative_to(root)} is a symbolic link (not followed)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"{where}: missing") from None
    except OSError as exc:
        raise ConfigError(f"{where}: not readable ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{where}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{where}: larger than {MAX_FILE_BYTES >> 20} MiB")
        return f.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES]


def _text(path: Path, where: str, root: Path) -> str:
    try:
        return _file(path, root, where).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None


def _files(folder: Path, root: Path) -> list[Path]:
    """The regular files under ``folder``, in order, not walking into linked folders; a
    link to a file is refused (``_file``) when it is read."""
    found = []
    for top, _dirs, files in os.walk(folder):
        found += [Path(top) / f for f in files]
    return sorted(found)


def _table(config: dict, name: str, where: str) -> dict:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{name}] is not a table")
    return value


def _number(table: dict, key: str, where: str) -> float | None:
    v = table.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise ConfigError(f"{where}: {key} = {v!r} is not a positive number")
    return float(v)


def build_image(folder: Path, name: str, log=print) -> str:
    """Build the task's ``environment/`` with the container engine; returns the tag."""
    from sandboxes.engine import client, find_engine

    env_dir = folder / "environment"
    digest = hashlib.sha256()
    for p in _files(env_dir, folder):
        digest.update(str(p.relative_to(env_dir)).encode() + b"\0" + _file(p, folder, str(p)))
    tag = f"localhost/harbor-{re.sub(r'[^a-z0-9_.-]', '-', name.lower())}:{digest.hexdigest()[:12]}"
    docker = client(find_engine())
    try:
        docker.images.get(tag)
        return tag
    except Exception:  # not built yet
        pass
    log(f"building {tag} ...")
    try:
        docker.images.build(path=str(env_dir), tag=tag, rm=True, pull=False)
    except Exception as exc:  # BuildError / APIError: the engine's own words, one line
        raise ConfigError(f"{folder}: building environment/Dockerfile failed: {str(exc).splitlines()[0][:300]}") from None
    return tag


def harbor_task(folder: str | Path, *, image: str | None = None, build: bool = True, log=print) -> dict[str, Any]:
    """One Harbor task folder -> a task body (see the module docstring)."""
    folder = Path(folder)
    name = folder.resolve().name
    where = str(folder)
    try:
        config = tomllib.loads(_text(folder / "task.toml", f"{where}/task.toml", folder))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}/task.toml: not TOML ({exc})") from None
    instruction = _text(folder / "instruction.md", f"{where}/instruction.md", folder).strip()
    dockerfile = _text(folder / "environment" / "Dockerfile", f"{where}/environment/Dockerfile", folder)
    test_sh = folder / "tests" / "test.sh"
    if not test_sh.is_file():
        raise ConfigError(f"{where}/tests/test.sh: missing")
    env, agent, verifier = (_table(config, t, f"{where}/task.toml") for t in ("environment", "agent", "verifier"))
    sandbox: dict[str, Any] = {}
    if "memory" in env or "memory_mb" in env:
        sandbox["memory_mb"] = (
            size_mb(env["memory"], f"{where}/task.toml memory") if "memory" in env else int(_number(env, "memory_mb", where))
        )
    if "storage" in env or "storage_mb" in env:
        sandbox["disk_mb"] = (
            size_mb(env["storage"], f"{where}/task.toml storage") if "storage" in env else int(_number(env, "storage_mb", where))
        )
    cpus = _number(env, "cpus", f"{where}/task.toml")
    if cpus is not None:
        sandbox["cpus"] = cpus
    workdir = workdir_of(dockerfile)
    sandbox["writable"] = sorted({*HARBOR_DIRS, *([workdir] if workdir != "/" else [])})
    prebuilt = env.get("docker_image") if isinstance(env.get("docker_image"), str) and env.get("docker_image") else None
    sandbox["image"] = image or prebuilt or (build_image(folder, name, log) if build else f"localhost/harbor-{name}")
    verify_files = {}
    for p in _files(folder / "tests", folder):
        data = _file(p, folder, str(p))
        try:
            content: str | dict[str, str] = data.decode("utf-8")
        except UnicodeDecodeError:  # a test's data file (an image, an archive): its bytes, in base64
            content = {"base64": base64.b64encode(data).decode("ascii")}
        verify_files[f"/tests/{p.relative_to(folder / 'tests').as_posix()}"] = content
    actions: list[dict[str, Any]] = []
    solve = folder / "solution" / "solve.sh"
    if solve.is_file() or solve.is_symlink():
        _text(solve, str(solve), folder)  # it must be text
        actions = [_copy_action(p, folder) for p in _files(folder / "solution", folder)]
        agent_timeout = _number(agent, "timeout_sec", where) or 600.0
        actions.append(
            {"action": "run", "command": f"cd {workdir} && bash /solution/solve.sh", "timeout": min(agent_timeout, 3600.0)}
        )
    extra: dict[str, Any] = {
        "source": "harbor",
        "source_id": name,
        "workdir": workdir,
        "sandbox": sandbox,
        "verify_files": verify_files,
        "reward_file": "/logs/verifier/reward.txt",
    }
    for key, table, field in (("episode_timeout_s", agent, "timeout_sec"), ("verify_timeout_s", verifier, "timeout_sec")):
        value = _number(table, field, f"{where}/task.toml")
        if value is not None:
            extra[key] = value
    metadata = _table(config, "metadata", f"{where}/task.toml")
    if metadata:
        extra["metadata"] = metadata
    return {
        "id": f"harbor/{name}",
        "domain": "terminal",
        "env_id": f"harbor-{name}",
        "instruction": instruction,
        "check": f"rm -rf /logs/verifier && mkdir -p /logs/verifier && cd {workdir} && bash /tests/test.sh",
        "actions": actions,
        "extra": extra,
    }


def _copy_action(path: Path, folder: Path) -> dict[str, Any]:
    """The oracle's action that puts one file of ``solution/`` at ``/solution/...``: text as
    ``write_file``, bytes (at most ``MAX_BINARY_SOLUTION``) decoded from base64 by the shell."""
    data = _file(path, folder, str(path))
    dest = f"/solution/{path.relative_to(folder / 'solution').as_posix()}"
    try:
        return {"action": "write_file", "path": dest, "content": data.decode("utf-8")}
    except UnicodeDecodeError:
        pass
    if len(data) > MAX_BINARY_SOLUTION:
        raise ConfigError(f"{path}: a binary solution file over {MAX_BINARY_SOLUTION >> 10} KiB (the oracle types it in)")
    b64 = base64.b64encode(data).decode("ascii")
    folder_of = shlex.quote(dest.rsplit("/", 1)[0])
    return {"action": "run", "command": f"mkdir -p {folder_of} && printf %s {b64} | base64 -d > {shlex.quote(dest)}"}


def task_folders(paths: list[str]) -> list[Path]:
    """The task folders under each path (a task folder itself, or a folder of them)."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            raise ConfigError(f"{p}: no such folder")
        if (p / "task.toml").is_file():
            found.append(p)
        else:
            kids = sorted(k for k in p.iterdir() if (k / "task.toml").is_file())
            if not kids:
                raise ConfigError(f"{p}: no Harbor task here (no task.toml in it or its subfolders)")
            found += kids
    return found
