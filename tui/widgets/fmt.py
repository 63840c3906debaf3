"""How values look in the TUI: status colours, text progress bars, sparklines, durations; None is n/a."""

from __future__ import annotations

import getpass
import math
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.cells import cell_len
from rich.text import Text

from models.common import duration, size_text  # noqa: F401 (duration: its old home; the screens and the CLI take it from here)
from models.sourcetree import human
from models.states import ENDED, UNENDED  # noqa: F401 (the screens take them from here)

STATUS_STYLE = {
    "queued": "yellow",
    "starting": "cyan",
    "running": "bold cyan",
    "succeeded": "green",
    "failed": "bold red",
    "canceled": "magenta",
    "stopped": "green",
    "released": "green",
}
BLOCKS = "▁▂▃▄▅▆▇█"
NA = "n/a"


REASON_SHORT = {
    "exit_nonzero": "exit",
    "worker_lost": "lost",
    "bad_input": "input",
    "canceled": "",
    "disk_full": "disk",
    "dependency_failed": "after",
}
"""A failed job's reason as the jobs table marks it (`failed·oom`, `✗ timeout` at 80 columns); the rest keep their
names, each short enough to be read whole."""
FAILED_MARK = "✗ "
"""At 80 columns a failed job's status is its reason after this mark (red): `✗ diverged`, not `failed·dive…`."""


WARNED = "⚠"
"""Beside the status of a job that ended normally with a warning (a loss that diverged without a NaN)."""


SHOWN_AS = {("succeeded", "stopped_early"): "stopped", ("canceled", "idle"): "released"}
"""How tables show a job that ended so: a trial its search stopped early (it succeeded), a session released when
idle (gpudeck canceled it)."""


def shown_status(job: dict[str, Any]) -> str:
    """A job's status as tables show it: `stopped` for a trial its search stopped early, `released` for an idle
    session."""
    return SHOWN_AS.get((job["status"], job.get("reason")), job["status"])


def status(value: str, reason: str | None = None, warning: str | None = None) -> Text:
    """A status in its colour; a failed one marked with why (`failed·timeout`), a warned one with ⚠."""
    value = SHOWN_AS.get((value, reason), value)  # not a failure, not run to its end
    short = REASON_SHORT.get(reason, reason) if reason and value == "failed" else ""
    text = Text(f"{value}·{short}" if short else value, style=STATUS_STYLE.get(value, ""))
    if warning:
        text.append(WARNED, style="bold yellow")
    return text


def bar(fraction: float | None, width: int = 10) -> str:
    """`████░░░░░░  40%`; blank when unknown."""
    if fraction is None:
        return ""
    fraction = min(max(fraction, 0.0), 1.0)
    full = int(round(fraction * width))
    return "█" * full + "░" * (width - full) + f" {fraction * 100:3.0f}%"


def as_me(ssh_line: str) -> str:
    """An API's `ssh … HOST` line (a TensorBoard's or a notebook's tunnel) with this user's name before the host."""
    head, _, host = ssh_line.rpartition(" ")
    return f"{head} {getpass.getuser()}@{host}"


def num(value: Any, digits: int = 4, sci: int = 3) -> str:
    """A metric: `digits` decimals, in e-notation (`sci` decimals at most) past a million or below a thousandth (a
    loss of 6.4e+32 is not 33 digits and `.0000`)."""
    if value is None:
        return ""
    if isinstance(value, float):
        if value and math.isfinite(value) and not 1e-3 <= abs(value) < 1e6:
            return f"{value:.{min(digits, sci)}e}"
        return f"{value:.{digits}f}"
    return str(value)


UNITS: dict[str, Any] = {
    "duration_s": lambda v: duration(v) if v >= 60 else f"{v:.1f}s",
    "images_per_sec": lambda v: f"{v:,.1f}",
    "epochs": lambda v: f"{v:g}",
    "lr": lambda v: f"{v:g}",
    "epoch": lambda v: f"{v:g}",
}
"""Values that are not a metric to 4 decimals: a duration, a rate, a count of epochs, a learning rate."""


def value_of(obj: dict[str, Any] | None, key: str, digits: int = 4, sci: int = 3) -> str:
    """A number of an answer's object (`metrics`, `result`, a point) as text: `nan`/`inf` where the API answered
    null and named the field in `nonfinite`; empty when there is none."""
    obj = obj or {}
    value = obj.get(key)
    if key in UNITS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return UNITS[key](value)
    return (obj.get("nonfinite") or {}).get(key) or num(value, digits, sci)


