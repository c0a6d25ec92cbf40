"""Reads the desktop's accessibility tree (AT-SPI) for ``collectors.os``; run by the system
Python inside the desktop session, since pyatspi (Debian's python3-pyatspi) is not
importable from the project's virtualenv. OSWorld does the same with a server in its VM.

One long-lived process per session speaks JSON lines over stdin/stdout: a request
``{"op": "tree"}`` is answered with ``{"ok": true, "nodes": [...], "windows": [...],
"active": ...}``; ``{"op": "ping"}`` with ``{"ok": true}``. A node is ``{id, depth, role,
name, states, text, bbox}``. Its id is its path: the application's name, then child
indices (``mousepad:0.2.1``), the same for the same element across reads while the
interface keeps its shape. Hidden subtrees (closed menus) are skipped: only nodes that
are showing are listed.
"""

from __future__ import annotations

import json
import sys
import time

import pyatspi

KEEP_STATES = ("focused", "focusable", "editable", "checked", "selected", "sensitive", "active", "expanded", "pressed")
WINDOW_ROLES = ("frame", "dialog", "alert", "window", "file chooser")
MAX_NODES = 3000


def _states(s) -> list[str]:
    return [n for n in KEEP_STATES if s.contains(getattr(pyatspi, "STATE_" + n.upper()))]


def _text(acc) -> str | None:
    try:
        t = acc.queryText()
        return t.getText(0, min(t.characterCount, 2000))
    except Exception:
        return None


def _bbox(acc) -> list[int] | None:
    try:
        e = acc.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
        return [e.x, e.y, e.width, e.height]
    except Exception:
        return None


def _walk(acc, node_id: str, depth: int, out: list[dict]) -> None:
    if len(out) >= MAX_NODES:
        return
    try:
        state = acc.getState()
        if not state.contains(pyatspi.STATE_SHOWING) and depth > 1:
            return
        role = acc.getRoleName()
        node = {"id": node_id, "depth": depth, "role": role, "name": acc.name or "", "states": _states(state), "bbox": _bbox(acc)}
        count = acc.childCount
    except Exception:
        return  # the element went away while we read it (a dialog closing)
    text = _text(acc) if role in ("text", "entry", "password text", "paragraph", "terminal", "spin button") else None
    if text is not None:
        node["text"] = text
    out.append(node)
    for i in range(count):
        try:
            child = acc.getChildAtIndex(i)
        except Exception:
            continue
        if child is not None:
            _walk(child, f"{node_id}.{i}", depth + 1, out)


def tree() -> dict:
    t0 = time.perf_counter()
    desktop = pyatspi.Registry.getDesktop(0)
    nodes, windows, active = [], [], None
    seen = {}
    for a in range(desktop.childCount):
        try:
            app = desktop.getChildAtIndex(a)
            name, count = (app.name or f"app{a}", app.childCount) if app is not None else ("", 0)
        except Exception:
            continue  # an application that exited while we read
        if count == 0:
            continue
        seen[name] = seen.get(name, 0) + 1
        prefix = name if seen[name] == 1 else f"{name}#{seen[name]}"
        for w in range(count):
            try:
                win = app.getChildAtIndex(w)
            except Exception:
                continue
            if win is None:
                continue
            start = len(nodes)
            _walk(win, f"{prefix}:{w}", 1, nodes)
            if len(nodes) > start and nodes[start]["role"] in WINDOW_ROLES:
                entry = {"id": nodes[start]["id"], "app": name, "title": nodes[start]["name"], "bbox": nodes[start]["bbox"]}
                windows.append(entry)
                if "active" in nodes[start]["states"]:
                    active = entry
    return {"ok": True, "nodes": nodes, "windows": windows, "active": active, "read_ms": (time.perf_counter() - t0) * 1000}


def main() -> None:
    for line in sys.stdin:
        try:
            op = json.loads(line).get("op")
            reply = tree() if op == "tree" else {"ok": True} if op == "ping" else {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
