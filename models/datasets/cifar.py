"""CIFAR-10/100 in their python (pickled batches) and binary versions, as .tar.gz or extracted."""

from __future__ import annotations

import io
import pickle
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from models.datasets.base import DatasetError, Source, arrays_source

RECORD = 32 * 32 * 3
PY_DIRS = {"cifar-10-batches-py": "cifar10", "cifar-100-python": "cifar100"}
BIN_DIRS = {"cifar-10-batches-bin": "cifar10", "cifar-100-binary": "cifar100"}
LAYOUT = {
    ("cifar10", "python"): (
        ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"],
        ["test_batch"],
    ),
    ("cifar100", "python"): (["train"], ["test"]),
    ("cifar10", "binary"): ([f"data_batch_{i}.bin" for i in range(1, 6)], ["test_batch.bin"]),
    ("cifar100", "binary"): (["train.bin"], ["test.bin"]),
}


class _SafeUnpickler(pickle.Unpickler):
    """CIFAR batches hold dicts, lists and numpy arrays; nothing else may be built (pickles run code)."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR batch")


def _unpickle(data: bytes, name: str) -> dict:
    try:
        obj = _SafeUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as exc:  # pickle raises many kinds on a damaged file
        raise DatasetError(f"{name}: not a readable CIFAR python batch ({exc})") from None
    if not isinstance(obj, dict):
        raise DatasetError(f"{name}: expected a pickled dict, got {type(obj).__name__}")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _python_batch(data: bytes, name: str, variant: str) -> tuple[np.ndarray, np.ndarray]:
    d = _unpickle(data, name)
    label_key = "labels" if variant == "cifar10" else "fine_labels"
    if "data" not in d or label_key not in d:
        raise DatasetError(f"{name}: expected keys 'data' and '{label_key}', found {sorted(d)}")
    x = np.asarray(d["data"], dtype=np.uint8)
    y = np.asarray(d[label_key], dtype=np.int32)
    if x.ndim != 2 or x.shape[1] != RECORD or len(x) != len(y):
        raise DatasetError(f"{name}: expected data of shape (N, {RECORD}) and N labels, got {x.shape} and {len(y)}")
    return x.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), y


def _binary_batch(data: bytes, name: str, variant: str) -> tuple[np.ndarray, np.ndarray]:
    label_bytes = 1 if variant == "cifar10" else 2  # CIFAR-100: coarse label, then fine label
    size = label_bytes + RECORD
    if not data or len(data) % size:
        raise DatasetError(
            f"{name}: {len(data)} bytes is not a whole number of {size}-byte {variant} records (truncated?)"
        )
    rec = np.frombuffer(data, np.uint8).reshape(-1, size)
    return rec[:, label_bytes:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), rec[:, label_bytes - 1].astype(np.int32)


def _names(read: Callable[[str], bytes | None], variant: str, version: str) -> list[str]:
    if version == "python":
        meta = read("batches.meta" if variant == "cifar10" else "meta")
        if meta is None:
            return []
        d = _unpickle(meta, "meta")
        names = d.get("label_names") or d.get("fine_label_names") or []
        return [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    text = read("batches.meta.txt" if variant == "cifar10" else "fine_label_names.txt")
    return [line.strip() for line in (text or b"").decode().splitlines() if line.strip()]


def _build(read: Callable[[str], bytes | None], where: str, variant: str, version: str, path: Path) -> Source:
    train_files, test_files = LAYOUT[(variant, version)]
    parse = _python_batch if version == "python" else _binary_batch

    def load(files: list[str]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for f in files:
            data = read(f)
            if data is None:
                raise DatasetError(f"{where}: missing {f} (expected {', '.join(train_files + test_files)})")
            x, y = parse(data, f"{where}/{f}", variant)
            xs.append(x)
            ys.append(y)
        return np.concatenate(xs), np.concatenate(ys)

    k = 10 if variant == "cifar10" else 100
    x_tr, y_tr = load(train_files)
    x_te, y_te = load(test_files)
    for split, y in (("train", y_tr), ("test", y_te)):
        if y.size and (y.min() < 0 or y.max() >= k):
            raise DatasetError(f"{where}: {split} labels must be in 0..{k - 1}, found {y.min()}..{y.max()}")
    return arrays_source(
        variant, f"cifar-{version}", x_tr, y_tr, x_te, y_te, k, class_names=_names(read, variant, version), path=path
    )


def locate(path: Path) -> tuple[str, str, Path] | None:
    """(variant, version, dir) of an extracted CIFAR dir (or its parent), from file names alone; else None."""
    for sub in {**PY_DIRS, **BIN_DIRS}:
        if (path / sub).is_dir():
            return locate(path / sub)
    for (variant, version), (train, _) in LAYOUT.items():
        if (path / train[0]).is_file() and (version == "binary") == train[0].endswith(".bin"):
            if version == "python" and variant == "cifar100" and not (path / "meta").exists():
                continue  # a bare `train` file is not enough to call it CIFAR-100
            return variant, version, path
    return None


def from_dir(path: Path) -> Source | None:
    """An extracted CIFAR dir (or its parent); None when `path` does not look like one."""
    found = locate(path)
    if found is None:
        return None
    variant, version, where = found

    def read(name: str) -> bytes | None:
        f = where / name
        return f.read_bytes() if f.is_file() else None

    return _build(read, str(where), variant, version, where)


def from_tar(path: Path) -> Source | None:
    """A CIFAR archive (`cifar-10-python.tar.gz`, `cifar-10-binary.tar.gz`, CIFAR-100's); None if it is another tar."""
    try:
        tar = tarfile.open(path)
    except (tarfile.TarError, OSError) as exc:
        raise DatasetError(f"{path}: not a readable tar archive ({exc})") from None
    with tar:
        try:
            members = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise DatasetError(f"{path}: damaged or truncated archive ({exc})") from None
        tops = {name.split("/", 1)[0] for name in members}
        for sub, variant in {**PY_DIRS, **BIN_DIRS}.items():
            if sub in tops:
                version = "python" if sub in PY_DIRS else "binary"

                def read(name: str, _sub: str = sub) -> bytes | None:
                    m = members.get(f"{_sub}/{name}")
                    if m is None:
                        return None
                    f = tar.extractfile(m)
                    try:
                        return f.read() if f else None
                    except (tarfile.TarError, EOFError, OSError) as exc:
                        raise DatasetError(f"{path}: {name} is truncated ({exc})") from None

                return _build(read, f"{path}:{sub}", variant, version, path)
    return None
