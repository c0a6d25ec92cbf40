"""Images without a registry: a debootstrapped Debian root, imported as the base image.

``build_root`` runs ``debootstrap --variant=minbase`` against the machine's Debian mirror
into the cache (about a minute, once per machine; rebuilt whenever missing). The local
backend uses that folder read-only as its root. ``build_images`` imports it into the
engine as ``localhost/trajforge-base:bookworm`` and builds the Dockerfiles under
``sandboxes/images/`` from it. Each result carries a recipe hash, so a rerun with nothing
changed returns at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from sandboxes.errors import SandboxError
from sandboxes.paths import cache_dir, state_dir

SUITE = "bookworm"
#: What agents reach for, in both backends (the terminal image is built from this root):
#: editors, pagers, network clients (for jobs that allow network), VCS, compilers, archives.
ROOT_PACKAGES = (
    "bash",
    "coreutils",
    "findutils",
    "grep",
    "sed",
    "gawk",
    "util-linux",
    "procps",
    "iproute2",
    "file",
    "less",
    "vim",
    "nano",
    "patch",
    "diffutils",
    "tree",
    "tmux",
    "git",
    "openssh-client",
    "ca-certificates",
    "curl",
    "wget",
    "jq",
    "sqlite3",
    "ripgrep",
    "zip",
    "unzip",
    "xz-utils",
    "bzip2",
    "python3",
    "python3-pytest",
    "python3-venv",
    "build-essential",
)
#: The commands that prove the root has them (tested on both backends, listed in docs/sandboxes.md).
TOOLS = (
    "bash",
    "vim",
    "vi",
    "nano",
    "less",
    "curl",
    "wget",
    "jq",
    "git",
    "python3",
    "pytest",
    "gcc",
    "g++",
    "make",
    "unzip",
    "zip",
    "tree",
    "ps",
    "top",
    "ip",
    "file",
    "patch",
    "diff",
    "ssh",
    "sqlite3",
    "rg",
    "tar",
    "xz",
    "bzip2",
    "tmux",
    "awk",
    "find",
    "grep",
    "sed",
)
BASE_IMAGE = f"localhost/trajforge-base:{SUITE}"
IMAGES = {"terminal": "localhost/trajforge-terminal:latest", "swe": "localhost/trajforge-swe:latest"}
DEFAULT_MIRROR = "http://deb.debian.org/debian"
RECIPE_LABEL = "trajforge.recipe"
GITCONFIG = """[user]\n\tname = sandbox\n\temail = sandbox@localhost\n[init]\n\tdefaultBranch = main
[safe]\n\tdirectory = *\n"""


def root_recipe() -> str:
    return hashlib.sha256(f"{SUITE}|minbase|{','.join(ROOT_PACKAGES)}|{GITCONFIG}".encode()).hexdigest()[:12]


def root_path() -> Path:
    return cache_dir() / "roots" / f"{SUITE}-{root_recipe()}"


def debian_mirror() -> str:
    """The mirror apt on this machine uses (deb822 or one-line sources)."""
    for path in [*sorted(Path("/etc/apt/sources.list.d").glob("*.sources")), Path("/etc/apt/sources.list")]:
        try:
            text = path.read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+)", text, re.M) or re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+", text, re.M)
        if m and "security" not in m.group(1):
            return m.group(1)
    return DEFAULT_MIRROR


@contextlib.contextmanager
def _build_lock(name: str):
    lock = cache_dir() / f".{name}.lock"
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # parallel workers wait for one build
        yield


def local_root() -> Path:
    """The root folder local sandboxes use, built on first use."""
    path = root_path()
    return path if path.is_dir() else build_root()


def mounted_root(root: Path) -> Path:
    """The root as its own read-only file system: an ext4 image of the folder (made once per
    recipe, about half a minute), loop-mounted once per host under the state dir. Bound as a
    sandbox's ``/``, it shows in the sandbox's mount table as ``/dev/loopN``, not as the
    cache folder's host path. OSError says why it cannot (no root, no mkfs.ext4)."""
    from sandboxes.disk import make_ext4, mount_image, mounts_under

    if os.geteuid() != 0:  # before the half-minute mkfs that the mount would then refuse
        raise PermissionError(1, "mounting the root image needs root")
    image = root.with_name(root.name + ".img")
    point = state_dir() / "roots" / root.name
    with _build_lock("root-image"):
        if not image.exists():
            size_mb = int(subprocess.run(["du", "-smx", str(root)], capture_output=True, text=True).stdout.split()[0])
            tmp = image.with_name(image.name + ".tmp")
            make_ext4(tmp, size_mb * 5 // 4 + 64, content=root)
            tmp.rename(image)
        if not mounts_under(point):
            point.mkdir(parents=True, exist_ok=True)
            mount_image(image, point, read_only=True)
    return point


def build_root(*, force: bool = False, log=print) -> Path:
    final = root_path()
    with _build_lock("root"):
        if final.is_dir() and not force:
            return final
        if shutil.which("debootstrap") is None:
            raise SandboxError("debootstrap is not installed (apt-get install debootstrap, or make test)")
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        mirror = debian_mirror()
        log(f"debootstrap {SUITE} ({len(ROOT_PACKAGES)} packages) from {mirror} into {final} ...")
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(ROOT_PACKAGES)}", SUITE, str(tmp), mirror],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise SandboxError(f"debootstrap failed ({proc.returncode}): {' | '.join(tail)}")
        (tmp / "work").mkdir(exist_ok=True)
        (tmp / "etc" / "gitconfig").write_text(GITCONFIG)
        for d in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(tmp / d, ignore_errors=True)
            (tmp / d).mkdir(parents=True, exist_ok=True)
        if force and final.exists():
            shutil.rmtree(final)
            from sandboxes.disk import unmount_all_under

            unmount_all_under(state_dir() / "roots" / final.name)  # its image is remade from the new folder
            final.with_name(final.name + ".img").unlink(missing_ok=True)
        tmp.rename(final)
        return final


