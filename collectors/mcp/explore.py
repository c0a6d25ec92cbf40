"""Exploration on an MCP server without a model: seeded random tool calls built from each
tool's input schema (listed in the reset observation), filled with values the server has
shown so far (ids, names, addresses, dates), so later calls act on earlier results and
the server's own validation answers the mistakes."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from collectors.explore import Explorer
from schemas.transition import Observation

WORDS = ["alpha", "report", "budget", "notes", "release", "kettle", "draft", "review", "invoice", "lunch"]
SQL = [
    "SELECT name FROM sqlite_master WHERE type = 'table'",
    "CREATE TABLE IF NOT EXISTS items (id INTEGER, name TEXT)",
    "INSERT INTO items (name) VALUES ('widget')",
    "SELECT * FROM items",
    "SELECT count(*) FROM items",
]
BY_NAME = {
    "timezone": ["UTC", "Europe/London", "Asia/Tokyo", "America/New_York", "Australia/Sydney"],
    "time": ["09:30", "14:00", "23:15"],
    "query": SQL,
    "files": ["README.md", "notes.txt"],
    "date": ["2026-03-03", "2026-06-15"],
    "start": ["2026-03-03 10:00", "2026-06-15 15:30"],
    "amount": ["5.00", "12.50", "250.00"],
    "status": ["open", "in_progress", "resolved", "closed"],
    "priority": ["low", "medium", "high"],
    "folder": ["inbox", "sent"],
}
_TOOL = re.compile(r"^- ([\w.-]+): .*\n  input: (\{.*\})$", re.M)


class MCPExplorer(Explorer):
    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.tools: dict[str, dict[str, Any]] = {}
        self.seen: list[str] = []

    def _learn(self, text: str) -> None:
        if not self.tools:
            for name, schema in _TOOL.findall(text):
                self.tools[name] = json.loads(schema)
        for value in re.findall(r'"([^"\n]{1,60})"', text):
            if value not in self.seen and not value.endswith(":"):
                self.seen.append(value)
        self.seen = self.seen[-200:]

    def _value(self, name: str, schema: dict[str, Any]) -> Any:
        r = self.rng
        options = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
        if options:
            schema = options[0]
        if "enum" in schema:
            return r.choice(schema["enum"])
        kind = schema.get("type", "string")
        if kind == "integer":
            return r.randint(1, 5)
        if kind == "number":
            return round(r.uniform(0.5, 50), 2)
        if kind == "boolean":
            return r.random() < 0.5
        if kind == "array":
            return [self._value(name.rstrip("s"), schema.get("items", {})) for _ in range(r.randint(1, 2))]
        if kind == "object":
            return {}
        if "path" in name:
            return "{workspace}/repo" if "repo" in name else f"{{workspace}}/{r.choice(WORDS)}.txt"
        similar = [
            v
            for v in self.seen
            if (name.endswith("id") and re.fullmatch(r"[A-Za-z]+-?\d+", v))
            or ("@" in v and name in ("to", "attendee", "attendees"))
        ]
        if similar and r.random() < 0.8:
            return r.choice(similar)
        if name in BY_NAME and r.random() < 0.8:
            return r.choice(BY_NAME[name])
        if self.seen and r.random() < 0.4:
            return r.choice(self.seen)
        return f"{r.choice(WORDS)} {r.randint(1, 99)}"

    def explore(self, observation: Observation) -> dict[str, Any] | None:
        self._learn(observation.text)
        if not self.tools:
            return None
        name = self.rng.choice(sorted(self.tools))
        schema = self.tools[name]
        required = set(schema.get("required", []))
        args = {
            p: self._value(p, s)
            for p, s in sorted(schema.get("properties", {}).items())
            if p in required or self.rng.random() < 0.3
        }
        return {"action": "call_tool", "name": name, "arguments": args}
