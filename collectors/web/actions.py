"""Web actions, BrowserGym-like, naming elements by ``bid`` (the id each interactive node
carries in the observation text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from collectors.actions import ActionError, ActionSpace, ActionSpec, NonEmpty


@dataclass(frozen=True)
class _OnElement(ActionSpec):
    """Base of the actions on one element: its bid."""

    bid: str


class Click(_OnElement):
    """Click the element with this bid."""

    kind = "click"


@dataclass(frozen=True)
class Fill(_OnElement):
    """Replace the text of the input or text area with this bid."""

    kind = "fill"
    text: str


@dataclass(frozen=True)
class SelectOption(_OnElement):
    """Choose the option with this value (or label) in the select element with this bid."""

    kind = "select_option"
    value: str


class Hover(_OnElement):
    """Move the mouse over the element with this bid."""

    kind = "hover"


@dataclass(frozen=True)
class Press(ActionSpec):
    """Press a key or chord on the focused element, e.g. Enter, Tab, Control+a."""

    kind = "press"
    key: Annotated[str, NonEmpty()]


@dataclass(frozen=True)
class Scroll(ActionSpec):
    """Scroll the page by dx, dy pixels."""

    kind = "scroll"
    dx: int = 0
    dy: int = 300


@dataclass(frozen=True)
class Goto(ActionSpec):
    """Open a URL in the current tab (only origins the job allows)."""

    kind = "goto"
    url: str

    def check(self) -> None:
        if not self.url.startswith(("http://", "https://", "/")):
            raise ActionError(f"goto.url: expected an http(s) URL or a path, got {self.url!r}")


class GoBack(ActionSpec):
    """Go back in the current tab's history."""

    kind = "go_back"


@dataclass(frozen=True)
class NewTab(ActionSpec):
    """Open a new tab (blank, or at url) and switch to it."""

    kind = "new_tab"
    url: str | None = None


@dataclass(frozen=True)
class SwitchTab(ActionSpec):
    """Switch to the tab with this index."""

    kind = "switch_tab"
    index: int


class CloseTab(ActionSpec):
    """Close the current tab (the last one cannot be closed)."""

    kind = "close_tab"


@dataclass(frozen=True)
class SendMsgToUser(ActionSpec):
    """Answer the user; ends the episode."""

    kind = "send_msg_to_user"
    text: str


class Noop(ActionSpec):
    """Do nothing; wait for the page."""

    kind = "noop"


WEB_ACTIONS = ActionSpace(
    "web", [Click, Fill, SelectOption, Hover, Press, Scroll, Goto, GoBack, NewTab, SwitchTab, CloseTab, SendMsgToUser, Noop]
)
