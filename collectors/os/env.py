"""The OS environment: a real Linux desktop (Xvfb, openbox, GTK applications) observed
through its accessibility tree and driven with xdotool, as OSWorld's desktop is with
pyautogui, but recording the tree as text before and after every action.

A fresh ``DesktopSession`` per episode: a new X server, buses and home directory cost
~0.3 s, less than an application's start, and leave no state behind (clipboard, window
positions, app settings, a half-closed dialog, an a11y registry holding dead apps). At
reset the task's files are written under the session's HOME and its setup commands run
there (``mousepad notes.txt &``); then the environment waits, bounded by
``app_timeout_s``, for a window (one whose title contains ``extra.window`` when the task
names one). A step runs the action with xdotool, then reads the tree until two reads
agree (bounded by ``settle_timeout_s``). Node actions resolve an id to its box's centre.

A task's ``check`` is one of:

- a shell command run in the session from HOME; exit 0 is success (``grep -q hi notes.txt``);
- a mapping, every key of which must hold: ``command`` (as above), ``window_title``
  (a window's title contains it), ``node_text`` (``{name|role|id: ..., contains: ...}``:
  a node matching all given fields has the text or name containing ``contains``).

An X server or helper that dies, or a window that never appears, raises ``EnvError``.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from pydantic import Field

from collectors.actions import ActionError, ActionSpec
from collectors.env import EnvError, Environment, EnvOptions, Task
from collectors.mcp.env import Workspace
from collectors.os import actions as A
from collectors.os.session import DesktopSession, wait_for
from collectors.os.tree import centre, find_node, render, spans
from sandboxes.base import ExecResult
from schemas.transition import Observation

PACKAGES = ("xvfb", "openbox", "at-spi2-core", "mousepad", "zenity")
KEYS = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "space",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pagedown": "Next",
    "insert": "Insert",
    "control": "ctrl",
    "win": "super",
    "command": "super",
    "cmd": "super",
    "option": "alt",
}


def xkey(key: str) -> str:
    """A pyautogui key name (or ``ctrl+s``) as xdotool's keysym chord."""
    return "+".join(KEYS.get(k.strip().lower(), k.strip()) for k in key.split("+"))


class OSOptions(EnvOptions):
    """Settings of OS (desktop) episodes (the job's ``os`` section)."""

    screen: tuple[int, int] = (1280, 800)
    obs_cap_chars: int = Field(20_000, ge=1000)
    screenshot: bool = False
    settle_min_s: float = Field(0.15, ge=0)  # after an action, before the first read
    settle_timeout_s: float = Field(3.0, gt=0)  # reads until two agree, at most this long
    app_timeout_s: float = Field(15.0, gt=0)  # a task's window must appear within this
    start_timeout_s: float = Field(15.0, gt=0)  # X server, buses, window manager
    check_wait_s: float = Field(2.0, ge=0)  # a check that fails is retried this long (a file still being written)
    type_delay_ms: int = Field(8, ge=0)  # xdotool's delay between typed keys


class SessionFiles(Workspace):
    """What a task's default setup hooks call: files under the session's HOME, commands in it."""

    def __init__(self, session: DesktopSession) -> None:
        super().__init__(session.home)
        self.session = session

    def exec(self, command: str, timeout: float = 60) -> ExecResult:
        return self.session.run(command, timeout=min(timeout, 60))


