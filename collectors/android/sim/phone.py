"""The simulated phone: its state (settings, contacts, files, the foreground app) and the
shell commands an Android environment runs over adb, answered as a real device answers
them (``uiautomator dump``, ``input``, ``am``, ``monkey``, ``pm``, ``dumpsys window``,
``wm size``, ``settings``, ``content``, ``screencap``, ``cat``, ``getprop``/``setprop``).

``setprop debug.sim.dump_fail N`` makes the next N dumps fail as AndroidWorld's devices
often do ("ERROR: could not get idle state."), to test a client's retries.
"""

from __future__ import annotations

import os
import re
import shlex
import struct
import zlib
from typing import Any
from xml.sax.saxutils import quoteattr

from collectors.android.sim.apps import APPS, LAUNCHER, SCREENS, VISIBLE, H, W, Widget

KEYCODES = {"3": "KEYCODE_HOME", "4": "KEYCODE_BACK", "66": "KEYCODE_ENTER", "67": "KEYCODE_DEL"}
NOT_FOUND = "/system/bin/sh: {}: inaccessible or not found\n"


class Phone:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.settings = {
            "global": {"wifi_on": "1", "airplane_mode_on": "0", "bluetooth_on": "1"},
            "secure": {"ui_night_mode": "1"},
            "system": {},
        }
        self.contacts: list[tuple[str, str]] = [("Ada Lovelace", "555-0101"), ("Alan Turing", "555-0102")]
        self.props = {"ro.product.model": "TrajforgeSim", "ro.build.version.release": "14", "debug.sim.dump_fail": "0"}
        self.ui: dict[str, dict[str, Any]] = {pkg: {} for pkg in [LAUNCHER, *APPS]}
        self.package = LAUNCHER

    @property
    def activity(self) -> str:
        if self.package == LAUNCHER:
            return ".Launcher"
        return APPS[self.package][2 if self.ui[self.package].get("screen") else 1]

    # -- the screen ---------------------------------------------------------------------------
    def widgets(self) -> list[Widget]:
        return SCREENS[self.package](self)

    def dump(self) -> str:
        index = iter(range(10**6))

        def node(w: Widget, i: int) -> str:
            x0, y0, x1, y1 = w.bounds
            attrs = {
                "index": i,
                "text": w.text,
                "resource-id": w.rid,
                "class": w.cls,
                "package": self.package,
                "content-desc": w.desc,
                "checkable": w.checked is not None,
                "checked": bool(w.checked),
                "clickable": w.tap is not None,
                "enabled": True,
                "focusable": w.tap is not None or w.key is not None,
                "focused": w.key is not None and self.ui[self.package].get("focus") == w.key,
                "scrollable": w.scrollable,
                "long-clickable": False,
                "password": False,
                "selected": False,
                "bounds": f"[{x0},{y0}][{x1},{y1}]",
            }
            text = " ".join(f"{k}={quoteattr(str(v).lower() if isinstance(v, bool) else str(v))}" for k, v in attrs.items())
            next(index)
            inner = "".join(node(c, j) for j, c in enumerate(w.children))
            return f"<node {text}>{inner}</node>" if inner else f"<node {text} />"

        root = Widget("android.widget.FrameLayout", (0, 0, W, H), children=self.widgets())
        return f"<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">{node(root, 0)}</hierarchy>"

    def _hit(self, x: int, y: int) -> Widget | None:
        found = None
        stack = list(self.widgets())
        while stack:
            w = stack.pop(0)
            x0, y0, x1, y1 = w.bounds
            if x0 <= x < x1 and y0 <= y < y1:
                found = w if w.tap is not None else found
                stack = list(w.children)
        return found

    def tap(self, x: int, y: int) -> None:
        w = self._hit(x, y)
        if w is not None:
            w.tap(self)

    def scroll(self, dy: int) -> None:
        ui = self.ui[self.package]
        ui["offset"] = max(0, ui.get("offset", 0) + (VISIBLE // 2 if dy < 0 else -(VISIBLE // 2)))

    def key(self, code: str) -> None:
        code = KEYCODES.get(code, code if code.startswith("KEYCODE_") else f"KEYCODE_{code.upper()}")
        ui = self.ui[self.package]
        if code == "KEYCODE_HOME" or (code == "KEYCODE_BACK" and not ui.get("screen")):
            self.package = LAUNCHER
        elif code == "KEYCODE_BACK":
            self.ui[self.package] = {}
        elif code == "KEYCODE_DEL" and ui.get("focus"):
            ui[ui["focus"]] = ui.get(ui["focus"], "")[:-1]

    def launch(self, pkg: str) -> None:
        self.package = pkg

    # -- the shell ------------------------------------------------------------------------------
    def shell(self, command: str) -> bytes:
        """Run ``a && b ; c`` as sh would (a failed command skips the rest of an ``&&`` chain)."""
        out, ok = b"", True
        for part in re.split(r"(&&|;)", command):
            if part in ("&&", ";"):
                if part == ";":
                    ok = True
                continue
            if ok and part.strip():
                argv = shlex.split(part)
                text, ok = self.run([a for a in argv if a != ">/dev/null"] or [""])
                if ok and ">/dev/null" in argv:
                    continue  # sh drops the output; errors still come back, as adb's stream carries both
                out += text if isinstance(text, bytes) else text.encode()
        return out

    def run(self, argv: list[str]) -> tuple[str | bytes, bool]:
        cmd, args = argv[0], argv[1:]
        if cmd == "uiautomator" and args[:1] == ["dump"]:
            if int(self.props["debug.sim.dump_fail"]) > 0:
                self.props["debug.sim.dump_fail"] = str(int(self.props["debug.sim.dump_fail"]) - 1)
                return "ERROR: could not get idle state.\n", False
            path = args[1] if len(args) > 1 else "/sdcard/window_dump.xml"
            self.files[path] = self.dump().encode()
            return f"UI hierchary dumped to: {path}\n", True
        if cmd == "cat":
            missing = [p for p in args if p not in self.files]
            if missing:
                return f"cat: {missing[0]}: No such file or directory\n", False
            return b"".join(self.files[p] for p in args), True
        if cmd == "input" and args:
            return self.input(args[0], args[1:])
        if cmd in ("am", "monkey", "pm"):
            return self.packages(cmd, args)
        if cmd == "dumpsys" and args[:1] == ["window"]:
            focus = f"Window{{5d1e0c1 u0 {self.package}/{self.package}{self.activity}}}"
            return f"  mCurrentFocus={focus}\n  mFocusedApp=ActivityRecord{{{self.package}}}\n  mRotation=ROTATION_0\n", True
        if cmd == "wm" and args == ["size"]:
            return f"Physical size: {W}x{H}\n", True
        if cmd == "settings" and len(args) >= 3 and args[1] in self.settings:
            if args[0] == "put" and len(args) == 4:
                self.settings[args[1]][args[2]] = args[3]
                return "", True
            return self.settings[args[1]].get(args[2], "null") + "\n", True
        if cmd == "content" and "content://contacts/people" in args:
            if args[0] == "insert":
                bound = dict(args[i + 1].split(":", 2)[::2] for i, x in enumerate(args[:-1]) if x == "--bind")
                self.contacts.append((bound.get("name", ""), bound.get("number", "")))
                return "", True
            rows = [f"Row: {i} display_name={n}, number={p}" for i, (n, p) in enumerate(sorted(self.contacts))]
            return "\n".join(rows) + "\n" if rows else "No result found.\n", True
        if cmd == "getprop":
            listing = "\n".join(f"[{k}]: [{v}]" for k, v in self.props.items())
            return (self.props.get(args[0], "") if args else listing) + "\n", True
        if cmd == "setprop" and len(args) == 2:
            self.props[args[0]] = args[1]
            return "", True
        if cmd == "screencap":
            return png(W // 10, H // 10, sum(map(ord, self.package + self.activity)) % 200), True
        if cmd == "rm":
            paths = [a for a in args if not a.startswith("-")]
            for p in [f for f in self.files if any(f == d or f.startswith(d.rstrip("/") + "/") for d in paths)]:
                del self.files[p]
            return "", True
        if cmd in ("mkdir", "echo"):
            return (" ".join(args) + "\n" if cmd == "echo" else ""), True
        if cmd == "reboot" and args == ["-p"]:
            os._exit(0)  # powered off: the adb connection drops, as a device's would
        return NOT_FOUND.format(cmd), False

    def input(self, sub: str, a: list[str]) -> tuple[str, bool]:
        if sub == "tap" and len(a) == 2:
            self.tap(int(float(a[0])), int(float(a[1])))
        elif sub == "swipe" and len(a) >= 4:
            x1, y1, x2, y2 = (int(float(v)) for v in a[:4])
            if abs(x2 - x1) < 20 and abs(y2 - y1) < 20:
                self.tap(x1, y1)  # a long press
            elif abs(y2 - y1) >= abs(x2 - x1):
                self.scroll(y2 - y1)
        elif sub == "text" and a:
            ui = self.ui[self.package]
            if ui.get("focus"):
                ui[ui["focus"]] = ui.get(ui["focus"], "") + a[0].replace("%s", " ")
        elif sub == "keyevent" and a:
            self.key(a[0])
        else:
            return f"Error: Unknown command: {sub}\n", False
        return "", True

    def packages(self, cmd: str, a: list[str]) -> tuple[str, bool]:
        installed = [LAUNCHER, *APPS, "com.android.providers.contacts"]
        pkg = next((x for x in a if x in installed), None)
        if cmd == "pm" and a[:2] == ["list", "packages"]:
            return "".join(f"package:{p}\n" for p in installed), True
        if cmd == "pm" and a[:1] == ["path"]:
            return (f"package:/system/app/{pkg}/{pkg}.apk\n", True) if pkg else ("", False)
        if pkg is None:
            return ("** No activities found to run, monkey aborted.\n" if cmd == "monkey" else "Error: unknown package\n"), False
        if (cmd, a[:1]) in (("pm", ["clear"]), ("am", ["force-stop"])):  # the app's process is killed
            if pkg == "com.android.providers.contacts" and cmd == "pm":
                self.contacts = []
            self.ui[pkg] = {}
            self.package = LAUNCHER if self.package == pkg else self.package
            return ("Success\n" if cmd == "pm" else ""), True
        if pkg in APPS:
            self.launch(pkg)
        return ("  bash arg: -p\nEvents injected: 1\n" if cmd == "monkey" else f"Starting: Intent {{ cmp={pkg} }}\n"), True


def png(w: int, h: int, shade: int) -> bytes:
    """A small grey PNG (screencap's format) whose shade follows the foreground activity."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\0" + bytes([shade]) * w for _ in range(h))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
