"""A ticketing system: tickets with status, priority, assignee and comments.

Status moves along a workflow (open -> in_progress -> resolved -> closed, reopen back to
open); an impossible transition, an unknown user or ticket is refused as a real tracker
would refuse it."""

from __future__ import annotations

import random

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from collectors.mcp.stubs import NAMES, Clock, serve

TITLES = [
    "Login page times out",
    "Export to CSV drops rows",
    "Dark mode colours wrong",
    "Search ignores accents",
    "Email digest sent twice",
    "Upload fails over 10 MB",
    "Typo on pricing page",
]
FLOW = {
    "open": {"in_progress", "closed"},
    "in_progress": {"open", "resolved"},
    "resolved": {"closed", "open"},
    "closed": {"open"},
}
PRIORITIES = ("low", "medium", "high", "urgent")


def build(seed: int) -> MCPServer:
    rng = random.Random(seed)
    clock = Clock(rng)
    users = sorted(rng.sample(NAMES, 5))
    tickets: dict[str, dict] = {}
    for i, title in enumerate(rng.sample(TITLES, rng.randint(3, 5))):
        tid = f"T-{101 + i}"
        tickets[tid] = {
            "id": tid,
            "title": title,
            "status": rng.choice(["open", "open", "in_progress", "resolved"]),
            "priority": rng.choice(PRIORITIES),
            "assignee": rng.choice([None, *users]),
            "created": clock.tick(rng.randint(20, 600)),
            "comments": [],
        }
    about = f"Issue tracker. Users: {', '.join(users)}."
    server = MCPServer("stub-tickets", version="1.0", instructions=about, log_level="WARNING")

    def ticket(tid: str) -> dict:
        if tid not in tickets:
            raise ToolError(f"ticket {tid} not found")
        return tickets[tid]

    def brief(t: dict) -> dict:
        return {k: t[k] for k in ("id", "title", "status", "priority", "assignee")}

    @server.tool()
    def list_tickets(status: str | None = None, assignee: str | None = None) -> list[dict]:
        """Tickets, optionally filtered by status and assignee."""
        if status is not None and status not in FLOW:
            raise ToolError(f"unknown status '{status}' (statuses: {', '.join(FLOW)})")
        return [brief(t) for t in tickets.values() if status in (None, t["status"]) and assignee in (None, t["assignee"])]

    @server.tool()
    def get_ticket(ticket_id: str) -> dict:
        """One ticket with its comments."""
        return ticket(ticket_id)

    @server.tool()
    def create_ticket(title: str, description: str = "", priority: str = "medium") -> dict:
        """Open a new ticket."""
        if len(title.strip()) < 5:
            raise ToolError("title must be at least 5 characters")
        if priority not in PRIORITIES:
            raise ToolError(f"invalid priority '{priority}' (priorities: {', '.join(PRIORITIES)})")
        tid = f"T-{101 + len(tickets)}"
        tickets[tid] = {
            "id": tid,
            "title": title,
            "description": description,
            "status": "open",
            "priority": priority,
            "assignee": None,
            "created": clock.tick(),
            "comments": [],
        }
        return brief(tickets[tid])

    @server.tool()
    def update_ticket(
        ticket_id: str, status: str | None = None, assignee: str | None = None, priority: str | None = None
    ) -> dict:
        """Change a ticket's status (following the workflow), assignee or priority."""
        t = ticket(ticket_id)
        if status is not None and status != t["status"]:
            if status not in FLOW:
                raise ToolError(f"unknown status '{status}' (statuses: {', '.join(FLOW)})")
            if status not in FLOW[t["status"]]:
                allowed = ", ".join(sorted(FLOW[t["status"]]))
                raise ToolError(f"cannot move {ticket_id} from {t['status']} to {status} (allowed: {allowed})")
            if status == "in_progress" and not (assignee or t["assignee"]):
                raise ToolError(f"{ticket_id} needs an assignee before work starts")
        if assignee is not None and assignee not in users:
            raise ToolError(f"unknown user '{assignee}' (users: {', '.join(users)})")
        if priority is not None and priority not in PRIORITIES:
            raise ToolError(f"invalid priority '{priority}' (priorities: {', '.join(PRIORITIES)})")
        for key, value in (("assignee", assignee), ("status", status), ("priority", priority)):
            if value is not None:
                t[key] = value
        return brief(t)

    @server.tool()
    def add_comment(ticket_id: str, text: str, author: str) -> dict:
        """Comment on a ticket as one of the users."""
        t = ticket(ticket_id)
        if author not in users:
            raise ToolError(f"unknown user '{author}' (users: {', '.join(users)})")
        if not text.strip():
            raise ToolError("comment must not be empty")
        t["comments"].append({"author": author, "text": text, "at": clock.tick()})
        return {"ticket": ticket_id, "comments": len(t["comments"])}

    return server


if __name__ == "__main__":
    serve(build)
