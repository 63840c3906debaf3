"""Helpers of TUI tests driven through Textual's Pilot: wait for a condition, for a screen, read a widget's text."""

from __future__ import annotations

import io
import time

from rich.console import Console


async def until(pilot, check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.1)


async def on_screen(pilot, app, cls, check=lambda screen: True, timeout: float = 60.0):
    """The app's screen once it is a mounted `cls` for which `check` holds."""
    screen = await until(
        pilot,
        lambda: isinstance(app.screen, cls) and app.screen.is_mounted and check(app.screen) and app.screen,
        timeout,
    )
    # Settled: its events processed and, where it has something to focus, the focus moved to it. (A key pressed
    # before that, on a loaded box, was seen to go nowhere: a Confirm stayed up for a minute after `y`.)
    await pilot.pause()
    await until(pilot, lambda: screen.focused is not None or not screen.focus_chain, timeout)
    await pilot.pause(0.05)
    return screen


def text_of(widget) -> str:
    """What a Static or Label shows, as plain text (rich renderables rendered at 120 columns)."""
    content = widget.content
    if isinstance(content, str):
        return content
    console = Console(width=120, file=io.StringIO(), record=True)
    console.print(content)
    return console.export_text()


def footer_overlaps(screen, width: int) -> list[str]:
    """The footer's keys that overlap the next one or run past `width` columns (Textual's footer draws the command
    palette's key over the right end: `t Tens▏` was cut by it at 80 columns); empty when every key reads whole."""
    keys = sorted(((k.region.x, k.region.right, k.description) for k in screen.query("FooterKey")), key=lambda k: k[0])
    over = [a[2] for a, b in zip(keys, keys[1:]) if a[1] > b[0]]
    return over + [k[2] for k in keys if k[1] > width]
