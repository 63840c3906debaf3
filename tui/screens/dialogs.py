"""Modal dialogs: a yes/no confirmation, and TensorBoard's URL with the ssh tunnel line to paste."""

from __future__ import annotations

import os
import sys
import threading
import webbrowser
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from tui.widgets.fmt import as_me


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


def browser_here() -> bool:
    """Whether a browser could open on this machine's screen: not over SSH, and a display (X11, Wayland), a
    BROWSER setting or macOS; a headless box has none, whatever webbrowser would try (a text browser in a pipe)."""
    if over_ssh():
        return False
    return sys.platform == "darwin" or any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"))


class TensorBoardDialog(ModalScreen[None]):
    """The URL (copied to the clipboard), the ssh tunnel line with this user's name, and a browser only where one
    can open: the dialog says what happened, never that a browser opened when none could."""

    BINDINGS = [Binding("escape,enter,q", "app.pop_screen", "Close"), Binding("y", "copy", "Copy URL")]

    def __init__(self, board: dict[str, Any], title: str | None = None):
        super().__init__()
        self.board = board
        self.title_text = title or f"TensorBoard for jobs {', '.join(map(str, board['jobs']))}"

    def compose(self) -> ComposeResult:
        b = self.board
        ssh = as_me(b["ssh_tunnel"])
        where = "Over SSH" if over_ssh() else "From another machine"
        page = b["url"].split(f":{b['port']}", 1)[-1]
        tunnel = f"{where}: run there\n  {ssh}\nthen open http://localhost:{b['port']}{page}"
        browser = "Opening it in your browser …" if browser_here() else "No browser on this screen (headless or SSH)."
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="title")
            yield Static(b["url"], id="tb-url")
            yield Static(browser, id="tb-browser")
            yield Static(tunnel, id="tb-how")
            yield Static("URL copied to the clipboard (OSC 52). y copies again, esc closes.", id="tb-copied")

    def on_mount(self) -> None:
        self.action_copy()
        if browser_here():
            threading.Thread(target=self._open, daemon=True).start()

    def _open(self) -> None:
        try:
            opened = webbrowser.open(self.board["url"])
        except webbrowser.Error:
            opened = False
        said = "Opened in your browser." if opened else "No browser could be started here: open the URL above."
        self.app.call_from_thread(self.query_one("#tb-browser", Static).update, said)

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.board["url"])


def open_tensorboard(app: App, job_ids: list[int]) -> None:
    """Ask the API for a TensorBoard over these jobs (off the UI thread), then show the dialog."""
    app.notify(f"starting TensorBoard for jobs {', '.join(map(str, job_ids))} …")
    app.call_api(lambda c: c.tensorboard(job_ids), lambda board: app.push_screen(TensorBoardDialog(board)))


def session_text(job: dict[str, Any]) -> str:
    """How a live session is reached, for its job screen: the attach command, or the notebook's URL and tunnel."""
    if job.get("url"):
        return f"notebook {job['url']}  (a: its tunnel)"
    where = job.get("attach")
    if where:
        return f"attach: a here, or {where['command']}  (from elsewhere: {where['ssh']})"
    return ""


def notebook_dialog(job: dict[str, Any]) -> TensorBoardDialog:
    """A notebook session's URL and ssh tunnel line, in TensorBoard's dialog."""
    port = int(job["tunnel"].split()[3].split(":")[0])
    host = job["tunnel"].rsplit(" ", 1)[1]
    board = {"url": job["url"], "port": port, "host": host, "ssh_tunnel": job["tunnel"], "jobs": [job["id"]]}
    return TensorBoardDialog(board, title=f"Notebook of session {job['id']}")


KeyGroups = list[tuple[str, list[tuple[str, str]]]]
"""What a screen's `?` shows: (group, [(keys, what they do)])."""

ANYWHERE: KeyGroups = [
    ("Anywhere", [("?", "these keys"), ("ctrl+p", "command palette"), ("q", "back (quit on the jobs table)")])
]


class KeysHelp(ModalScreen[None]):
    """gpudeck's keys for the screen below it, grouped and scrollable (not Textual's generic widget bindings)."""

    BINDINGS = [
        Binding("escape,question_mark,q,enter", "app.pop_screen", "Close"),
        Binding("end,G", "scroll('end')", "Last keys", show=False),
        Binding("home,g", "scroll('home')", "First keys", show=False),
        Binding("pagedown,space", "scroll('page_down')", "Page down", show=False),
        Binding("pageup", "scroll('page_up')", "Page up", show=False),
        Binding("down,j", "scroll('down')", "Down", show=False),
        Binding("up,k", "scroll('up')", "Up", show=False),
    ]

    def action_scroll(self, where: str) -> None:
        """The keys' list scrolled: to its end or start, a page or a line (it scrolled only with the mouse, and
        `End` did nothing, issue 64)."""
        box = self.query_one("#keys-help VerticalScroll", VerticalScroll)
        getattr(box, f"scroll_{where}")(animate=False)

    def __init__(self, title: str, groups: KeyGroups):
        super().__init__()
        self.title_text, self.groups = title, groups + ANYWHERE

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="keys-help"):
            yield Label(f"Keys: {self.title_text}", classes="title")
            with VerticalScroll():
                for group, keys in self.groups:
                    yield Label(group, classes="keys-group")
                    width = max(len(k) for k, _ in keys)
                    yield Static("\n".join(f"  {k:<{width}}  {what}" for k, what in keys))
            yield Static("esc closes", classes="keys-hint")
