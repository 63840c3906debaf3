"""The UCI 8x8 handwritten digits (tests/support/data/digits.csv.gz, no download) written as MNIST-style IDX
files: what the learning check trains on. At their own 8x8 (a sixteenth of CIFAR's pixels) ResNet-20 trains on
them in seconds, through the same stride-2 stages (8, 4, 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support import formats

DIGITS = Path(__file__).parent / "data" / "digits.csv.gz"


def digits_arrays(seed: int = 0, size: int = 8):
    """((x_train, y_train), (x_test, y_test)): 1437 and 360 images of size x size x 1, 0..255."""
    table = np.loadtxt(DIGITS, delimiter=",", dtype=np.int64)  # 64 pixels 0..16, then the label
    x = (table[:, :64].reshape(-1, 8, 8) * (255.0 / 16.0)).round().astype(np.uint8)  # (1797, 8, 8), 0..255
    x = np.repeat(np.repeat(x, size // 8, axis=1), size // 8, axis=2)[..., None]  # nearest neighbour
    y = table[:, 64].astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = 360
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def write_digits_idx(root: Path, size: int = 8) -> Path:
    train, test = digits_arrays(size=size)
    return formats.idx(root, train, test)
