"""The Android environment: any device the adb server sees (an emulator, a phone, or the
simulator under ``collectors/android/sim``), observed as its UI hierarchy and driven with
``input``/``am``/``monkey`` shell commands, as AndroidWorld and android_env do.

An observation is ``uiautomator dump``'s hierarchy as a compact text tree (``uitree.py``)
with the foreground package and activity (``dumpsys window``), orientation and screen size;
``extra`` says how the UI was read (``ui_method``), the dump's time and attempts, the
device's serial and the exact adb shell commands of the step (``adb_commands``).

Which device: ``serials`` lists them; worker *i* of a job uses ``serials[i % len]`` (the
runner sets ``TRAJFORGE_WORKER_INDEX``); ``simulator: true`` starts a simulated device per
environment instead. Reset force-stops and clears the task's apps (``extra.apps``), goes
home, pushes the task's ``files`` and runs its ``setup`` shell commands. A task's ``check``
is a mapping, every key of which must hold: ``command`` with ``expect`` (its stripped
output equals) or ``contains``; ``activity`` (the foreground one contains it); ``node_text``
(a node's text or description contains it). Devices that go away, dumps that keep failing
and commands past their timeout raise ``EnvError`` subclasses (``adb.py``).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from pydantic import Field

from collectors.actions import ActionError, ActionSpec
from collectors.android import actions as A
from collectors.android.adb import Device, EnvError
from collectors.android.uitree import centre, parse, render
from collectors.env import Environment, EnvOptions, Task
from schemas.transition import Observation, canonical_json

APPS = {
    "settings": "com.android.settings",
    "contacts": "com.android.contacts",
    "notes": "org.trajforge.notes",
    "chrome": "com.android.chrome",
    "clock": "com.google.android.deskclock",
    "camera": "com.android.camera2",
    "files": "com.google.android.documentsui",
    "messages": "com.google.android.apps.messaging",
}


class AndroidOptions(EnvOptions):
    """Settings of Android episodes (the job's ``android`` section)."""

    serials: list[str] = Field(default_factory=list)  # empty: the simulator, or the only device adb lists
    simulator: bool = False  # start a simulated device for this environment
    adb_port: int | None = None  # default: $ANDROID_ADB_SERVER_PORT or 5037
    screenshot: bool = False
    obs_cap_chars: int = Field(20_000, ge=1000)
    dump_retries: int = Field(3, ge=0)
    dump_backoff_s: float = Field(0.2, ge=0)
    command_timeout_s: float = Field(30.0, gt=0)
    settle_s: float = Field(0.0, ge=0)  # after an action, before reading the screen (real devices animate: 0.5-1 s)
    apps: dict[str, str] = Field(default_factory=dict)  # app name -> package, beside APPS


class AndroidEnv(Environment):
    domain = "android"
    sandbox_backend = "adb"

    def __init__(self, sandbox: Any = None, env_id: str = "default", options: AndroidOptions | dict | None = None) -> None:
        super().__init__(env_id, options)
        self.port = self.options.adb_port or int(os.environ.get("ANDROID_ADB_SERVER_PORT", "5037"))
        self.sim = None
        self.device: Device | None = None
        self.nodes: list[dict[str, Any]] = []
        self.apps = {**APPS, **{k.lower(): v for k, v in self.options.apps.items()}}

    # -- the device ----------------------------------------------------------------------------
    def _connect(self) -> Device:
        if self.options.simulator and (self.sim is None or self.sim.proc.poll() is not None):
            from collectors.android.sim import Simulator

            if self.sim is not None:
                self.sim.stop()
            self.sim = Simulator.start(self.port)
            self.device = None
        if self.device is None:
            serials = [self.sim.serial] if self.sim else self.options.serials
            serial = serials[int(os.environ.get("TRAJFORGE_WORKER_INDEX", "0")) % len(serials)] if serials else None
            if serial is None:
                from collectors.android.adb import adb

                listed = re.findall(r"^(\S+)\tdevice$", adb(self.port, "devices"), re.M)
                if len(listed) != 1:
                    raise EnvError(f"android: no serials given and adb lists {len(listed)} devices: {listed}")
                serial = listed[0]
            self.device = Device(serial, self.port, self.options.command_timeout_s)
            model = self.device.shell("getprop ro.product.model").strip()
            release = self.device.shell("getprop ro.build.version.release").strip()
            self.image_digest = f"android {release} {model}"
            size = re.search(r"(\d+)x(\d+)", self.device.shell("wm size"))
            self.screen = (int(size[1]), int(size[2])) if size else (1080, 2400)
        return self.device

    def _observe(self, **extra: Any) -> Observation:
        d = self.device
        t0 = time.perf_counter()
        xml, attempts = d.dump(self.options.dump_retries, self.options.dump_backoff_s)
        dump_ms = (time.perf_counter() - t0) * 1000
        window = d.shell("dumpsys window")
        focus = re.search(r"mCurrentFocus=Window\{\S+ \S+ ([^/\s]+)/(\S+?)\}", window)
        package, activity = (focus[1], focus[2]) if focus else ("unknown", "unknown")
        rotation = int(m[1]) if (m := re.search(r"mRotation=ROTATION_(\d+)", window)) else 0
        self.nodes = parse(xml)
        self.package, self.activity = package, activity
        text, truncated = render(self.nodes, package, activity, self.screen, rotation // 90, self.options.obs_cap_chars)
        info = {
            "serial": d.serial,
            "ui_method": "uiautomator_dump",
            "dump_ms": round(dump_ms, 2),
            "dump_attempts": attempts,
            "package": package,
            "activity": activity,
            "screen": list(self.screen),
            "rotation": rotation,
            "nodes": len(self.nodes),
            **extra,
        }
        shot = d.device.shell("screencap -p", encoding=None, timeout=30) if self.options.screenshot else None
        info["adb_commands"] = d.take_log() + (["screencap -p"] if shot else [])
        return Observation.make(text, "uiautomator_xml", extra=info, truncated=truncated, screenshot_png=shot or None)

    # -- the protocol --------------------------------------------------------------------------
    def _reset(self, seed: int | None, task: Task | None) -> tuple[Observation, dict[str, Any]]:
        t0 = time.perf_counter()
        d = self._connect()
        d.take_log()
        for pkg in task.extra.get("apps", []) if task else []:
            d.shell(f"am force-stop {pkg}")
            out = d.shell(f"pm clear {pkg}")
            if "Success" not in out:
                raise EnvError(f"task {task.id}: pm clear {pkg} failed (is it installed on {d.serial}?): {out.strip()[:200]}")
        d.shell("input keyevent KEYCODE_HOME")
        if task is not None:
            for path, content in task.files.items():
                d.push(content.encode(), path)
            for cmd in task.setup:
                out = d.shell(cmd)
                if re.search(r"inaccessible or not found|^Error|Exception", out, re.M):
                    raise EnvError(f"task {task.id}: setup command {cmd!r} failed: {out.strip()[:200]}")
        obs = self._observe()
        provenance = {
            "image_digest": self.image_digest,
            "simulated": self.sim is not None,
            "extra": canonical_json({"serial": d.serial, "ui_method": "uiautomator_dump"}),
        }
        return obs, {
            "reset_ms": (time.perf_counter() - t0) * 1000,
            "provenance": provenance,
            "instruction": task.instruction if task else None,
        }

    def _point(self, a: ActionSpec) -> tuple[int, int]:
        index = getattr(a, "index", None)
        if index is not None:
            if not 0 <= index < len(self.nodes):
                raise ActionError(f"{a.kind}: no node with index {index} (the screen has {len(self.nodes)})")
            return centre(self.nodes[index])
        x, y = a.x, a.y
        if not (0 <= x < self.screen[0] and 0 <= y < self.screen[1]):
            raise ActionError(f"{a.kind}: ({x}, {y}) is off the screen ({self.screen[0]}x{self.screen[1]})")
        return x, y

    def _act(self, a: ActionSpec) -> dict[str, Any]:
        sh = self.device.shell
        if isinstance(a, A.Click | A.LongPress):
            x, y = self._point(a)
            sh(f"input tap {x} {y}" if isinstance(a, A.Click) else f"input swipe {x} {y} {x} {y} 1000")
        elif isinstance(a, A.InputText):
            if a.index is not None:
                sh("input tap {} {}".format(*self._point(a)))
            escaped = a.text.replace("%", "\\%").replace(" ", "%s").replace("'", "'\\''")
            sh(f"input text '{escaped}'")
        elif isinstance(a, A.Scroll):
            x0, y0, x1, y1 = self.nodes[a.index]["bounds"] if a.index is not None and self._point(a) else (0, 0, *self.screen)
            cx, cy, dx, dy = (x0 + x1) // 2, (y0 + y1) // 2, (x1 - x0) // 3, (y1 - y0) // 3
            fx, fy = {"down": (0, -dy), "up": (0, dy), "right": (-dx, 0), "left": (dx, 0)}[a.direction]  # finger moves against
            sh(f"input swipe {cx - fx} {cy - fy} {cx + fx} {cy + fy} 300")
        elif isinstance(a, A.Swipe):
            sh(f"input swipe {a.x1} {a.y1} {a.x2} {a.y2} {a.duration_ms}")
        elif isinstance(a, A.NavigateBack | A.NavigateHome):
            sh(f"input keyevent {'KEYCODE_BACK' if isinstance(a, A.NavigateBack) else 'KEYCODE_HOME'}")
        elif isinstance(a, A.OpenApp):
            pkg = self.apps.get(a.app_name.strip().lower(), a.app_name.strip())
            if "package:" not in sh(f"pm path {pkg}"):
                raise ActionError(f"open_app: app {a.app_name!r} is not installed on this device (package {pkg})")
            sh(f"monkey -p {pkg} -c android.intent.category.LAUNCHER 1")
        elif isinstance(a, A.KeyEvent):
            sh(f"input keyevent {a.keycode}")
        elif isinstance(a, A.Wait):
            time.sleep(a.seconds)
        return {"outcome": a.goal_status} if isinstance(a, A.Status) else {"answer": a.text} if isinstance(a, A.Answer) else {}

    def _step(self, action: ActionSpec) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        t0 = time.perf_counter()
        try:
            extra = self._act(action)
        except ActionError:
            self.device.take_log()
            raise
        action_ms = (time.perf_counter() - t0) * 1000
        if self.options.settle_s and not isinstance(action, A.Wait | A.Status | A.Answer):
            time.sleep(self.options.settle_s)
        commands = list(self.device.log)
        obs = self._observe(**extra)
        return obs, None, isinstance(action, A.Status), {"action_ms": action_ms, "adb_commands": commands}

    def check_task(self, task: Task) -> tuple[float | None, str]:
        """The task's ``check`` mapping (see the module docstring): (1.0 or 0.0, why)."""
        if task.check is None:
            return None, "no check"
        check = task.check if isinstance(task.check, dict) else {"command": task.check, "contains": ""}
        d = self._connect()
        d.take_log()
        try:
            return self._holds(check)
        finally:
            d.take_log()  # the check's commands are not the next step's

    def _holds(self, check: dict[str, Any]) -> tuple[float, str]:
        if "command" in check:
            out = self.device.shell(check["command"]).strip()
            if "expect" in check and out != str(check["expect"]):
                return 0.0, f"{check['command']!r} printed {out[:200]!r}, expected {check['expect']!r}"
            if str(check.get("contains", "")) not in out:
                return 0.0, f"{check['command']!r} printed {out[:200]!r}, without {check['contains']!r}"
        if "activity" in check or "node_text" in check:
            self._observe()
            if check.get("activity", "") not in f"{self.package}/{self.activity}":
                return 0.0, f"foreground is {self.package}/{self.activity}, not {check['activity']!r}"
            want = check.get("node_text")
            if want and not any(want in n["text"] or want in n["desc"] for n in self.nodes):
                return 0.0, f"no node shows {want!r}"
        return 1.0, "ok"

    def _close(self) -> None:
        if self.sim is not None:
            self.sim.stop()
            self.sim = None