def na(value: Any, unit: str = "", digits: int = 0) -> str:
    """A GPU reading, or n/a where nvidia-smi said [N/A]."""
    if value is None:
        return NA
    return f"{value:.{digits}f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def sparkline(values: list[float | None], width: int = 20, top: float = 100.0) -> str:
    """The last `width` values as block characters (a gap where unknown)."""
    out = []
    for v in values[-width:]:
        out.append(" " if v is None else BLOCKS[min(len(BLOCKS) - 1, int(max(v, 0) / top * (len(BLOCKS) - 1) + 0.5))])
    return "".join(out)


def keep_tail(name: str, width: int) -> str:
    """A job's name in `width` cells, keeping what tells it from its neighbours: a sweep's runs (`lrsweep lr=0.1
    model=lenet`) keep their swept values, the keys dropped (`lrsweep 0.1 lenet`), then the base cut
    (`lrs… 0.1 lenet`); other names are cut at the end."""
    name = one_line(name, 10_000)
    if len(name) <= width:
        return name
    words = name.split()
    pairs = [w for w in words if re.fullmatch(r"[\w.\-]+=[^\s\"'{}\[\]=]+", w)]
    if not pairs or any("=" in w for w in words if w not in pairs):  # (a value with spaces or JSON: cut it)
        return one_line(name, width)
    base = " ".join(w for w in words if w not in pairs)
    values = " ".join(w.split("=", 1)[1] for w in pairs)
    if len(f"{base} {values}") <= width:
        return f"{base} {values}".strip()
    room = width - len(values) - 2  # the base's head, `…` and a space
    if room >= 1 and base:
        return f"{base[:room]}… {values}"
    # (no room for the base: an ellipsis says a name was cut, not that the job is named `0.1000` — issue 67 #7)
    return one_line(f"…{values}" if base else values, width)


def one_line(text: Any, width: int = 40) -> str:
    """`text` on one line: its first line, runs of spaces as one, cut to `width` with an ellipsis."""
    first = " ".join(str(text).strip().splitlines()[0].split()) if str(text).strip() else ""
    return first if len(first) <= width else first[: width - 1] + "…"


def what(spec: dict[str, Any], words: int = 3) -> str:
    """What a job runs, for the MODEL column: its model, or `$ ` and the first words of its command (a script
    given inline, `python -c "..."`, by its first line)."""
    if spec.get("kind") == "session":
        return "notebook session" if spec.get("jupyter") else "shell session"
    if spec.get("command") is None:
        return str(spec.get("model"))
    cmd = spec["command"]
    parts = cmd.split() if isinstance(cmd, str) else [one_line(a, 30) for a in cmd]
    return one_line("$ " + " ".join(parts[:words]), 60)


ACCURACY_SOURCES = (
    ("result", "test_accuracy", "test"),
    ("result", "val_accuracy", "val"),
    ("metrics", "val_accuracy", "val"),
    ("metrics", "accuracy", "batch"),
)
"""Where a job's accuracy comes from, best first, and the word shown beside it: the test set once it has ended,
the validation set (its result, or its last validation point: a trial stopped early has no result of its own),
or the training batches of the last metric point while it runs."""
KINDS = ("test", "val", "batch")


def accuracy(job: dict[str, Any], kind: str | None = None) -> tuple[float | None, str]:
    """(accuracy, which: test, val or batch), or (None, ""); `kind`: that kind only."""
    for part, key, which in ACCURACY_SOURCES:
        value = (job.get(part) or {}).get(key)
        if (kind is None or which == kind) and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value), which
    return None, ""


def accuracy_text(job: dict[str, Any], kind: str | None = None) -> str:
    """`0.9120 test`, `0.8800 batch`: the number and what it measures; empty when there is none."""
    value, which = accuracy(job, kind)
    return "" if value is None else f"{value:.4f} {which}"


