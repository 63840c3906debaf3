"""Modal dialogs: a yes/no confirmation, and TensorBoard's URL with the ssh tunnel line to paste."""

from __future__ import annotations

import os
import threading
import webbrowser
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class Confirm(ModalScreen[bool]):
    """`y`/enter confirms, `n`/escape declines."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


def over_ssh() -> bool:
    """True when this terminal is an SSH session: a browser here would open on the wrong machine."""
    return any(os.environ.get(v) for v in ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY"))


class TensorBoardDialog(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "app.pop_screen", "Close"), Binding("y", "copy", "Copy URL")]

    def __init__(self, board: dict[str, Any]):
        super().__init__()
        self.board = board

    def compose(self) -> ComposeResult:
        b = self.board
        ssh = b["ssh_tunnel"].replace(f" {b['host']}", f" USER@{b['host']}")
        if over_ssh():
            how = f"Over SSH: on your machine run\n  {ssh}\nthen open http://localhost:{b['port']}/"
        else:
            how = "Opened in your browser."
        with Vertical(classes="dialog"):
            yield Label(f"TensorBoard for jobs {', '.join(map(str, b['jobs']))}", classes="title")
            yield Static(b["url"], id="tb-url")
            yield Static(how, id="tb-how")
            yield Static("URL copied to the clipboard (OSC 52). y copies again, esc closes.", id="tb-copied")

    def on_mount(self) -> None:
        self.action_copy()
        if not over_ssh():
            threading.Thread(target=webbrowser.open, args=(self.board["url"],), daemon=True).start()

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.board["url"])


def open_tensorboard(app: App, job_ids: list[int]) -> None:
    """Ask the API for a TensorBoard over these jobs (off the UI thread), then show the dialog."""
    app.notify(f"starting TensorBoard for jobs {', '.join(map(str, job_ids))} …")
    app.call_api(lambda c: c.tensorboard(job_ids), lambda board: app.push_screen(TensorBoardDialog(board)))
