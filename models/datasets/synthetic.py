"""`synthetic[:HxWxC[:K]]`: random images a model can still learn, for smoke tests."""

from __future__ import annotations

import numpy as np

from models.catalog import DatasetRef
from models.datasets.base import Source, arrays_source

TRAIN_SIZE = 2048
"""Examples in the synthetic training split."""
TEST_SIZE = 512
"""Examples in the synthetic test split."""


def load(ref: DatasetRef, seed: int = 0) -> Source:
    """Each class has a fixed random template; an image is its template blended with noise, so the
    loss of a smoke test falls rather than wanders."""
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(ref.num_classes, *ref.shape), dtype=np.uint8)

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, ref.num_classes, size=n).astype(np.int32)
        noise = rng.integers(0, 256, size=(n, *ref.shape), dtype=np.uint16)
        return ((templates[y].astype(np.uint16) + noise) // 2).astype(np.uint8), y

    return arrays_source("synthetic", "synthetic", *split(TRAIN_SIZE), *split(TEST_SIZE), ref.num_classes)
