"""What every dataset reader returns: a Source of uint8 HWC images and int32 labels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


class DatasetError(ValueError):
    """A dataset file is missing, truncated or not in the expected format; the message names the file."""


@dataclass
class Split:
    """One split: either in-memory arrays or a function giving an unbatched tf.data.Dataset."""

    size: int
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    make: Callable[[], Any] | None = None

    def dataset(self):
        """tf.data.Dataset of (uint8 HxWxC image, int32 label)."""
        import tensorflow as tf

        if self.make is not None:
            return self.make()
        return tf.data.Dataset.from_tensor_slices((self.x, self.y))


@dataclass
class Source:
    """A dataset ready for the input pipeline."""

    name: str
    format: str
    shape: tuple[int, int, int]
    num_classes: int
    train: Split
    test: Split
    validation: Split | None = None
    class_names: list[str] = field(default_factory=list)
    path: Path | None = None

    @property
    def in_memory(self) -> bool:
        """True when the training split is already an array (no file decoding per epoch)."""
        return self.train.x is not None

    def describe(self) -> str:
        """One line for the log."""
        val = f" / {self.validation.size} validation" if self.validation else ""
        where = f" from {self.path}" if self.path else ""
        return (
            f"dataset {self.name} ({self.format}){where}: {self.train.size} train{val} / {self.test.size} test "
            f"images of {'x'.join(map(str, self.shape))}, {self.num_classes} classes"
        )


def arrays_source(
    name: str, fmt: str, x_train, y_train, x_test, y_test, num_classes: int | None = None, **kw: Any
) -> Source:
    """A Source over in-memory arrays, checking shapes and labels."""
    x_train, x_test = np.asarray(x_train, np.uint8), np.asarray(x_test, np.uint8)
    y_train, y_test = np.asarray(y_train, np.int32), np.asarray(y_test, np.int32)
    if x_train.ndim == 3:
        x_train, x_test = x_train[..., None], x_test[..., None]
    k = num_classes or int(max(y_train.max(initial=0), y_test.max(initial=0)) + 1)
    val = kw.pop("validation", None)
    return Source(
        name=name,
        format=fmt,
        shape=tuple(int(d) for d in x_train.shape[1:]),  # type: ignore[arg-type]
        num_classes=k,
        train=Split(len(x_train), x_train, y_train),
        test=Split(len(x_test), x_test, y_test),
        validation=Split(len(val[0]), *val) if val else None,
        **kw,
    )
