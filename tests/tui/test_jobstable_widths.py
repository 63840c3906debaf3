"""The jobs table's column widths kept as rows are written and removed (tui.widgets.jobstable.Widths), against
measuring every cell of every row each time, which is what it replaced (issue 64: 60 % of the TUI's idle CPU)."""

from __future__ import annotations

import random

from rich.cells import cell_len

from tui.widgets.jobstable import Widths


def measured(rows: dict[int, tuple[dict[str, str], dict[str, int]]]) -> dict[str, int]:
    natural: dict[str, int] = {}
    for texts, full in rows.values():
        for key, text in (*texts.items(), *full.items()):
            natural[key] = max(natural.get(key, 0), cell_len(text) if isinstance(text, str) else text)
    return natural


def test_each_columns_widest_cell_follows_rows_written_rewritten_and_removed():
    rng = random.Random(7)
    widths, rows = Widths(), {}
    for _ in range(3000):
        row = rng.randrange(60)
        if rng.random() < 0.3:
            widths.drop(row)
            rows.pop(row, None)
        else:
            texts = {"id": str(row), "name": "n" * rng.randrange(1, 30), "eta": rng.choice(["", "eta 5m", "—", "日本"])}
            full = {"name": rng.randrange(1, 60)} if rng.random() < 0.5 else {}
            widths.set(row, texts, full)
            rows[row] = (texts, full)
        assert widths.natural() == measured(rows)
    widths.clear()
    assert widths.natural() == {}
