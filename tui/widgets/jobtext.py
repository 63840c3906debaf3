"""A job's screen as text: its header (what it runs, laid out so a line breaks between parts, never inside one, its
progress and what it uses), the numbers above its curves, its result, and its config as aligned fields. Plain data
in, rich Text out; tui.screens.job draws them."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from rich.text import Text

from tui.logtext import fold
from tui.widgets.fmt import (
    RICH_COLOR,
    WARNED,
    bar,
    duration,
    expected_text,
    gpu_life_text,
    gpus_text,
    in_line,
    num,
    one_line,
    over_attempts,
    priority_text,
    slurm_text,
    status,
    usage_text,
    value_of,
    who,
)


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


def header_text(job: dict[str, Any], width: int) -> Text:
    """A job's header at `width` cells: which job, its state, what it runs on which GPUs, its tasks; its progress,
    time (over every attempt), eta, loss, place in line and expected duration; what it uses, its message and
    warning."""
    p = job.get("progress") or {}
    tasks = "".join(f"\n  {t['type']}:{t['task_index']} {t['status']} on {t['worker']}" for t in job.get("tasks") or [])
    state = status(job["status"], None, job.get("warning"))
    if job.get("reason"):
        state.append(f" ({job['reason']})", style="red")
    head = flow(
        [
            Text(f"job {job['id']}  {one_line(job.get('name'), 40)}", style="bold"),
            state,
            Text.assemble("priority ", priority_text(job)),
            *([Text(f"{who(job)}", "cyan")] if job.get("owner") or job.get("project") else []),  # (alice/vision)
            Text(runs_text(job["spec"])),
            Text(f"{gpus_text(job)} on {job.get('worker') or '-'}"),
            *([Text(slurm_text(job["slurm"]), "cyan")] if job.get("slurm") else []),
        ],
        width,
    )
    spec = job["spec"]
    if spec.get("kind") == "session":  # (no steps, no loss: how long it has been up, and its limits)
        limits = (
            f"released after {duration(spec.get('idle')) or '-'} unused, ends after {duration(spec.get('max')) or '-'}"
        )
        progress = flow(
            [Text(f"up {duration(job.get('elapsed_s')) or '-'}"), Text(in_line(job)), Text(limits, "dim")], width
        )
    else:
        progress = _progress(job, p, width)
    return Text.assemble(
        head,
        tasks,
        "\n",
        progress,
        (f"\n{usage_text(job['usage'])}", "dim") if job.get("usage") else "",
        (f"\n{gpu_life_text(job)}", "dim") if job.get("gpu_life") else "",
        f"\n{job['message']}" if job.get("message") else "",
        (f"\n{WARNED} {job['warning']}", "yellow") if job.get("warning") else "",
    )


def _progress(job: dict[str, Any], p: dict[str, Any], width: int) -> Text:
    return flow(
        [
            Text(f"{bar(p.get('fraction'), 20)}  step {p.get('step') or 0}/{p.get('total_steps') or '?'}"),
            Text(f"elapsed {duration(job.get('elapsed_s')) or '-'}" + over_attempts(job)),
            Text(f"eta {duration(job.get('eta_s')) or '-'}") if job["status"] == "running" else Text(""),
            Text(f"loss {value_of(job.get('metrics'), 'loss') or '-'}"),
            Text(in_line(job)),
            Text(expected_text(job), style="dim"),
        ],
        width,
    )


CURVE_LABELS = (
    ("loss", "train loss"),
    ("val_loss", "val loss"),
    ("accuracy", "train acc"),
    ("val_accuracy", "val acc"),
)


def curves_text(points: list[dict[str, Any]], runs: list[str], shown: str | None, colors: dict[str, str]) -> Text:
    """One line a metric of the run `shown` (`points`: its points): first -> last value, its min and max, how many
    points, in its chart's colour (the legend); which run of `runs` it is when there are several."""
    out = Text()
    for key, label in CURVE_LABELS:
        values = [p[key] for p in points if isinstance(p.get(key), (int, float))]
        bad = [p["step"] for p in points if key in (p.get("nonfinite") or {})]
        if not values and not bad:
            continue
        out.append(f"{label:>9} ━ ", style=f"bold {RICH_COLOR.get(colors[key], colors[key])}")  # (the legend)
        if values:
            lo, hi = min(values), max(values)
            out.append(f"{num(values[0])} → {num(values[-1])} (min {num(lo)}, max {num(hi)}, {len(values)} points)")
        if bad:
            out.append(f"  not finite from step {bad[0]}", style="red")
        out.append("\n")
    if len(runs) > 1 and shown in runs:  # a script that trained several times: one training at a time
        out.append(f"run {shown} ({runs.index(shown) + 1} of {len(runs)}; R: next)  ", "bold")
    out.append("l: loss on a log or linear scale", style="dim")
    return out if points else Text("no metric points yet")


def result_text(job: dict[str, Any]) -> Text:
    """A job's result (and its warning), or why it has none: a failure's reason, message and log tail."""
    if job.get("result"):
        result = job["result"]
        shown = [k for k in result if k not in ("nonfinite", "warning")]
        text = Text("\n".join(f"{k:>15}  {value_of(result, k)}" for k in shown))
        if job.get("warning"):
            text.append(f"\n\n{WARNED} {job['warning']}", style="yellow")
        return text
    if job["status"] in ("failed", "canceled"):
        tail = "\n".join(fold(job.get("log_tail") or []))  # (TensorFlow's start-up lines as one)
        return Text(f"{job['status']}: {job.get('reason')}\n{job.get('message') or ''}\n\n{tail}", style="red")
    return Text("no result yet")
