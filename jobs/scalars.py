"""Metric points of a command job, read while it runs from what the script writes into its job dir, with no
change to the script: TensorBoard event files (tf.summary, the Keras TensorBoard callback, any writer of the
format; scalars stored as `simple_value` or as tensors) and `metrics.jsonl` lines in the zoo's point schema.

Event files are read incrementally with the `tensorboard` package's loader, on its pure-Python record reader:
the work-horse never imports TensorFlow. What was read is remembered in `$JOB_DIR/.gpudeck/scalars.json`, so a
retried attempt (same job dir) does not send the first attempt's points again.
"""

from __future__ import annotations

import errno
import importlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from jobs import jobfiles, tbnotf

log = logging.getLogger(__name__)

EVENT_FILE_MARK = "tfevents"
METRICS_FILE = "metrics.jsonl"
STATE_FILE = ".gpudeck/scalars.json"
SKIP_DIRS = (".gpudeck",)
"""Folders of the job dir not searched for event files."""
VALIDATION_RUNS = ("validation", "eval", "evaluation", "val", "test")
"""A run folder with one of these names holds validation scalars: they become `val_*`."""
NAMES = {
    "loss": "loss",
    "accuracy": "accuracy",
    "acc": "accuracy",
    "sparse_categorical_accuracy": "accuracy",
    "categorical_accuracy": "accuracy",
    "learning_rate": "lr",
    "lr": "lr",
}
"""Tag (after an `epoch_`/`batch_` prefix) -> point field; every other scalar keeps its own name."""


def _loader_module() -> Any:
    """tensorboard's event-file loader on its TensorFlow-free record reader (jobs.tbnotf); this process has no
    other use for TF."""
    tbnotf.use_stub()
    return importlib.import_module("tensorboard.backend.event_processing.event_file_loader")


def run_of(rel: str) -> str:
    """The run an event file belongs to, by its folder in the job dir: a `train`/`validation` pair is one run
    (Keras' callback writes `logs/fit/<time>/train` and `…/validation`: run `logs/fit/<time>`); `.` for the job
    dir itself."""
    folder = Path(rel).parent
    if folder.name == "train" or folder.name in VALIDATION_RUNS:
        folder = folder.parent
    return str(folder)


def field_name(tag: str, validation: bool) -> str:
    """The point field a scalar tag becomes (`epoch_loss` in a validation run -> `val_loss`)."""
    base = tag
    for prefix in ("epoch_", "batch_"):
        if base.startswith(prefix):
            base = base[len(prefix) :]
            break
    name = NAMES.get(base, tag)
    if validation and not name.startswith("val_"):
        name = "val_" + name
    return name


