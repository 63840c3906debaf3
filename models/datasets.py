"""Datasets as in-memory arrays plus their tf.data input pipelines."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.catalog import DatasetRef, parse_dataset

SYNTHETIC_TRAIN = 2048
"""Examples in the synthetic training split."""
SYNTHETIC_TEST = 512
"""Examples in the synthetic test split."""


@dataclass
class Arrays:
    """A dataset's splits as uint8 images (N, H, W, C) and int32 labels (N,)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def shape(self) -> tuple[int, int, int]:
        """Image shape (H, W, C)."""
        return tuple(int(d) for d in self.x_train.shape[1:])  # type: ignore[return-value]


def synthetic(ref: DatasetRef, seed: int = 0) -> Arrays:
    """Random images of the given shape that a model can still learn.

    Each class has a fixed random template; an image is its class's template blended with noise,
    so a smoke test sees the loss fall rather than wander.
    """
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(ref.num_classes, *ref.shape), dtype=np.uint8)

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, ref.num_classes, size=n).astype(np.int32)
        noise = rng.integers(0, 256, size=(n, *ref.shape), dtype=np.uint16)
        x = ((templates[y].astype(np.uint16) + noise) // 2).astype(np.uint8)
        return x, y

    x_train, y_train = split(SYNTHETIC_TRAIN)
    x_test, y_test = split(SYNTHETIC_TEST)
    return Arrays("synthetic", x_train, y_train, x_test, y_test, ref.num_classes)


def load(dataset: str, seed: int = 0) -> Arrays:
    """Load the dataset a job spec names."""
    ref = parse_dataset(dataset)
    if ref.kind == "synthetic":
        return synthetic(ref, seed)
    raise ValueError(f"unknown dataset {dataset!r}")  # pragma: no cover - parse_dataset refuses first


def _normalize(x, y):
    import tensorflow as tf

    return tf.cast(x, tf.float32) / 255.0, y


def train_pipeline(data: Arrays, batch_size: int, seed: int | None):
    """Shuffled, repeated, batched training batches (static shapes), decoded in parallel, prefetched."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train)).cache()
    ds = ds.shuffle(min(len(data.x_train), 50_000), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_size, drop_remainder=True, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(_normalize, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def eval_pipeline(x: np.ndarray, y: np.ndarray, batch_size: int):
    """The whole split once, in order, batched."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
    return ds.map(_normalize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
