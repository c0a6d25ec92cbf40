"""The accessibility tree as observation text, and lookups of nodes by id.

A header names the active window, the window list (with geometry) and the focused node;
then one line per node, indented by depth::

    Active window: [mousepad:0] "Untitled 1 - Mousepad"
    Windows: [mousepad:0] "Untitled 1 - Mousepad" @(0,0 642x505)
    Focused: [mousepad:0.0.4.0.0.0] text
    [mousepad:0] frame "Untitled 1 - Mousepad" active @(0,0 642x505)
      [mousepad:0.0.0.0.0] menu "File" @(1,20 39x25)

Nameless layout containers (fillers, panels) are left out and their children moved up a
level: they carry no information and double the text. The text is capped at ``cap``
characters with the cut flagged. The session's temp dir name (in paths a file dialog
shows) is marked volatile.
"""

from __future__ import annotations

from typing import Any

from collectors.actions import ActionError
from schemas.transition import VolatileSpan
from schemas.volatile import detect_spans

LAYOUT = {"filler", "panel", "scroll pane", "viewport", "layered pane", "unknown", "section"}
SHOWN_STATES = ("focused", "editable", "checked", "selected", "expanded", "pressed", "active")
INTERACTIVE = {
    "push button",
    "toggle button",
    "check box",
    "radio button",
    "menu",
    "menu item",
    "check menu item",
    "radio menu item",
    "page tab",
    "combo box",
    "link",
    "list item",
    "table cell",
    "icon",
    "text",
    "entry",
    "password text",
    "spin button",
    "tree item",
}


def _box(b: list[int] | None) -> str:
    return f" @({b[0]},{b[1]} {b[2]}x{b[3]})" if b and b[2] > 0 and b[3] > 0 else ""


def node_line(n: dict[str, Any]) -> str:
    parts = [f"[{n['id']}] {n['role']}"]
    if n["name"]:
        parts.append(f'"{n["name"][:200]}"')
    parts += [s for s in SHOWN_STATES if s in n["states"]]
    if "sensitive" not in n["states"] and n["role"] in INTERACTIVE:
        parts.append("disabled")
    if "text" in n:
        text = n["text"] if len(n["text"]) <= 500 else n["text"][:500] + "..."
        parts.append("value=" + repr(text).replace("\\'", "'"))
    return " ".join(parts) + _box(n["bbox"])


def render(tree: dict[str, Any], cap: int) -> tuple[str, bool]:
    """(text, truncated) of a tree read by the helper."""
    nodes = tree["nodes"]
    active = tree.get("active")
    focused = next((n for n in nodes if "focused" in n["states"]), None)
    head = [
        f'Active window: [{active["id"]}] "{active["title"]}"' if active else "Active window: none",
        "Windows: " + (" | ".join(f'[{w["id"]}] "{w["title"]}"{_box(w["bbox"])}' for w in tree["windows"]) or "none"),
        f"Focused: [{focused['id']}] {focused['role']}" if focused else "Focused: none",
        "",
    ]
    level: dict[str, int] = {}
    lines = []
    for n in nodes:
        parent = n["id"].rsplit(".", 1)[0] if "." in n["id"] else None
        depth = level.get(parent, -1) + 1 if parent else 0
        if parent and n["role"] in LAYOUT and not n["name"] and "text" not in n:
            level[n["id"]] = depth - 1  # skipped: its children take its place
            continue
        level[n["id"]] = depth
        lines.append("  " * depth + node_line(n))
    text = "\n".join(head + lines)
    if len(text) > cap:
        cut = text.rfind("\n", 0, cap)
        return text[: cut if cut > 0 else cap] + f"\n[... tree truncated: {len(text) - cap} more characters ...]", True
    return text, False


def spans(text: str, volatile_words: tuple[str, ...]) -> list[VolatileSpan]:
    found = list(detect_spans(text))
    for word in volatile_words:
        start = text.find(word)
        while start >= 0:
            end = start + len(word)
            if all(end <= s.start or start >= s.end for s in found):
                found.append(VolatileSpan(start, end, "temp_path"))
            start = text.find(word, end)
    return sorted(found, key=lambda s: s.start)


def find_node(tree: dict[str, Any], node_id: str) -> dict[str, Any]:
    """The node with this id, or ActionError (unknown id, or no place on the screen)."""
    for n in tree["nodes"]:
        if n["id"] == node_id:
            b = n["bbox"]
            if not b or b[2] <= 0 or b[3] <= 0:
                raise ActionError(f"node {node_id!r} ({n['role']}) has no place on the screen")
            return n
    raise ActionError(f"no node with id {node_id!r} in the current tree")


def centre(node: dict[str, Any]) -> tuple[int, int]:
    x, y, w, h = node["bbox"]
    return x + w // 2, y + h // 2
