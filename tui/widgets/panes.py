"""The job screen's own widgets: a chart that draws nothing rather than fail, and a log whose new lines cost no
layout of the whole screen; and how many rows a text takes (what decides whether a Static must be laid out)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Log
from textual_plotext import PlotextPlot


def _rows(content: str | Text, width: int) -> int:
    """How many rows `content` takes at `width` columns (its lines, each wrapped)."""
    plain = content.plain if isinstance(content, Text) else content
    return sum(max(1, -(-cell_len(line) // max(1, width))) for line in plain.split("\n"))


class Chart(PlotextPlot):
    """A plotext chart that draws nothing rather than fail where it has too little room (plotext indexes past
    its matrix when the legend does not fit) or nothing a log scale can show."""

    MIN_SIZE = (24, 8)

    def render(self):
        if self.size.width < self.MIN_SIZE[0] or self.size.height < self.MIN_SIZE[1]:
            return Text("(too small for a chart)", style="dim")
        try:
            return super().render()
        except (IndexError, ValueError):
            return Text("(nothing to draw here)", style="dim")


class FollowLog(Log):
    """A Log whose new lines cost no layout of the whole screen. Log.write_lines sets `virtual_size`, a reactive
    that lays out every widget of the screen again (~25 ms of CPU for each second a running job prints). A log's
    own size never depends on its lines, only its scrollable height does: updating the scrollbars (what Textual
    does for a size change without layout) is enough, unless a scrollbar appears or goes, which moves the rest."""

    _writing = False

    def write_lines(self, lines, scroll_end=None):  # noqa: ANN001, ANN201 - Log's signature
        self._writing = True
        try:
            return super().write_lines(lines, scroll_end)
        finally:
            self._writing = False

    def refresh(self, *regions, repaint: bool = True, layout: bool = False, recompose: bool = False):  # noqa: ANN201
        if layout and self._writing and not recompose and self.size.height:
            bars = (self.show_vertical_scrollbar, self.show_horizontal_scrollbar)
            self._scroll_update(self.virtual_size)
            layout = bars != (self.show_vertical_scrollbar, self.show_horizontal_scrollbar)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