def _scalar(value: Any) -> float | None:
    """A summary value's number when it is a scalar (simple_value, or a one-element numeric tensor)."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if not value.HasField("tensor"):
        return None
    from tensorboard.util import tensor_util

    try:
        arr = tensor_util.make_ndarray(value.tensor)
    except (ValueError, TypeError):
        return None
    if arr.size != 1 or arr.dtype.kind not in "fiub":
        return None
    return float(arr.reshape(()))


class ScalarReader:
    """Reads what a job's script has written since the last call; call `poll()` every second or so."""

    def __init__(self, job_dir: Path, ignore: set[str] | frozenset[str] = frozenset()):
        """`ignore`: event files (relative to job_dir) that are not this job's, such as ones shipped with its
        source."""
        self.job_dir = job_dir
        self.ignore = ignore
        self.loaders: dict[str, Any] = {}
        self.held: dict[str, int] = {}
        """Each event file's descriptor (jobs.jobfiles: opened through no link), which its loader reads by
        /proc/self/fd/N for the attempt's life."""
        self.plugins: dict[tuple[str, str], str] = {}
        try:
            self.state: dict[str, int] = json.loads(jobfiles.read_text(job_dir, STATE_FILE, 1 << 20))
        except (OSError, ValueError):
            self.state = {}
        if not isinstance(self.state, dict):
            self.state = {}
        self.skip = dict(self.state)  # records read by an earlier attempt: read again, not sent again
        self.counts: dict[str, int] = {}
        self.last: dict[str, float] = {}
        self.last_by_run: dict[str, dict[str, float]] = {}
        """Each run's last value of each scalar, the runs in the order their first point was read."""
        self.max_step: int | None = None

    def _event_files(self) -> list[str]:
        """The event files of the job dir (regular files reached through no link), relative to it."""
        found = jobfiles.walk(self.job_dir, skip=SKIP_DIRS, wanted=lambda name: EVENT_FILE_MARK in name)
        return [rel for rel, _ in found if rel not in self.ignore]

    def close(self) -> None:
        """Let go of the event files held open."""
        for fd in self.held.values():
            os.close(fd)
        self.held.clear()
        self.loaders.clear()

    def poll(self) -> list[dict[str, Any]]:
        """New metric points, one per (run, step) read now, in file order."""
        points: list[dict[str, Any]] = []
        for rel in self._event_files():
            points.extend(self._read_events(rel))
        points.extend(self._read_jsonl())
        for p in points:
            values = {k: v for k, v in p.items() if k not in ("step", "epoch", "time", "run")}
            self.last.update(values)
            self.last_by_run.setdefault(p.get("run", ""), {}).update(values)
            if isinstance(p.get("step"), int):
                self.max_step = p["step"] if self.max_step is None else max(self.max_step, p["step"])
        return points

    def save(self) -> None:
        """Remember what was read (after its points are stored), for a later attempt in the same job dir."""
        try:  # (through no link the job left: jobs.jobfiles)
            jobfiles.write_text(self.job_dir, STATE_FILE, json.dumps(self.state), make=True)
        except jobfiles.Refused as exc:  # (the job made .gpudeck a link: not followed, the state stays in memory)
            log.warning("the scalars' state is not saved: %s", exc)
        except OSError as exc:  # a full disk: the state stays in memory (a later attempt rereads a little more)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise

    def _read_events(self, rel: str) -> list[dict[str, Any]]:
        path = self.job_dir / rel
        loader = self.loaders.get(rel)
        if loader is None:
            try:
                fd = self.held.get(rel)
                if fd is None:
                    fd = self.held[rel] = jobfiles.open_file(self.job_dir, rel)
                loader = self.loaders[rel] = _loader_module().EventFileLoader(jobfiles.fd_path(fd))
            except Exception as exc:  # noqa: BLE001 - a file the script is still creating, or not an event file
                log.debug("cannot open event file %s yet: %s", path, exc)
                return []
        validation = any(part in VALIDATION_RUNS for part in Path(rel).parent.parts)
        grouped: dict[int, dict[str, Any]] = {}
        n = self.counts.get(rel, 0)
        try:
            for event in loader.Load():
                n += 1
                if n <= self.skip.get(rel, 0):
                    continue
                for value in event.summary.value:
                    plugin = value.metadata.plugin_data.plugin_name
                    if plugin:
                        self.plugins[(rel, value.tag)] = plugin
                    if self.plugins.get((rel, value.tag), "scalars") != "scalars":
                        continue
                    number = _scalar(value)
                    if number is None or not math.isfinite(number):
                        continue
                    point = grouped.setdefault(int(event.step), {"step": int(event.step), "run": run_of(rel)})
                    point[field_name(value.tag, validation)] = number
                    if event.wall_time > 0:  # (when it was written: MLflow's and compare's time axis)
                        point["time"] = max(point.get("time", 0.0), round(float(event.wall_time), 3))
        except Exception as exc:  # noqa: BLE001 - a damaged record: keep what was read, try again later
            log.warning("event file %s: %s", path, exc)
        self.counts[rel] = n
        self.state[rel] = max(n, self.skip.get(rel, 0))
        return list(grouped.values())

    def _read_jsonl(self) -> list[dict[str, Any]]:
        offset = self.state.get(METRICS_FILE, 0)
        try:
            data = jobfiles.read_from(self.job_dir, METRICS_FILE, offset)
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        now = time.time()
        self.state[METRICS_FILE] = offset + len(complete)
        points = []
        for line in complete.splitlines():
            try:
                point = json.loads(line)
            except ValueError:
                log.warning("metrics.jsonl: not a JSON line: %r", line[:200])
                continue
            if isinstance(point, dict) and isinstance(point.get("step"), int):
                numbers = {k: v for k, v in point.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                numbers.setdefault("time", round(now, 3))  # (a line without its time: when it was read, ≤ 1 s on)
                points.append(numbers)
        return points


def newest_run_result(reader: ScalarReader | None) -> dict[str, float]:
    """A command job's result when it wrote no result.json: the last value of each scalar of its newest run (a
    script that trained twice: the second training's, not a mix of both)."""
    if reader is None or not reader.last_by_run:
        return {}
    runs = [r for r in reader.last_by_run if r]  # event-file runs, in the order they began
    return dict(reader.last_by_run[runs[-1]] if runs else reader.last)


def read_result(job_dir: Path) -> dict[str, Any] | None:
    """A script's `$JOB_DIR/result.json` when it wrote one (an object), else None."""
    try:  # (a regular file reached through no link, at most 16 MiB: jobs.jobfiles)
        result = json.loads(jobfiles.read_bytes(job_dir, "result.json", 16 << 20))
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None