def sweep_kinds(jobs: Sequence[dict[str, Any]]) -> dict[int, str]:
    """job id -> the accuracy kind to show it by, for the jobs of a sweep: the best kind every one of its jobs here
    has (a trial stopped early has no test accuracy: its finished siblings are shown by their validation accuracy
    too, so that the column compares like with like). Jobs of no sweep, or of a sweep with no kind in common, are
    not in it."""
    by_sweep: dict[int, list[dict[str, Any]]] = {}
    for job in jobs:
        if job.get("sweep_id") is not None:
            by_sweep.setdefault(job["sweep_id"], []).append(job)
    out: dict[int, str] = {}
    for members in by_sweep.values():
        have = [
            {which for part, key, which in ACCURACY_SOURCES if _number((j.get(part) or {}).get(key))} for j in members
        ]
        common = next((k for k in KINDS if all(k in h for h in have if h)), None)
        if common is not None and len(members) > 1:
            out.update({j["id"]: common for j in members})
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def gpus_text(job: dict[str, Any]) -> str:
    """Which GPUs, in a form that cannot be mistaken for another: `cpu` (a job that asks for none), `2 GPUs` (a
    count, before it is placed), `GPU 0` / `GPU 0,1` (the indices it holds); a share of one says how much:
    `10G of GPU 0`, `10G of a GPU`."""
    held = job.get("gpu_ids") or [] if job.get("status") != "queued" else []  # (a preempted job in line again
    part = job["spec"].get("gpu_memory")  # holds no GPU: the one it had is another's now — issue 67 #7)
    if held:
        return (f"{size_text(part)} of " if part else "") + f"GPU {','.join(map(str, held))}"
    if part:
        return f"{size_text(part)} of a GPU"
    wanted = job["spec"].get("gpus") or 0
    return "cpu" if wanted == 0 else f"{wanted} GPU{'s' if wanted != 1 else ''}"


def progress_of(p: dict[str, Any]) -> str:
    """`120/5000`: the step of a progress object out of its total (`-/10` before the first step is known)."""
    step = p.get("step")
    return f"{step if step is not None else '-'}/{p.get('total_steps')}"


PRIORITY_MARK = {"high": "↑", "low": "↓"}
"""A priority in the 80-column table (normal: nothing), beside the id."""
PRIORITY_STYLE = {"high": "bold", "normal": "dim", "low": ""}


def priority_text(job: dict[str, Any]) -> Text:
    """A job's priority as the wide table and the job's header show it: `high`, `normal` (dim), `low`."""
    value = (job.get("spec") or {}).get("priority") or "normal"
    return Text(value, style=PRIORITY_STYLE.get(value, ""))


def who(job: dict[str, Any]) -> str:
    """A job's owner and its project: alice/vision (a job of no project: alice; of nobody: empty)."""
    owner, project = job.get("owner") or "", job.get("project")
    return f"{owner or '-'}/{project}" if project else owner


def uncut(job: dict[str, Any]) -> dict[str, int]:
    """How wide a job's name, owner and model cells would be, uncut (what the table shrinks to fit)."""
    return {
        "name": cell_len(one_line(job.get("name") or "", 10_000)),
        "owner": cell_len(who(job)),
        "model": cell_len(what(job["spec"])),
    }


def job_cells(
    job: dict[str, Any], compact: bool = False, caps: dict[str, int] | None = None, kind: str | None = None
) -> dict[str, Any]:
    """One jobs-table row, by column key; `compact`: the narrow forms of an 80-column table (a shorter bar,
    three decimals, a short place in line, elapsed and ETA in one `time` cell); `caps`: the width the name, owner
    and model are cut to (else 12, 6, 12 compact; 24, 12, 16); `kind`: the accuracy shown (sweep_kinds)."""
    caps = caps or {}
    p = job.get("progress") or {}
    metrics = job.get("metrics") or {}
    eta = duration(job.get("eta_s")) if job["status"] == "running" else ""
    value, which = accuracy(job, kind)
    state = status(job["status"], job.get("reason"), job.get("warning"))
    if compact and job["status"] == "failed":
        reason = job.get("reason")
        state = Text(FAILED_MARK + (REASON_SHORT.get(reason, reason) or "failed"), style=state.style)
    return {
        "id": job["id"],
        "owner": one_line(who(job), caps.get("owner", 6 if compact else 12)),
        "name": keep_tail(job.get("name") or "", caps.get("name", 12 if compact else 24)),
        "model": one_line(what(job["spec"]), caps.get("model", 12 if compact else 16)),
        "status": state,
        "priority": priority_text(job) if (job.get("spec") or {}).get("priority", "normal") != "normal" else "",
        "mark": PRIORITY_MARK.get((job.get("spec") or {}).get("priority") or "normal", ""),
        "progress": bar(p.get("fraction"), 5 if compact else 10) or in_line(job, short=True),
        "loss": value_of(metrics, "loss", 3 if compact else 4, sci=1 if compact else 3),
        "acc": (f"{value:.3f} {which}" if compact else f"{value:.4f} {which}") if value is not None else "",
        "gpu": gpus_text(job),
        "elapsed": duration(job.get("elapsed_s")) if job["status"] != "queued" else "",
        "eta": eta,
        # (in line again after a preemption: no elapsed time that grows while it waits — issue 67 #7)
        "time": f"eta {eta}" if eta else duration(job.get("elapsed_s")) if job["status"] != "queued" else "",
        "disk": Text(human(job["disk_bytes"]), justify="right") if job.get("disk_bytes") is not None else "",
    }