class OSEnv(Environment):
    domain = "os"
    sandbox_backend = "xvfb"

    def __init__(self, sandbox: Any = None, env_id: str = "desktop", options: OSOptions | dict | None = None) -> None:
        super().__init__(env_id, options)
        self.session: DesktopSession | None = None
        self.tree: dict[str, Any] = {"nodes": [], "windows": [], "active": None}
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Package}=${Version} ", *PACKAGES], capture_output=True, text=True)
        self.image_digest = "debian " + (r.stdout.strip() or "desktop")

    # -- observation ---------------------------------------------------------------------------
    def _read(self) -> tuple[str, bool]:
        self.tree = self.session.tree()
        return render(self.tree, self.options.obs_cap_chars)

    def _settle(self) -> tuple[str, bool, float, bool]:
        """Read the tree until two reads in a row agree: (text, truncated, ms, settled)."""
        t0 = time.perf_counter()
        time.sleep(self.options.settle_min_s)
        text, truncated = self._read()
        while time.perf_counter() - t0 < self.options.settle_timeout_s:
            time.sleep(0.05)
            again, truncated = self._read()
            if again == text:
                return text, truncated, (time.perf_counter() - t0) * 1000, True
            text = again
        return text, truncated, (time.perf_counter() - t0) * 1000, False

    def _observe(self, **extra: Any) -> Observation:
        text, truncated, settle_ms, settled = self._settle()
        info = {
            "active_window": self.tree["active"],
            "windows": self.tree["windows"],
            "nodes": len(self.tree["nodes"]),
            "tree_ms": round(self.tree["read_ms"], 2),
            "settle_ms": round(settle_ms, 1),
            "settled": settled,
            "screen": list(self.options.screen),
            **extra,
        }
        obs = Observation.make(text, "a11y_tree", extra=info, spans=spans(text, (self.session.root.name,)), truncated=truncated)
        if not self.options.screenshot:
            return obs
        shot = subprocess.run(["import", "-window", "root", "png:-"], env=self.session.env, capture_output=True, timeout=30)
        return Observation(obs.text, obs.format, shot.stdout or None, obs.extra, obs.truncated, obs.volatile_spans)

    # -- the protocol --------------------------------------------------------------------------
    def _reset(self, seed: int | None, task: Task | None) -> tuple[Observation, dict[str, Any]]:
        t0 = time.perf_counter()
        if self.session is not None:
            self.session.close()
        self.session = DesktopSession(self.options.screen, self.options.start_timeout_s)
        self.sandbox = SessionFiles(self.session)
        if task is not None:
            task.run_setup(self)
            title = task.extra.get("window")
            if title or task.setup:
                self._wait_window(title, task.id)
        obs = self._observe(session_start_ms=round(self.session.start_ms, 1), display=self.session.display)
        return obs, {
            "reset_ms": (time.perf_counter() - t0) * 1000,
            "provenance": {"image_digest": self.image_digest},
            "instruction": task.instruction if task else None,
        }

    def _wait_window(self, title: str | None, task_id: str) -> None:
        def found() -> bool:
            windows = self.session.tree()["windows"]
            return any(title in w["title"] for w in windows) if title else bool(windows)

        try:
            wait_for(found, self.options.app_timeout_s, f"task {task_id}: a window{f' titled {title!r}' if title else ''}", 0.1)
        except EnvError as exc:
            raise EnvError(f"{exc} (the app may have crashed; its output: {self._app_log()})") from None

    def _app_log(self) -> str:
        log = self.session.root / "apps.log"
        return (log.read_text(errors="replace").strip()[-200:] if log.exists() else "") or "no output"

    def _act(self, a: ActionSpec) -> None:
        w, h = self.options.screen
        for name in ("x", "y"):
            value = getattr(a, name, None)
            if value is not None and not 0 <= value < (w if name == "x" else h):
                raise ActionError(f"{a.kind}.{name}={value} is off the screen ({w}x{h})")
        x = self.session.xdotool
        if isinstance(a, A.ClickNode | A.SetText):
            cx, cy = centre(find_node(self.tree, a.id))
            x("mousemove", "--sync", str(cx), str(cy), "click", "1")
            if isinstance(a, A.SetText):
                x("key", "--clearmodifiers", "ctrl+a", "BackSpace")
                if a.text:
                    x("type", "--delay", str(self.options.type_delay_ms), "--", a.text)
        elif isinstance(a, A.Click | A.DoubleClick | A.RightClick):
            button = A.BUTTONS[a.button] if isinstance(a, A.Click) else "3" if isinstance(a, A.RightClick) else "1"
            repeat = ["--repeat", "2"] if isinstance(a, A.DoubleClick) else []
            x("mousemove", "--sync", str(a.x), str(a.y), "click", *repeat, button)
        elif isinstance(a, A.MoveTo):
            x("mousemove", "--sync", str(a.x), str(a.y))
        elif isinstance(a, A.DragTo):
            x("mousedown", "1", "mousemove", "--sync", str(a.x), str(a.y), "mouseup", "1")
        elif isinstance(a, A.Scroll):
            at = ["mousemove", "--sync", str(a.x), str(a.y)] if a.x is not None and a.y is not None else []
            x(*at, "click", "--repeat", str(abs(a.clicks)), "4" if a.clicks > 0 else "5")
        elif isinstance(a, A.TypeText):
            x("type", "--delay", str(self.options.type_delay_ms), "--", a.text)
        elif isinstance(a, A.Press | A.Hotkey):
            x("key", "--clearmodifiers", xkey(a.key if isinstance(a, A.Press) else "+".join(a.keys)))
        elif isinstance(a, A.Wait):
            time.sleep(a.seconds)

    def _step(self, action: ActionSpec) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        t0 = time.perf_counter()
        self._act(action)
        action_ms = (time.perf_counter() - t0) * 1000
        extra = {"outcome": action.kind} if isinstance(action, A.Done | A.Fail) else {}
        obs = self._observe(**extra)
        return obs, None, isinstance(action, A.Done | A.Fail), {"action_ms": action_ms}

    def check_task(self, task: Task) -> tuple[float | None, str]:
        """The task's ``check`` (see the module docstring), retried for ``check_wait_s``."""
        if task.check is None:
            return None, "no check"
        if self.session is None or not self.session.alive():
            return None, "no live desktop to check against"
        check = task.check if isinstance(task.check, dict) else {"command": task.check}
        deadline = time.monotonic() + self.options.check_wait_s
        while True:
            ok, message = self._holds(check)
            if ok or time.monotonic() > deadline:
                return (1.0 if ok else 0.0), message
            time.sleep(0.1)

    def _holds(self, check: dict[str, Any]) -> tuple[bool, str]:
        if "command" in check:
            r = self.session.run(check["command"])
            if r.exit_code != 0:
                return False, f"command exited {r.exit_code}: {r.stdout.strip()[-200:]}"
        tree = self.session.tree()
        if "window_title" in check and not any(check["window_title"] in w["title"] for w in tree["windows"]):
            return False, f"no window titled {check['window_title']!r}: {[w['title'] for w in tree['windows']]}"
        if "node_text" in check:
            want = check["node_text"]
            match = [n for n in tree["nodes"] if all(n.get(k) == v for k, v in want.items() if k != "contains")]
            if not any(str(want.get("contains", "")) in (n.get("text") or n["name"]) for n in match):
                return False, f"no node {want} ({len(match)} match without the text)"
        return True, "ok"

    def _close(self) -> None:
        if self.session is not None:
            self.session.close()
