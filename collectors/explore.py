"""Exploration without a model: the ``Explorer`` base, and the sandbox domains' explorers.

``ExplorationPolicy`` asks the task's domain spec for its explorer (``schemas.domains``:
``explorer="collectors.explore:TerminalExplorer"``) and makes one per episode from the
episode's seeded random generator; ``act`` gives the next action or None to stop::

    explorer = domain("terminal").explorer_class()(random.Random(seed))
    action = explorer.act(observation, step=1, max_steps=12)   # {"action": "run", ...}

The terminal and SWE explorers learn file and folder names from what they see (listings,
``changed_files``) and use them in shell commands, file views, searches and small edits.
"""

from __future__ import annotations

import random
import re
from typing import Any

from schemas.transition import Observation

WORDS = ["alpha", "beta", "todo", "error", "config", "main", "data", "test", "value", "name"]


class Explorer:
    """One episode's exploration of one domain: seeded random but plausible actions."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def act(self, observation: Observation, step: int, max_steps: int) -> Any:
        """The action of ``step`` (from 1); None ends the episode (after ``max_steps``)."""
        return None if step > max_steps else self.explore(observation)

    def explore(self, observation: Observation) -> Any:
        raise NotImplementedError


class TerminalExplorer(Explorer):
    """Shell commands from a grammar of real commands over the files it has seen."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.files: list[str] = []
        self.dirs: list[str] = ["."]

    def act(self, observation: Observation, step: int, max_steps: int) -> Any:
        self._learn(observation)
        return super().act(observation, step, max_steps)

    def _learn(self, observation: Observation) -> None:
        extra = observation.extra_dict
        for path in (extra.get("changed_files") or {}).get("added", []):
            if path not in self.files:
                self.files.append(path)
        for line in observation.text.splitlines():
            token = line.strip().split()[-1] if line.strip() else ""
            if re.fullmatch(r"[\w./-]+\.(py|txt|md|cfg|toml|yaml|json|sh|csv)", token) and token not in self.files:
                self.files.append(token.removeprefix("./"))
            elif re.fullmatch(r"[\w.-]+/", token) and token.rstrip("/") not in self.dirs:
                self.dirs.append(token.rstrip("/"))

    def explore(self, observation: Observation) -> dict[str, Any]:
        r = self.rng
        f = r.choice(self.files) if self.files else "README.md"
        d = r.choice(self.dirs)
        w = r.choice(WORDS)
        commands = [
            "ls -la",
            f"ls -p {d}",
            f"cat {f}",
            f"wc -l {f}",
            f"head -n {r.randint(3, 20)} {f}",
            f"grep -n {w} {f}",
            f"echo {w} {r.randint(0, 999)} > {w}.txt",
            f"mkdir -p {w}_dir && ls -p",
            f"cd {d} && pwd",
            "cd /work",
            "find . -maxdepth 2 -type f | sort | head -n 20",
            f"python3 -c 'print({r.randint(1, 9)} * {r.randint(1, 9)})'",
            "git status 2>&1 | head -n 5",
            f"sort {f} | uniq -c | head",
            f"cp {f} {w}.bak && ls",
            "date -u +%F",
            f"stat -c '%s %n' {f}",
            "env | sort | head -n 5",
            "ps -eo pid,args | head -n 5",
            f"rm -f {w}.bak; ls",
        ]
        if r.random() < 0.1:
            return {
                "action": "write_file",
                "path": f"{w}_{r.randint(0, 99)}.txt",
                "content": f"{w}\n" * r.randint(1, 5),
            }
        return {"action": "run", "command": r.choice(commands), "timeout": 10}


class SWEExplorer(TerminalExplorer):
    """File views, searches, small edits and test runs in the repository; submits at the end."""

    def act(self, observation: Observation, step: int, max_steps: int) -> Any:
        action = super().act(observation, step, max_steps)
        return {"action": "submit"} if action is None else action

    def explore(self, observation: Observation) -> dict[str, Any]:
        r = self.rng
        py = [f for f in self.files if f.endswith(".py")] or ["setup.py"]
        f = r.choice(py)
        roll = r.random()
        if roll < 0.4:
            start = r.choice([1, 1, 10, 20, 40])
            return {"action": "view", "path": f, "start": start, "end": start + r.randint(10, 60)}
        if roll < 0.6:
            return {"action": "search", "pattern": r.choice(["def ", "return", "import", "class ", "url", "port"])}
        if roll < 0.75:
            return {"action": "run_tests"}
        if roll < 0.85:
            return {"action": "run", "command": r.choice(["git status", "git log --oneline | head", "git diff --stat"])}
        return {"action": "insert", "path": f, "line": 0, "text": f"# reviewed {r.randint(0, 999)}"}