def usage_text(usage: dict[str, Any] | None) -> str:
    """What a running job's processes use: `cpu 187% · rss 1.2 GiB · 3 processes · gpu0 93% 10.1 GiB`; empty
    before the first sample."""
    if not usage:
        return ""
    parts = [
        f"cpu {usage['cpu_percent']:.0f}%" if usage.get("cpu_percent") is not None else "cpu …",
        f"rss {human(usage.get('rss_bytes') or 0)}",
        f"{usage.get('processes')} process{'' if usage.get('processes') == 1 else 'es'}",
    ]
    for g in usage.get("gpus") or []:
        mem = g.get("memory_used_mib")
        parts.append(
            f"gpu{g.get('index')} {na(g.get('utilization'), '%')} {human(mem * 2**20) if mem is not None else NA}"
        )
    return " · ".join(parts)


def gpu_life_text(job: dict[str, Any]) -> str:
    """A job's GPUs over its life so far: `GPU 37% mean, 12% of its GPU-time idle`; '' before the first reading."""
    life = job.get("gpu_life")
    if not life:
        return ""
    return f"GPU {life['mean_percent']:.0f}% mean, {life['idle_percent']:.0f}% of its GPU-time idle (under 5%)"


def in_line(job: dict[str, Any], short: bool = False) -> str:
    """`#3 in line, ~4m00s` for a queued job whose place (and expected start) the API knows, `quota` for one that
    waits for its owner's GPU quota (`waiting: alice holds 2 of 2 GPUs`), `after 12` for one that waits for its
    dependencies; else empty."""
    n = job.get("queue_position")
    if job.get("status") != "queued":
        return ""
    if " holds " in (job.get("message") or ""):
        return "quota"
    if not n and (job.get("spec") or {}).get("after"):
        return "after " + ",".join(map(str, job["spec"]["after"]))
    if not n:
        return ""
    left = starts_in(job)
    late = overdue(job) if left == 0 else 0.0
    if late >= LATE_S:  # (its expected start has passed and it still waits: no `~0s` for minutes — issue 67 #7)
        return f"#{n} late" if short else f"#{n} in line, {duration(late)} past its expected start"
    if short:  # (an 80-column table: `#3 ~4m00s`)
        return f"#{n}" + (f" ~{duration(left)}" if left is not None else " in line")
    return f"#{n} in line" + (f", ~{duration(left)}" if left is not None else "")


LATE_S = 30.0
"""A queued job this long past its expected start says so, rather than `~0s`."""


def overdue(job: dict[str, Any], now: float | None = None) -> float:
    """Seconds a queued job's expected start lies in the past (0 when it is ahead, or unknown)."""
    raw = job.get("expected_start")
    try:
        at = datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp() if raw else None
    except ValueError:
        at = None
    return max(0.0, (time.time() if now is None else now) - at) if at is not None else 0.0


EXPECTED_FROM = {
    "declared": "as declared",
    "history": "from its owner's past runs",
    "steps": "from its steps at the pace of its kind's runs",
    "kind": "from its owner's runs of its kind",
    "others": "from others' runs of its kind",
    "timeout": "its timeout",
}


