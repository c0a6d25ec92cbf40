"""Desktop actions, pyautogui-like as OSWorld's computer_13 space (screen coordinates,
keys, text), plus actions on accessibility-tree nodes by the id the observation shows
(``click_node``, ``set_text``), resolved to the centre of the node's screen box."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from collectors.actions import ActionError, ActionSpace, ActionSpec, Length, NonEmpty, OneOf, Wait

BUTTONS = {"left": "1", "middle": "2", "right": "3"}


@dataclass(frozen=True)
class _AtPoint(ActionSpec):
    """Base of the pointer actions: a point on the screen."""

    x: int
    y: int


@dataclass(frozen=True)
class Click(_AtPoint):
    """Click at screen coordinates (x, y) with a mouse button: left, middle or right."""

    kind = "click"
    button: Annotated[str, OneOf(tuple(BUTTONS))] = "left"


class DoubleClick(_AtPoint):
    """Double-click with the left button at (x, y)."""

    kind = "double_click"


class RightClick(_AtPoint):
    """Click with the right button at (x, y) (context menus)."""

    kind = "right_click"


class MoveTo(_AtPoint):
    """Move the pointer to (x, y)."""

    kind = "move_to"


class DragTo(_AtPoint):
    """Hold the left button down at the pointer's position and release it at (x, y)."""

    kind = "drag_to"


@dataclass(frozen=True)
class Scroll(ActionSpec):
    """Scroll by clicks of the wheel (positive: up, negative: down), at (x, y) when given."""

    kind = "scroll"
    clicks: int
    x: int | None = None
    y: int | None = None

    def check(self) -> None:
        if not -50 <= self.clicks <= 50 or self.clicks == 0:
            raise ActionError(f"scroll.clicks: expected a non-zero number between -50 and 50, got {self.clicks}")


@dataclass(frozen=True)
class TypeText(ActionSpec):
    """Type text with the keyboard into the focused element."""

    kind = "type_text"
    text: Annotated[str, Length(1, 2000)]


@dataclass(frozen=True)
class Press(ActionSpec):
    """Press one key (enter, esc, tab, backspace, up, f5, a, ...) or a chord like ctrl+s."""

    kind = "press"
    key: Annotated[str, NonEmpty()]


@dataclass(frozen=True)
class Hotkey(ActionSpec):
    """Press keys together, in order, then release them: ["ctrl", "shift", "t"]."""

    kind = "hotkey"
    keys: list[str]

    def check(self) -> None:
        if not self.keys or not all(k.strip() for k in self.keys):
            raise ActionError("hotkey.keys: expected a non-empty list of key names")


@dataclass(frozen=True)
class ClickNode(ActionSpec):
    """Click the centre of the accessibility-tree node with this id (as shown in brackets)."""

    kind = "click_node"
    id: str


@dataclass(frozen=True)
class SetText(ActionSpec):
    """Replace the text of the text field with this node id: click it, select all, type."""

    kind = "set_text"
    id: str
    text: str


class Done(ActionSpec):
    """The task is done; ends the episode."""

    kind = "done"


@dataclass(frozen=True)
class Fail(ActionSpec):
    """The task cannot be done; ends the episode."""

    kind = "fail"
    reason: str = ""


OS_ACTIONS = ActionSpace(
    "os", [Click, DoubleClick, RightClick, MoveTo, DragTo, Scroll, TypeText, Press, Hotkey, Wait, ClickNode, SetText, Done, Fail]
)
