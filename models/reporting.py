"""Where training reports go: the log, metrics.jsonl, TensorBoard, and the job engine's event pipe."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import IO, Any

from models.protocol import EVENT_METRIC, EVENTS_FD_ENV

log = logging.getLogger("models.train")


class Reporter:
    """Fans one training event out to every sink; the trainer calls it, never the sinks directly."""

    def __init__(self, job_dir: Path, enabled: bool = True):
        """`enabled=False` (a non-chief task of a multi-worker job) keeps only the log lines."""
        self.job_dir = job_dir
        self.enabled = enabled
        self.metrics_file: IO[str] | None = (
            open(job_dir / "metrics.jsonl", "a", buffering=1) if enabled else None  # noqa: SIM115
        )
        fd = os.environ.get(EVENTS_FD_ENV)
        self.events: IO[str] | None = os.fdopen(int(fd), "w", buffering=1) if fd and enabled else None
        self._writers: dict[str, Any] = {}

    def event(self, kind: str, **data: Any) -> None:
        """Send an event (`running`, `result`, ...) to the job engine, if one is listening."""
        if self.events is not None:
            try:
                self.events.write(json.dumps({"event": kind, **data}) + "\n")
            except BrokenPipeError:  # the engine went away; training and the job dir carry on
                self.events = None

    def point(self, point: dict[str, Any], split: str = "train") -> None:
        """A metric point: one log line first (so the log is never behind the progress), then
        metrics.jsonl, the engine and TensorBoard scalars."""
        shown = " ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in point.items() if k != "time"
        )
        log.info("%s %s", split, shown)
        if self.metrics_file is not None:
            self.metrics_file.write(json.dumps(point) + "\n")
            self.event(EVENT_METRIC, **point)
            self._tensorboard(point, split)

    def _tensorboard(self, point: dict[str, Any], split: str) -> None:
        import tensorflow as tf

        writer = self._writers.get(split)
        if writer is None:
            writer = self._writers[split] = tf.summary.create_file_writer(str(self.job_dir / "tensorboard" / split))
        with writer.as_default(step=int(point["step"])):
            for key, value in point.items():
                if key in ("step", "epoch", "time") or not isinstance(value, (int, float)):
                    continue
                tf.summary.scalar(key.removeprefix("val_"), value)
        writer.flush()

    def close(self) -> None:
        """Flush and close every sink."""
        if self.metrics_file is not None:
            self.metrics_file.close()
        for writer in self._writers.values():
            writer.close()
        if self.events is not None:
            self.events.close()


GREW = 1e3
"""A training loss that rose this many times over where it started — its first value, or what an untrained model
scores (ln of the number of classes, for cross-entropy) when the loss exploded before its first point — has left
the place it started from."""
CHANCE_MARGIN = 1.5
"""A test accuracy no higher than this many times chance (1/classes) learned nothing."""


ACCURACY_NAMES = ("test_accuracy", "val_accuracy", "accuracy", "val_acc", "acc")
"""Where a result keeps its accuracy, in the order a chance check reads them (else any name ending in accuracy)."""


def chance_warning(result: dict[str, Any], classes: int) -> str | None:
    """A command job's result (its `classes` declared: it says what chance is) whose accuracy is at chance (at most
    CHANCE_MARGIN / classes): the warning a zoo job's result gets when it learned nothing; None otherwise."""
    numbers = {k: v for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    name = next((n for n in ACCURACY_NAMES if n in numbers), None)
    name = name or next((n for n in sorted(numbers) if n.lower().endswith("accuracy")), None)
    if name is None or classes < 2:
        return None
    chance = 1 / classes
    if not numbers[name] <= CHANCE_MARGIN * chance:
        return None
    return (
        f"its {name} {numbers[name]:.3f} is at chance (1/{classes} = {chance:.3f}): it learned nothing; check its lr "
        "and its data"
    )


def nonfinite_warning(result: dict[str, Any], last_loss: float | None = None) -> str | None:
    """A run whose final training loss (`last_loss`, its last point's) or whose result's loss is NaN or infinite
    learned nothing it can use, whatever else it reports (issue 67 #6: lenet at lr 100 with
    `stop_on_nonfinite=false` ended `succeeded` with a NaN loss and no warning). None when every loss is finite."""
    losses = {"final training loss": last_loss}
    losses.update({f"result's {k}": v for k, v in result.items() if "loss" in k.lower()})
    for what, value in losses.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
            return f"its {what} is {value}: the model learned nothing it can use; lower lr, or check the data"
    return None


def divergence_warning(
    first: float | None, peak: float | None, accuracy: float, classes: int, lr: Any, test_loss: float | None = None
) -> str | None:
    """Why a run that ended normally (no NaN, so not failed as diverged) still diverged: its training loss grew by
    orders of magnitude over where it started (`first`, `peak`: of its metric points; where the loss exploded before
    its first point, over what an untrained model scores, ln(classes)) and it learned nothing (test accuracy at
    chance, or a test loss above the untrained model's). None when not: it is a warning in the result, not a failure
    (the job did what it was asked)."""
    if peak is None or not peak > 0 or classes < 2 or (first is not None and not first > 0):
        return None
    untrained = math.log(classes)
    start = untrained if first is None else min(first, untrained)
    chance = 1 / classes
    at_chance = accuracy <= CHANCE_MARGIN * chance
    above = test_loss is not None and test_loss > untrained
    if not (peak / start >= GREW and (at_chance or above)):
        return None
    if first is not None and first <= 10 * untrained:  # (it began where a model begins: say from where)
        grew = f"grew from {first:.3g} to {peak:.3g}"
    else:
        logged = f"{first:.3g}" if first is not None else "none"
        grew = (
            f"grew to {peak:.3g} from an untrained model's {untrained:.3g} (ln {classes}; its first logged: {logged})"
        )
    why = (
        f"test accuracy {accuracy:.3f} is at chance (1/{classes} = {chance:.3f})"
        if at_chance
        else f"its test loss {test_loss:.3g} is above an untrained model's (test accuracy {accuracy:.3f})"
    )
    return (
        f"the training loss {grew} and {why}: training diverged without reaching NaN; try a lower lr (this run: {lr})"
    )