def expected_text(job: dict[str, Any]) -> str:
    """How long a queued or running job is expected to run, and from what (what backfill plans with); '' unknown."""
    took, source = job.get("expected_duration_s"), job.get("expected_duration_source")
    if took is None:
        return ""
    runs, spread = job.get("expected_duration_runs"), job.get("expected_duration_spread_s")
    sure = (
        f", {runs} run{'s' if runs != 1 else ''}: {duration(spread[0])}–{duration(spread[1])}"
        if runs and spread
        else ""
    )
    return f"expected {duration(took)} ({EXPECTED_FROM.get(source or '', source)}{sure})"


def starts_in(job: dict[str, Any], now: float | None = None) -> float | None:
    """Seconds until a queued job's expected start (0 when it is due), or None without an estimate."""
    raw = job.get("expected_start")
    if not raw:
        return None
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return max(0.0, at - (time.time() if now is None else now))


class EtaSmoother:
    """ETAs that do not swing by minutes between two refreshes: each job's shown ETA moves a third of the way to
    the API's newest estimate, after counting down the time since the last one (a new job starts at its estimate).
    The same estimate again (the table re-sorted or re-filtered between two refreshes) only counts down."""

    WEIGHT = 1 / 3

    def __init__(self) -> None:
        self.shown: dict[int, tuple[float, float, float]] = {}  # job id -> (shown eta, when, the API's estimate)

    def __call__(self, job_id: int, eta: float | None, now: float) -> float | None:
        if eta is None:
            self.shown.pop(job_id, None)
            return None
        before = self.shown.get(job_id)
        if before is None:
            smooth = eta
        else:
            counted_down = max(0.0, before[0] - (now - before[1]))
            smooth = counted_down if eta == before[2] else counted_down * (1 - self.WEIGHT) + eta * self.WEIGHT
        self.shown[job_id] = (smooth, now, eta)
        return smooth


def id_list(ids: list[int], most: int = 8) -> str:
    """`job 7`, `jobs 3, 5–9, 12` (runs as ranges), and past `most` pieces `jobs 1–3, 5, … 990–999 (965 jobs)`:
    a confirmation names every job it acts on, or says how many, never cuts one off."""
    ids = sorted(set(ids))
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    pieces = [str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}–{b}" for a, b in runs]
    if len(pieces) > most:
        pieces = [*pieces[: most - 2], "…", pieces[-1]]
    count = f" ({len(ids)} jobs)" if len(ids) > 1 else ""
    return f"job{'s' if len(ids) > 1 else ''} {', '.join(pieces)}{count}"


RICH_COLOR = {"orange": "dark_orange", "white": "bright_white"}
"""A chart's line colour (plotext's name) as the text beside it says it (rich's name), where the two differ."""


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round values from `lo` to `hi` (1, 2 or 5 times a power of ten apart), for a chart's axis: no
    tick at 0.1732 and the next at 0.3464."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if (hi - lo) / (m * power) <= count)
    first = math.ceil(lo / step) * step
    if abs(first - step - lo) <= max(abs(lo), abs(hi)) * 1e-12:  # (lo a multiple of step, a hair above it)
        first -= step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_label(value: float, log10: bool = False) -> str:
    """A tick's text: the value (`0.25`, `1e+03`), or on a log10 axis the value it stands for (`1e-3`, `0.05`)."""
    shown = 10**value if log10 else value
    if shown != 0 and not 1e-3 <= abs(shown) < 1e5:
        return f"{shown:.0e}" if log10 and float(value).is_integer() else f"{shown:.2g}"
    return f"{shown:.4g}"


def axis_ticks(lo: float, hi: float, log10: bool = False, count: int = 5) -> tuple[list[float], list[str]]:
    """Where a chart's y ticks go and what they read, for values from `lo` to `hi`. On a log10 axis (the values are
    log10 of what is shown) the ticks are powers of ten when the curve spans a decade or more, else round values
    of what is shown (0.004, 0.006, …) at their logs."""
    if not log10:
        ticks = nice_ticks(lo, hi, count)
        return ticks, [tick_label(t) for t in ticks]
    if hi - lo >= 1:
        powers = list(range(math.ceil(lo - 1e-9), math.floor(hi + 1e-9) + 1))
        every = max(1, math.ceil(len(powers) / count))
        ticks = [float(p) for p in powers[::every]]
    else:
        ticks = [math.log10(v) for v in nice_ticks(10**lo, 10**hi, count) if v > 0]
    return ticks, [tick_label(t, log10=True) for t in ticks]


