"""scikit-learn's bundled 8x8 digits (no download), upscaled to 32x32x3 and written as a CIFAR-10 binary archive."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support import formats


def digits_arrays(seed: int = 0):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images * (255.0 / 16.0)).round().astype(np.uint8)  # (1797, 8, 8), 0..255
    x = np.repeat(np.repeat(x, 4, axis=1), 4, axis=2)  # 32x32, nearest neighbour
    x = np.repeat(x[..., None], 3, axis=3)  # 3 channels
    y = d.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = 360
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def write_digits_cifar(root: Path) -> Path:
    train, test = digits_arrays()
    return formats.cifar_binary(root, train, test, "cifar10", tar=True)
