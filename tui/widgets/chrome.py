"""What every full screen shows above its content: the title bar and the connection banner."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Header, Static


class Banner(Static):
    """One line at the top that says when the API cannot be used, and when the next try is."""

    def show(self, text: str) -> None:
        self.update(text)
        self.add_class("visible")

    def clear(self) -> None:
        self.remove_class("visible")


def chrome() -> ComposeResult:
    """The title bar and the banner, for a screen's compose()."""
    yield Header()
    yield Banner(id="banner")
