"""An email and calendar assistant's backend: inbox, sent mail, calendar events.

Seeded with a few emails and meetings between colleagues; sending mail and booking or
cancelling meetings change what later calls return (a booked slot conflicts, a sent
email appears in ``sent``)."""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from collectors.mcp.stubs import DOMAIN, NAMES, Clock, serve

SUBJECTS = [
    "Quarterly report draft",
    "Lunch on Friday?",
    "Server migration plan",
    "Budget review",
    "Offsite agenda",
    "Hiring committee notes",
    "Invoice #{n} overdue",
    "Design doc feedback",
    "On-call handover",
]
BODIES = [
    "Could you take a look before our meeting?",
    "Let me know what works for you.",
    "Attached are my notes.",
    "Please confirm by end of day.",
    "I moved the deadline to next week.",
]
EMAIL = re.compile(r"^[a-z0-9._-]+@[a-z0-9.-]+\.[a-z]{2,}$")


def build(seed: int) -> MCPServer:
    rng = random.Random(seed)
    clock = Clock(rng)
    me = f"{rng.choice(NAMES)}@{DOMAIN}"
    others = [f"{n}@{DOMAIN}" for n in NAMES if f"{n}@{DOMAIN}" != me]
    emails: dict[str, dict] = {}
    for i in range(rng.randint(4, 7)):
        eid = f"m{i + 1}"
        emails[eid] = {
            "id": eid,
            "folder": "inbox",
            "from": rng.choice(others),
            "to": [me],
            "unread": rng.random() < 0.6,
            "subject": rng.choice(SUBJECTS).format(n=rng.randint(100, 999)),
            "body": rng.choice(BODIES),
            "date": clock.tick(rng.randint(30, 300)),
        }
    day0 = clock.now.date() + timedelta(days=1)
    events: dict[str, dict] = {}
    for i in range(rng.randint(2, 4)):
        day = datetime.combine(day0 + timedelta(days=rng.randint(0, 2)), datetime.min.time())
        title = rng.choice(["Standup", "1:1", "Planning", "Design review"])
        events[f"e{i + 1}"] = {
            "id": f"e{i + 1}",
            "title": title,
            "start": day + timedelta(hours=rng.randint(9, 16)),
            "minutes": rng.choice([15, 30, 60]),
            "attendees": [me, rng.choice(others)],
        }
    counters = {"mail": len(emails), "event": len(events)}
    server = MCPServer("stub-mailbox", version="1.0", instructions=f"Mailbox and calendar of {me}.", log_level="WARNING")

    def summary(e: dict) -> dict:
        return {k: e[k] for k in ("id", "from", "subject", "date", "unread") if k in e}

    @server.tool()
    def list_emails(folder: str = "inbox", unread_only: bool = False, limit: int = 10) -> list[dict]:
        """List emails in a folder ("inbox" or "sent"), newest first."""
        if folder not in ("inbox", "sent"):
            raise ToolError(f"unknown folder '{folder}' (folders: inbox, sent)")
        if not 1 <= limit <= 50:
            raise ToolError("limit must be between 1 and 50")
        found = [e for e in emails.values() if e["folder"] == folder and (e.get("unread") or not unread_only)]
        return [summary(e) for e in sorted(found, key=lambda e: e["date"], reverse=True)[:limit]]

    @server.tool()
    def read_email(email_id: str) -> dict:
        """Read one email (marks it read)."""
        if email_id not in emails:
            raise ToolError(f"email '{email_id}' not found")
        emails[email_id]["unread"] = False
        return {k: v for k, v in emails[email_id].items() if k != "folder"}

    @server.tool()
    def search_emails(query: str) -> list[dict]:
        """Emails whose subject, body or sender contain the query (case-insensitive)."""
        if not query.strip():
            raise ToolError("query must not be empty")
        q = query.lower()
        return [summary(e) for e in emails.values() if q in (e["subject"] + " " + e["body"] + " " + e["from"]).lower()]

    @server.tool()
    def send_email(to: list[str], subject: str, body: str) -> dict:
        """Send an email; returns its id."""
        bad = [a for a in to if not EMAIL.match(a)]
        if not to or bad:
            raise ToolError(f"invalid recipient address: {bad[0] if bad else '(none)'}")
        if not subject.strip():
            raise ToolError("subject must not be empty")
        counters["mail"] += 1
        eid = f"m{counters['mail']}"
        emails[eid] = {
            "id": eid,
            "folder": "sent",
            "from": me,
            "to": list(to),
            "subject": subject,
            "body": body,
            "date": clock.tick(),
        }
        return {"id": eid, "status": "sent", "date": emails[eid]["date"]}

    def show(ev: dict) -> dict:
        return {
            "id": ev["id"],
            "title": ev["title"],
            "start": ev["start"].strftime("%Y-%m-%d %H:%M"),
            "minutes": ev["minutes"],
            "attendees": ev["attendees"],
        }

    @server.tool()
    def list_events(date: str) -> list[dict]:
        """Calendar events on a day (YYYY-MM-DD), in time order."""
        try:
            day = datetime.strptime(date, "%Y-%m-%d").date()
        except ValueError:
            raise ToolError(f"invalid date '{date}': expected YYYY-MM-DD") from None
        return [show(e) for e in sorted(events.values(), key=lambda e: e["start"]) if e["start"].date() == day]

    @server.tool()
    def create_event(title: str, start: str, minutes: int, attendees: list[str]) -> dict:
        """Book a meeting at start (YYYY-MM-DD HH:MM) for a number of minutes."""
        try:
            begin = datetime.strptime(start, "%Y-%m-%d %H:%M")
        except ValueError:
            raise ToolError(f"invalid start '{start}': expected YYYY-MM-DD HH:MM") from None
        if not 5 <= minutes <= 480:
            raise ToolError("minutes must be between 5 and 480")
        if not 7 <= begin.hour < 20:
            raise ToolError("meetings must start between 07:00 and 20:00")
        bad = [a for a in attendees if not EMAIL.match(a)]
        if bad:
            raise ToolError(f"invalid attendee address: {bad[0]}")
        end = begin + timedelta(minutes=minutes)
        for ev in events.values():
            if begin < ev["start"] + timedelta(minutes=ev["minutes"]) and ev["start"] < end:
                raise ToolError(f"conflicts with {ev['id']} '{ev['title']}' at {ev['start']:%H:%M}")
        counters["event"] += 1
        eid = f"e{counters['event']}"
        events[eid] = {"id": eid, "title": title, "start": begin, "minutes": minutes, "attendees": [me, *attendees]}
        return show(events[eid])

    @server.tool()
    def cancel_event(event_id: str) -> dict:
        """Cancel a meeting."""
        if event_id not in events:
            raise ToolError(f"event '{event_id}' not found")
        return {"cancelled": show(events.pop(event_id))}

    return server


if __name__ == "__main__":
    serve(build)
