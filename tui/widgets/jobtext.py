"""A job's screen as text: its header's parts (what it runs, laid out so a line breaks between parts, never inside
one) and its config as aligned fields. Plain text in, rich Text out; tui.screens.job draws them."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from rich.text import Text

from tui.widgets.fmt import one_line


def fields_text(config: dict[str, Any]) -> Text:
    """A job's config as aligned `key  value` lines, nested keys dotted (`params.lr`), lists on one line, and a
    content address shortened to its first 12 hex digits (a 64-digit ref took a line of its own)."""
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        if isinstance(value, list):
            text = " ".join(shlex.quote(str(v)) for v in value) if prefix.endswith("command") else json.dumps(value)
        elif isinstance(value, str):
            text = re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}\b", r"\1…", value)
        else:
            text = json.dumps(value)
        rows.append((prefix, text))

    walk("", config)
    width = max((len(k) for k, _ in rows), default=0)
    out = Text()
    for i, (key, value) in enumerate(rows):
        out.append(("\n" if i else "") + f"{key:>{width}}  ", style="bold")
        out.append(value)
    return out


def runs_text(spec: dict[str, Any]) -> str:
    """What the job runs, for its header: `resnet20 on synthetic`; a command as a shell shows it, quoted, an inline
    script by its first line (`$ python -c 'import json, os …'`), and its dataset when it names one."""
    if spec.get("kind") == "session":
        return "a notebook session (Jupyter)" if spec.get("jupyter") else "a shell session"
    if spec.get("command") is None:
        return f"{spec.get('model')} on {spec.get('dataset') or '-'}"
    cmd = spec["command"]
    if isinstance(cmd, str):
        shown = one_line(cmd, 60)
    else:
        args = [
            a.strip().splitlines()[0] + (" …" if len(a.strip().splitlines()) > 1 else "") if a.strip() else a
            for a in cmd
        ]
        shown = one_line(" ".join(shlex.quote(a) for a in args), 60)
    return f"$ {shown}" + (f" on {spec['dataset']}" if spec.get("dataset") else "")


def flow(parts: list[Text], width: int, gap: str = "  ") -> Text:
    """`parts` on lines of at most `width` cells, `gap` between them, broken between parts, never inside one (a
    header wrapped mid-value read `gpus⏎0`); empty parts are left out."""
    out, used = Text(), 0
    for part in (p for p in parts if p.plain):
        if used and used + len(gap) + part.cell_len > width:
            out.append("\n")
            used = 0
        elif used:
            out.append(gap)
            used += len(gap)
        out.append_text(part)
        used += part.cell_len
    return out
