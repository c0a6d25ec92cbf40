"""The UI hierarchy from ``uiautomator dump`` as nodes and as a compact text tree.

Every node gets a stable index, its position in a pre-order walk of the dump (AndroidWorld
numbers its UI elements the same way), which ``click(index=...)`` and friends take. The text
keeps what an agent or a world model needs and drops layout noise: class (short name),
resource id (without the package), text, content-desc, states, bounds::

    Package: com.android.settings  Activity: .Settings
    Screen: 1080x2400 portrait
    [1] TextView #title_bar "Settings" @[48,63][1032,200]
    [2] LinearLayout clickable @[0,220][1080,380]
      [3] TextView #title "Wi-Fi" @[48,260][800,340]
      [4] Switch #switch_widget "ON" checkable checked @[880,260][1032,340]

Nodes with nothing to show (no text, description, id or state) are left out, their children
kept one level up; their indexes stay valid.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from schemas.errors import TrajforgeError

FLAGS = ("clickable", "long-clickable", "checkable", "checked", "focused", "scrollable", "selected", "password")
_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")


def parse(xml: str) -> list[dict[str, Any]]:
    """The dump's nodes in pre-order: index, depth, class, id, text, desc, flags, enabled, bounds."""
    try:
        root = ET.fromstring(xml.encode())
    except ET.ParseError as exc:
        raise TrajforgeError(f"uiautomator dump is not valid XML: {exc}") from None
    nodes: list[dict[str, Any]] = []

    def walk(el: ET.Element, depth: int) -> None:
        m = _BOUNDS.fullmatch(el.get("bounds", "")) if el.tag == "node" else None
        if el.tag == "node":
            rid = el.get("resource-id", "")
            nodes.append(
                {
                    "index": len(nodes),
                    "depth": depth,
                    "class": el.get("class", "").rsplit(".", 1)[-1],
                    "id": rid.split(":id/", 1)[-1],
                    "text": el.get("text", ""),
                    "desc": el.get("content-desc", ""),
                    "package": el.get("package", ""),
                    "enabled": el.get("enabled") != "false",
                    "flags": [f for f in FLAGS if el.get(f) == "true"],
                    "bounds": tuple(int(v) for v in m.groups()) if m else (0, 0, 0, 0),
                }
            )
        for child in el:
            walk(child, depth + (el.tag == "node"))

    walk(root, 0)
    return nodes


def centre(node: dict[str, Any]) -> tuple[int, int]:
    x0, y0, x1, y1 = node["bounds"]
    return (x0 + x1) // 2, (y0 + y1) // 2


def render(
    nodes: list[dict[str, Any]], package: str, activity: str, screen: tuple[int, int], rotation: int = 0, cap: int = 20_000
) -> tuple[str, bool]:
    """The compact tree text, with the foreground package and activity; (text, truncated)."""
    short = activity[len(package) :] if activity.startswith(package + ".") else activity
    orientation = "portrait" if rotation in (0, 2) else "landscape"
    lines = [f"Package: {package}  Activity: {short}", f"Screen: {screen[0]}x{screen[1]} {orientation}"]
    shown_depth: dict[int, int] = {}  # a node's depth in the text (hidden ancestors do not indent)
    for n in nodes:
        parents = [d for d in shown_depth if d < n["depth"]]
        level = shown_depth[max(parents)] + 1 if parents else 0
        for d in [d for d in shown_depth if d >= n["depth"]]:
            del shown_depth[d]
        if not (n["text"] or n["desc"] or n["id"] or n["flags"]) and n["index"] != 0:
            continue
        shown_depth[n["depth"]] = level
        parts = [f"[{n['index']}] {n['class']}"]
        parts += [f"#{n['id']}"] if n["id"] else []
        parts += [f'"{n["text"]}"'] if n["text"] else []
        parts += [f'desc="{n["desc"]}"'] if n["desc"] else []
        parts += n["flags"] + ([] if n["enabled"] else ["disabled"])
        x0, y0, x1, y1 = n["bounds"]
        lines.append("  " * level + " ".join(parts) + f" @[{x0},{y0}][{x1},{y1}]")
    text = "\n".join(lines)
    return (text[:cap], True) if len(text) > cap else (text, False)
