"""Android actions as AndroidWorld's JSONAction: touch by node index (the number in brackets
in the observation) or by screen point, text input, scrolls and swipes, system navigation,
opening an app by name, key events, waiting, and ending with a status or an answer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from collectors.actions import ActionError, ActionSpace, ActionSpec, Between, Length, NonEmpty, OneOf, Wait

DIRECTIONS = ("up", "down", "left", "right")


@dataclass(frozen=True)
class _Target(ActionSpec):
    """Base of touches: a node ``index`` or a point (``x``, ``y``)."""

    index: int | None = None
    x: int | None = None
    y: int | None = None

    def check(self) -> None:
        if (self.index is None) == (self.x is None or self.y is None):
            raise ActionError(f"{self.kind}: give either index or both x and y")


class Click(_Target):
    """Tap the centre of the node with this index, or the point (x, y)."""

    kind = "click"


class LongPress(_Target):
    """Touch and hold (1 s) the node with this index, or the point (x, y)."""

    kind = "long_press"


@dataclass(frozen=True)
class InputText(ActionSpec):
    """Type text; into the node with this index (tapped first) when given, else the focused field."""

    kind = "input_text"
    text: Annotated[str, Length(1, 1000)]
    index: int | None = None


@dataclass(frozen=True)
class Scroll(ActionSpec):
    """Scroll the content (of the node with this index, or the screen) up, down, left or right."""

    kind = "scroll"
    direction: str
    index: int | None = None

    def check(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ActionError(f"scroll.direction: expected one of {', '.join(DIRECTIONS)}, got {self.direction!r}")


@dataclass(frozen=True)
class Swipe(ActionSpec):
    """Drag a finger from (x1, y1) to (x2, y2) in duration_ms milliseconds."""

    kind = "swipe"
    x1: int
    y1: int
    x2: int
    y2: int
    duration_ms: Annotated[int, Between(10, 5000)] = 300


class NavigateBack(ActionSpec):
    """Press the system Back button."""

    kind = "navigate_back"


class NavigateHome(ActionSpec):
    """Press the system Home button."""

    kind = "navigate_home"


@dataclass(frozen=True)
class OpenApp(ActionSpec):
    """Open an app by its name (Settings, Contacts, ...) or its package name."""

    kind = "open_app"
    app_name: Annotated[str, NonEmpty()]


@dataclass(frozen=True)
class KeyEvent(ActionSpec):
    """Send an Android key event: KEYCODE_ENTER, KEYCODE_DEL, KEYCODE_TAB, ... or its number."""

    kind = "keyevent"
    keycode: str

    def check(self) -> None:
        if not re.fullmatch(r"KEYCODE_[A-Z0-9_]+|\d{1,3}", self.keycode):
            raise ActionError(f"keyevent.keycode: expected KEYCODE_NAME or a number, got {self.keycode!r}")


@dataclass(frozen=True)
class Status(ActionSpec):
    """End the episode: the goal is complete, or infeasible."""

    kind = "status"
    goal_status: Annotated[str, OneOf(("complete", "infeasible"))]


@dataclass(frozen=True)
class Answer(ActionSpec):
    """Answer the user's question with text (for information-retrieval tasks)."""

    kind = "answer"
    text: str


ANDROID_ACTIONS = ActionSpace(
    "android", [Click, LongPress, InputText, Scroll, Swipe, NavigateBack, NavigateHome, OpenApp, KeyEvent, Wait, Status, Answer]
)
