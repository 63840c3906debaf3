"""How values look in the TUI: status colours, text progress bars, sparklines, durations; None is n/a."""

from __future__ import annotations

from typing import Any

from rich.text import Text

STATUS_STYLE = {
    "queued": "yellow",
    "starting": "cyan",
    "running": "bold cyan",
    "succeeded": "green",
    "failed": "bold red",
    "canceled": "magenta",
}
ENDED = ("succeeded", "failed", "canceled")
ACTIVE = ("queued", "starting", "running")
BLOCKS = "▁▂▃▄▅▆▇█"
NA = "n/a"


def status(value: str) -> Text:
    return Text(value, style=STATUS_STYLE.get(value, ""))


def bar(fraction: float | None, width: int = 10) -> str:
    """`████░░░░░░  40%`; blank when unknown."""
    if fraction is None:
        return ""
    fraction = min(max(fraction, 0.0), 1.0)
    full = int(round(fraction * width))
    return "█" * full + "░" * (width - full) + f" {fraction * 100:3.0f}%"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def num(value: Any, digits: int = 4) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


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


def what(spec: dict[str, Any], words: int = 3) -> str:
    """What a job runs, for the MODEL column: its model, or `$ ` and the first words of its command."""
    if spec.get("command") is None:
        return str(spec.get("model"))
    cmd = spec["command"]
    parts = cmd.split() if isinstance(cmd, str) else list(cmd)
    return "$ " + " ".join(parts[:words])


def job_cells(job: dict[str, Any]) -> dict[str, Any]:
    """One jobs-table row, by column key."""
    p = job.get("progress") or {}
    metrics = job.get("metrics") or {}
    result = job.get("result") or {}
    acc = result.get("test_accuracy", result.get("val_accuracy", metrics.get("accuracy")))
    gpus = job.get("gpu_ids")
    return {
        "id": job["id"],
        "name": str(job.get("name") or "")[:24],
        "model": what(job["spec"]),
        "status": status(job["status"]),
        "progress": bar(p.get("fraction")),
        "loss": num(metrics.get("loss")),
        "acc": num(acc),
        "gpu": ",".join(gpus) if gpus else ("cpu" if job["spec"].get("gpus") == 0 else f"×{job['spec'].get('gpus')}"),
        "elapsed": duration(job.get("elapsed_s")),
        "eta": duration(job.get("eta_s")) if job["status"] == "running" else "",
    }