def over_attempts(job: dict[str, Any]) -> str:
    """What a job that ran more than once has run in all: ` (11m02s in all, 3 attempts, preempted 3×)`; else empty
    (elapsed is this attempt's: a preempted job would read as young)."""
    attempts, preempted = job.get("attempt") or 1, job.get("preemptions") or 0
    if attempts < 2 and not preempted:
        return ""
    parts = [f"{duration(job['ran_s'])} in all" if job.get("ran_s") else None, f"{attempts} attempts"]
    parts.append(f"preempted {preempted}×" if preempted else None)
    return " (" + ", ".join(p for p in parts if p) + ")"


def cordon_cause(why: dict[str, Any]) -> str:
    """Why a GPU is cordoned, as the API says it (`cordoned.cause`: `Xid 79`, or `by alice: fan noise`)."""
    return str(why.get("cause") or f"Xid {why.get('xid')}")


def gpu_amount(gpus: float) -> str:
    """GPUs held, a share counted as its part of a GPU: `2`, `1.13`, `0.25`."""
    return f"{round(float(gpus), 2):g}"


SHARE_COLUMNS = ("OWNER", "GPU-HOURS", "SHARE", "GPUS", "RUNNING", "QUEUED", "IDLE-GPU-H")


def share_rows(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """`GET /api/v1/share`'s owners as rows of SHARE_COLUMNS (least used first, as the scheduler orders them)."""
    return [
        (
            who(o) or "-",
            f"{o['usage_gpu_hours']:.2f}",
            f"{100 * o['share']:.1f}%",
            gpu_amount(o["gpus"]),
            o["running"],
            o["queued"],
            f"{o.get('idle_gpu_hours') or 0:.2f}",
        )
        for o in doc["owners"]
    ]


PROJECT_COLUMNS = ("PROJECT", "WEIGHT", "GPU-HOURS", "SHARE", "GPUS", "RUNNING", "QUEUED")


def project_rows(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """`GET /api/v1/share`'s projects as rows of PROJECT_COLUMNS (least used for its weight first)."""
    return [
        (p["project"], f"{p['weight']:g}", f"{p['usage_gpu_hours']:.2f}", f"{100 * p['share']:.1f}%",
         gpu_amount(p["gpus"]), p["running"], p["queued"])
        for p in doc.get("projects") or []
    ]  # fmt: skip


def share_rule(doc: dict[str, Any]) -> str:
    """How the line is ordered between people, and whether higher priorities preempt."""
    days = doc["halflife_s"] / 86400
    order = f"least used first (half-life {days:g} days)" if doc["fairshare"] else "first come, first served"
    preempt = f"after {duration(doc['preempt_after_s'])} of running" if doc.get("preempt") else "off"
    return f"within a priority: {order}; preemption of lower priorities: {preempt}"


def box_summary(share: dict[str, Any], workers: list[dict[str, Any]], me: dict[str, Any] | None) -> str:
    """The title bar's line, as k9s and htop have one: `3/4 GPUs busy · 5 queued · you: 2/2 GPUs` (a box without
    GPUs: `2/3 workers busy`; `you` only for a named token, with its GPU quota when it has one)."""
    owners = share.get("owners") or []
    live = [w for w in workers if w.get("alive")]
    gpus = {(w.get("host"), g) for w in live for g in w.get("gpus") or []}
    if gpus:
        parts = [f"{gpu_amount(min(sum(o['gpus'] for o in owners), len(gpus)))}/{len(gpus)} GPUs busy"]
    else:
        parts = [f"{sum(1 for w in live if w.get('job_id'))}/{len(live)} workers busy"]
    parts.append(f"{sum(o['queued'] for o in owners)} queued")
    if me and me.get("auth") == "named":
        mine = next((o for o in owners if o["owner"] == me.get("name")), None)
        held = gpu_amount(mine["gpus"] if mine else 0)
        cap = me.get("max_gpus")
        parts.append(f"you: {held}/{cap} GPUs" if cap is not None else f"you: {held} GPU{'' if held == '1' else 's'}")
    return " · ".join(parts)


def slurm_text(info: dict[str, Any]) -> str:
    """A job's Slurm job (on Slurm): `slurm job 12 PENDING (Resources)`."""
    reason = f" ({info['reason']})" if info.get("reason") and info["reason"] != "None" else ""
    return f"slurm job {info['id']} {info.get('state') or ''}{reason}".rstrip()
