"""MNIST-style IDX files: `train-images-idx3-ubyte[.gz]`, `train-labels-idx1-ubyte[.gz]`, `t10k-…`."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from models.datasets.base import DatasetError, Source, arrays_source

FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
UBYTE = 0x08


def find(path: Path, stem: str) -> Path | None:
    for name in (stem, f"{stem}.gz", stem.replace("-idx", ".idx"), f"{stem.replace('-idx', '.idx')}.gz"):
        if (path / name).is_file():
            return path / name
    return None


def read_idx(file: Path, ndim: int) -> np.ndarray:
    """One IDX file of unsigned bytes with `ndim` dimensions, checked against its header."""
    try:
        raw = gzip.decompress(file.read_bytes()) if file.suffix == ".gz" else file.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DatasetError(f"{file}: cannot read ({exc})") from None
    if len(raw) < 4 + 4 * ndim:
        raise DatasetError(f"{file}: too short for an IDX header ({len(raw)} bytes)")
    zero, dtype, dims = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != UBYTE or dims != ndim:
        raise DatasetError(
            f"{file}: expected an IDX file of unsigned bytes with {ndim} dimensions "
            f"(magic 0x0000080{ndim}), got magic 0x{int.from_bytes(raw[:4], 'big'):08x}"
        )
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = raw[4 + 4 * ndim :]
    expected = int(np.prod(shape))
    if len(body) != expected:
        raise DatasetError(f"{file}: header says {shape} = {expected} bytes of data, file has {len(body)} (truncated?)")
    return np.frombuffer(body, np.uint8).reshape(shape)


def from_dir(path: Path) -> Source | None:
    """The four IDX files in `path`; None when there is no train-images file."""
    if find(path, FILES["x_train"]) is None:
        return None
    arrays = {}
    for key, stem in FILES.items():
        file = find(path, stem)
        if file is None:
            raise DatasetError(f"{path}: missing {stem}[.gz] (an IDX dataset needs {', '.join(FILES.values())})")
        arrays[key] = read_idx(file, 3 if key.startswith("x") else 1)
    for split in ("train", "test"):
        if len(arrays[f"x_{split}"]) != len(arrays[f"y_{split}"]):
            raise DatasetError(
                f"{path}: {len(arrays[f'x_{split}'])} {split} images but {len(arrays[f'y_{split}'])} labels"
            )
    return arrays_source(
        path.name or "idx", "idx", arrays["x_train"], arrays["y_train"], arrays["x_test"], arrays["y_test"], path=path
    )
