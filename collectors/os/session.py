"""A desktop session for one episode: Xvfb, a D-Bus session bus, the AT-SPI bus, openbox
and the accessibility-tree helper, all from Debian packages, under a private temp dir.

Every process the session starts (and everything they start: GTK applications, the
a11y registry that D-Bus activates) carries ``TRAJFORGE_DESKTOP=<temp dir>`` in its
environment; ``close()`` kills the process groups it started, then sweeps ``/proc`` for
that marker, so nothing outlives the session, also at interpreter exit. Waits are
bounded and end in ``EnvError``; so does an X server that died.

    with DesktopSession((1280, 800)) as s:
        s.run("mousepad &")
        s.tree()  # {"nodes": [...], "windows": [...], "active": {...}, "read_ms": ...}
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from collectors.actions import ActionError
from collectors.env import EnvError
from sandboxes.base import ExecResult

HELPER = Path(__file__).with_name("atspi_helper.py")
SYSTEM_PYTHON = "/usr/bin/python3"
MARKER = "TRAJFORGE_DESKTOP"
_LIVE: set[DesktopSession] = set()


def wait_for(predicate, timeout: float, what: str, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy, or raise EnvError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise EnvError(f"os: {what} did not happen within {timeout:g} s")
        time.sleep(interval)


def marked_pids(marker: str) -> list[int]:
    """Pids of processes whose environment carries ``TRAJFORGE_DESKTOP=marker``."""
    needle = f"{MARKER}={marker}\0".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in Path(entry.path, "environ").read_bytes():
                    pids.append(int(entry.name))
    return pids


class DesktopSession:
    def __init__(self, screen: tuple[int, int] = (1280, 800), start_timeout_s: float = 15.0) -> None:
        self.screen = screen
        self.root = Path(tempfile.mkdtemp(prefix="trajforge-os-"))
        self.home = self.root / "home"
        self.procs: list[subprocess.Popen] = []
        self.closed = False
        _LIVE.add(self)
        try:
            self._start(start_timeout_s)
        except EnvError as exc:
            log = self.root / "session.log"
            tail = log.read_text(errors="replace").strip()[-300:] if log.exists() else ""
            self.close()
            raise EnvError(f"{exc}{'; session log: ' + tail if tail else ''}") from None
        except BaseException:
            self.close()
            raise

    # -- start ---------------------------------------------------------------------------------
    def _spawn(self, argv: list[str], **kw: Any) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", self.log)
        p = subprocess.Popen(argv, env=self.env, start_new_session=True, stdin=kw.pop("stdin", subprocess.DEVNULL), **kw)
        self.procs.append(p)
        return p

    def _start(self, timeout: float) -> None:
        t0 = time.perf_counter()
        run = self.root / "run"
        for d in (self.home, run, self.home / ".config", self.home / ".cache", self.home / ".local/share"):
            d.mkdir(parents=True, exist_ok=True)
        run.chmod(0o700)
        self.log = open(self.root / "session.log", "ab")  # noqa: SIM115 (closed in close())
        self.env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            MARKER: str(self.root),
            "XDG_RUNTIME_DIR": str(run),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "NO_AT_BRIDGE": "0",
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_DATA_HOME": str(self.home / ".local/share"),
            "GTK_MODULES": "gail:atk-bridge",
            "GSETTINGS_BACKEND": "memory",
            "GTK_A11Y": "atspi",
        }
        self.display = self._start_x(timeout)
        self.env["DISPLAY"] = self.display
        bus = run / "bus"
        self._spawn(["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address=unix:path={bus}"])
        wait_for(bus.exists, timeout, "the D-Bus session bus")
        self.env["DBUS_SESSION_BUS_ADDRESS"] = f"unix:path={bus}"
        self._spawn(["/usr/libexec/at-spi-bus-launcher", "--launch-immediately"])
        self._spawn(["openbox", "--sm-disable"])
        self.helper = self._spawn([SYSTEM_PYTHON, "-u", str(HELPER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        wait_for(lambda: self._request({"op": "ping"}, 2.0, raise_=False), timeout, "the accessibility bus", 0.05)
        wait_for(self._wm_ready, timeout, "the window manager", 0.05)
        self.start_ms = (time.perf_counter() - t0) * 1000

    def _start_x(self, timeout: float) -> str:
        """Xvfb on a free display: one with neither a lock file nor a socket (a killed server
        leaves both); a server that loses the race for the lock exits, and the next is tried."""
        w, h = self.screen
        n = 100 + (os.getpid() * 7 + int(time.time() * 1000)) % 800
        for _ in range(20):
            n = n + 1 if n < 999 else 100
            if Path(f"/tmp/.X{n}-lock").exists() or Path(f"/tmp/.X11-unix/X{n}").exists():
                continue
            self.xvfb = self._spawn(["Xvfb", f":{n}", "-screen", "0", f"{w}x{h}x24", "-nolisten", "tcp", "-noreset"])
            socket = Path(f"/tmp/.X11-unix/X{n}")
            wait_for(lambda: socket.exists() or self.xvfb.poll() is not None, timeout, "the X server start")  # noqa: B023
            if self.xvfb.poll() is None:
                return f":{n}"
        raise EnvError(f"os: no free X display found (last tried :{n})")

    def _wm_ready(self) -> bool:
        r = subprocess.run(["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"], env=self.env, capture_output=True, text=True)
        return "window id" in r.stdout

    # -- use -----------------------------------------------------------------------------------
    def alive(self) -> bool:
        return not self.closed and self.xvfb.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise EnvError(f"os: the X server on {getattr(self, 'display', '?')} died (exit {self.xvfb.poll()})")

    def _request(self, body: dict[str, Any], timeout: float, raise_: bool = True) -> dict[str, Any] | None:
        try:
            self.helper.stdin.write(json.dumps(body) + "\n")
            self.helper.stdin.flush()
            ready, _, _ = select.select([self.helper.stdout], [], [], timeout)
            line = self.helper.stdout.readline() if ready else ""
        except (OSError, ValueError):
            line = ""
        reply = json.loads(line) if line else None
        if reply is None or not reply.get("ok"):
            if raise_:
                self.check_alive()
                raise EnvError(f"os: the accessibility helper failed: {reply.get('error') if reply else 'no answer'}")
            return None
        return reply

    def tree(self, timeout: float = 10.0) -> dict[str, Any]:
        """The accessibility tree of every application on the desktop."""
        self.check_alive()
        if self.helper.poll() is not None:
            raise EnvError(f"os: the accessibility helper exited ({self.helper.returncode})")
        for _ in range(2):  # a read that met an application exiting: once more
            reply = self._request({"op": "tree"}, timeout, raise_=False)
            if reply is not None:
                return reply
        return self._request({"op": "tree"}, timeout)

    def run(self, command: str, timeout: float = 30.0) -> ExecResult:
        """A shell command in the session (DISPLAY, D-Bus, HOME), from HOME. Started
        applications keep running (``mousepad &``); their output goes to a log file."""
        t0 = time.perf_counter()
        # Files, not pipes: an app started in the background keeps them open after bash exits.
        with open(self.root / "apps.log", "ab") as log, tempfile.TemporaryFile(dir=self.root) as out:
            try:
                p = subprocess.run(
                    ["bash", "-c", command],
                    cwd=self.home,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=log,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                return ExecResult(124, "", f"timed out after {timeout} s", (time.perf_counter() - t0) * 1000, timed_out=True)
            out.seek(0)
            stdout = out.read().decode(errors="replace")
        return ExecResult(p.returncode, stdout, "", (time.perf_counter() - t0) * 1000)

    def xdotool(self, *args: str) -> None:
        """Run xdotool on the session's display; ActionError when it refuses, EnvError when X is gone."""
        self.check_alive()
        r = subprocess.run(["xdotool", *args], env=self.env, capture_output=True, text=True, timeout=30)
        if (
            r.returncode != 0 or "No such key name" in r.stderr
        ):  # with the X server alive, the action's own fault (a key name xdotool lacks)
            self.check_alive()
            raise ActionError(f"xdotool {' '.join(args)[:80]} failed: {r.stderr.strip()[:200]}")

    def pids(self) -> list[int]:
        """Every live process of this session (those started here and their descendants)."""
        return marked_pids(str(self.root))

    # -- stop ----------------------------------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        _LIVE.discard(self)
        xvfb = getattr(self, "xvfb", None)
        if xvfb is not None and xvfb.poll() is None:  # TERM: it removes its lock file and socket
            xvfb.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                xvfb.wait(timeout=2)
        for p in reversed(self.procs):
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
        for _ in range(3):  # D-Bus activated services and detached apps left their groups
            pids = marked_pids(str(self.root))
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        if hasattr(self, "log"):
            self.log.close()
        if getattr(self, "display", None):  # a killed server leaves its lock and socket behind
            for stale in (f"/tmp/.X{self.display[1:]}-lock", f"/tmp/.X11-unix/X{self.display[1:]}"):
                with contextlib.suppress(OSError):
                    os.unlink(stale)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> DesktopSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    for s in list(_LIVE):
        s.close()