def _dockerfile_dir(name: str) -> Path:
    return Path(str(resources.files("sandboxes").joinpath("images", name)))


def _recipe(name: str, base_recipe: str) -> str:
    text = (_dockerfile_dir(name) / "Dockerfile").read_text()
    return hashlib.sha256(f"{base_recipe}|{text}".encode()).hexdigest()[:12]


def _image_recipe(docker_client, tag: str) -> str | None:
    docker = __import__("docker")
    try:
        return (docker_client.images.get(tag).labels or {}).get(RECIPE_LABEL)
    except docker.errors.ImageNotFound:
        return None


def import_base(docker_client, root: Path, *, log=print) -> str:
    """Import the root folder as BASE_IMAGE (podman or docker CLI), unless it is current."""
    recipe = root_recipe()
    if _image_recipe(docker_client, BASE_IMAGE) == recipe:
        return BASE_IMAGE
    from sandboxes.engine import podman_env

    cli = shutil.which("podman") or shutil.which("docker")
    if cli is None:
        raise SandboxError("neither podman nor docker CLI found to import the base image")
    log(f"importing {root} as {BASE_IMAGE} ...")
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    env = podman_env() if cli.endswith("podman") else dict(os.environ)
    proc = subprocess.run(
        [cli, "import", "--change", f"LABEL {RECIPE_LABEL}={recipe}", "--change", 'CMD ["sleep", "infinity"]', "-", BASE_IMAGE],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        env=env,
    )
    tar.wait()
    if proc.returncode != 0:
        raise SandboxError(f"{cli} import failed: {proc.stderr.strip()[-300:]}")
    return BASE_IMAGE


def build_images(docker_client, *, root: Path | None = None, log=print) -> dict[str, str]:
    """Build base, terminal and swe images; returns name -> tag. Skips what is current."""
    base_recipe = root_recipe()
    import_base(docker_client, root or local_root(), log=log)
    built = {"base": BASE_IMAGE}
    parent = BASE_IMAGE
    for name in ("terminal", "swe"):
        tag = IMAGES[name]
        recipe = _recipe(name, base_recipe)
        if _image_recipe(docker_client, tag) != recipe:
            log(f"building {tag} ...")
            try:
                docker_client.images.build(
                    path=str(_dockerfile_dir(name)),
                    tag=tag,
                    buildargs={"BASE": parent},
                    labels={RECIPE_LABEL: recipe},
                    rm=True,
                    pull=False,
                )
            except Exception as exc:  # BuildError / APIError: show the engine's words
                raise SandboxError(f"building {tag} failed: {str(exc).splitlines()[0][:300]}") from None
        built[name] = tag
        parent, base_recipe = tag, recipe
    return built
