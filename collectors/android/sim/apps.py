"""The simulated phone's apps as small state machines: each screen is a list of widgets
(class, resource-id, text, content-desc, states, bounds, and what a tap does), rendered
by ``phone.py`` as real-format uiautomator XML.

- the launcher: an icon per app;
- Settings: switches backed by ``settings`` keys (Wi-Fi, Airplane mode, Bluetooth, Dark theme);
- Contacts: a scrollable list, a "Create contact" button, an editor (name, phone, Save);
- Notes: a list of notes (files under /sdcard/Notes), "New note", an editor (title, body, Save).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

W, H = 1080, 2400
ROW, TOP, VISIBLE = 160, 220, 8
LAUNCHER = "com.android.launcher3"
APPS = {  # package: (label, launcher activity, editor activity)
    "com.android.settings": ("Settings", ".Settings", ".Settings"),
    "com.android.contacts": ("Contacts", ".activities.PeopleActivity", ".activities.ContactEditorActivity"),
    "org.trajforge.notes": ("Notes", ".MainActivity", ".EditActivity"),
}
SWITCHES = [
    ("Wi-Fi", "global", "wifi_on", "1", "0"),
    ("Airplane mode", "global", "airplane_mode_on", "1", "0"),
    ("Bluetooth", "global", "bluetooth_on", "1", "0"),
    ("Dark theme", "secure", "ui_night_mode", "2", "1"),
]
NOTES_DIR = "/sdcard/Notes/"


@dataclass
class Widget:
    cls: str
    bounds: tuple[int, int, int, int]
    text: str = ""
    rid: str = ""
    desc: str = ""
    tap: Any = None  # a callable(phone) run when the widget is tapped
    checked: bool | None = None
    key: str | None = None  # an EditText's field in the app state
    scrollable: bool = False
    children: list[Widget] = field(default_factory=list)


def row(i: int) -> tuple[int, int, int, int]:
    return (0, TOP + i * ROW, W, TOP + (i + 1) * ROW)


def title(text: str) -> Widget:
    return Widget("android.widget.TextView", (48, 63, 1032, 200), text, "android:id/title_bar")


def editor(phone: Any, pkg: str, fields: list[tuple[str, str]], save: Any) -> list[Widget]:
    ui = phone.ui[pkg]
    out = [
        Widget(
            "android.widget.EditText",
            row(i),
            ui.get(name, ""),
            f"{pkg}:id/{name}",
            label,
            key=name,
            tap=lambda p, n=name: p.ui[pkg].update(focus=n),
        )
        for i, (name, label) in enumerate(fields)
    ]
    out.append(Widget("android.widget.Button", (720, 2200, 1032, 2340), "Save", f"{pkg}:id/save", tap=save))
    return out


def listing(phone: Any, pkg: str, items: list[str], rid: str, open_item: Any) -> Widget:
    offset = phone.ui[pkg].get("offset", 0)
    shown = items[offset : offset + VISIBLE]
    rows = [
        Widget("android.widget.TextView", row(i), text, f"{pkg}:id/{rid}", tap=lambda p, n=offset + i: open_item(p, n))
        for i, text in enumerate(shown)
    ]
    return Widget(
        "androidx.recyclerview.widget.RecyclerView",
        (0, TOP, W, TOP + VISIBLE * ROW),
        rid=f"{pkg}:id/list",
        scrollable=len(items) > VISIBLE,
        children=rows,
    )


def home(phone: Any) -> list[Widget]:
    icons = [
        Widget(
            "android.widget.TextView",
            (40 + i * 260, 1800, 280 + i * 260, 2040),
            label,
            f"{LAUNCHER}:id/icon",
            label,
            tap=lambda p, pkg=pkg: p.launch(pkg),
        )
        for i, (pkg, (label, *_)) in enumerate(APPS.items())
    ]
    return [Widget("android.widget.TextView", (40, 300, 1040, 420), "Tuesday, December 1", f"{LAUNCHER}:id/clock"), *icons]


def settings(phone: Any) -> list[Widget]:
    out = [title("Settings")]
    for i, (label, ns, key, on, off) in enumerate(SWITCHES):
        checked = phone.settings[ns].get(key) == on

        def toggle(p: Any, ns: str = ns, key: str = key, value: str = off if checked else on) -> None:
            p.settings[ns][key] = value

        x0, y0, _, y1 = row(i)
        out.append(
            Widget(
                "android.widget.LinearLayout",
                row(i),
                tap=toggle,
                children=[
                    Widget("android.widget.TextView", (x0 + 48, y0 + 40, 800, y1 - 40), label, "android:id/title"),
                    Widget(
                        "android.widget.Switch",
                        (880, y0 + 40, 1032, y1 - 40),
                        "ON" if checked else "OFF",
                        "android:id/switch_widget",
                        checked=checked,
                    ),
                ],
            )
        )
    return out


def contacts(phone: Any) -> list[Widget]:
    pkg, ui = "com.android.contacts", phone.ui["com.android.contacts"]
    people = sorted(phone.contacts)
    if ui.get("screen") == "edit":

        def save(p: Any) -> None:
            if ui.get("name"):
                if ui.get("editing") is not None:
                    p.contacts.remove(people[ui["editing"]])
                p.contacts.append((ui["name"], ui.get("phone", "")))
            p.ui[pkg] = {}

        return [
            title("Edit contact" if ui.get("editing") is not None else "Create contact"),
            *editor(phone, pkg, [("name", "Name"), ("phone", "Phone")], save),
        ]

    def open_contact(p: Any, n: int) -> None:
        p.ui[pkg] = {"screen": "edit", "editing": n, "name": people[n][0], "phone": people[n][1]}

    def create(p: Any) -> None:
        p.ui[pkg] = {"screen": "edit", "editing": None}

    fab = Widget(
        "android.widget.ImageButton",
        (840, 2160, 1032, 2352),
        rid=f"{pkg}:id/floating_action_button",
        desc="Create contact",
        tap=create,
    )
    return [title("Contacts"), listing(phone, pkg, [name for name, _ in people], "cliv_name_textview", open_contact), fab]


def notes(phone: Any) -> list[Widget]:
    pkg, ui = "org.trajforge.notes", phone.ui["org.trajforge.notes"]
    names = sorted(p[len(NOTES_DIR) : -4] for p in phone.files if p.startswith(NOTES_DIR) and p.endswith(".txt"))
    if ui.get("screen") == "edit":

        def save(p: Any) -> None:
            if ui.get("title"):
                p.files[f"{NOTES_DIR}{ui['title']}.txt"] = ui.get("body", "").encode()
            p.ui[pkg] = {}

        return [title("Edit note"), *editor(phone, pkg, [("title", "Title"), ("body", "Note")], save)]

    def open_note(p: Any, n: int) -> None:
        body = p.files[f"{NOTES_DIR}{names[n]}.txt"].decode(errors="replace")
        p.ui[pkg] = {"screen": "edit", "title": names[n], "body": body}

    def new(p: Any) -> None:
        p.ui[pkg] = {"screen": "edit"}

    new_button = Widget("android.widget.Button", (48, 2200, 500, 2340), "New note", f"{pkg}:id/new_note", tap=new)
    return [title("Notes"), listing(phone, pkg, names, "note_title", open_note), new_button]


SCREENS = {LAUNCHER: home, "com.android.settings": settings, "com.android.contacts": contacts, "org.trajforge.notes": notes}
