"""Print the requirements of trajforge with some extras, one a line, from pyproject.toml alone.

The project image installs them in a layer of their own, before the code is copied in, so a
code change rebuilds only the last layers (``python image-requirements.py pyproject.toml curate,web``).
Self-references (``trajforge[curate]``) are resolved; unknown extras are an error.
"""

from __future__ import annotations

import re
import sys
import tomllib


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    optional = project.get("optional-dependencies", {})
    out, todo, seen = list(project["dependencies"]), list(extras), set()
    while todo:
        name = todo.pop(0).strip()
        if not name or name in seen:
            continue
        if name not in optional:
            raise SystemExit(f"{pyproject}: no extra {name!r} (have: {', '.join(optional)})")
        seen.add(name)
        for req in optional[name]:
            m = re.fullmatch(rf"{project['name']}\[(.+)\]", req)
            if m:
                todo += m.group(1).split(",")
            elif req not in out:
                out.append(req)
    return out


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1], sys.argv[2].split(",") if len(sys.argv) > 2 else [])))
