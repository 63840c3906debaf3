"""Dataset readers with format detection: CIFAR python/binary, TFRecords, image folders, IDX, synthetic."""

from __future__ import annotations

from pathlib import Path

from models.catalog import parse_dataset
from models.datasets import cifar, folders, idx, synthetic, tfrecords
from models.datasets.base import DatasetError, Source, Split, arrays_source

__all__ = ["DatasetError", "Source", "Split", "arrays_source", "load", "open_path"]

FORMATS = (
    "CIFAR-10/100 python or binary (.tar.gz or extracted), cifar10_estimator or slim TFRecords, "
    "image folders (train/<class>/, test/<class>/), MNIST-style IDX files"
)


def detect(path: Path) -> tuple[str, Path] | None:
    """The format of the dataset in dir `path` and the dir it starts at, from file names alone (cheap: no file
    is read, TensorFlow is not imported); None when no reader would recognise it. A single wrapping folder
    (an archive of `mnist/…`) is looked through once."""
    path = Path(path)
    found = cifar.locate(path)
    if found is not None:
        return f"{found[0]}-{found[1]}", found[2]
    if idx.find(path, idx.FILES["x_train"]) is not None:
        return "idx", path
    if (path / "train.tfrecords").is_file():
        return "tfrecords-estimator", path
    if any(".tfrecord" in p.name and p.is_file() for p in path.iterdir()):
        return "tfrecords-slim", path
    train = path / "train"
    if train.is_dir() and sum(p.is_dir() for p in train.iterdir()) >= 2 and (path / "test").is_dir():
        return "image-folders", path
    entries = [p for p in path.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return detect(entries[0])
    return None


def must_exist(path: Path) -> None:
    """DatasetError where a dataset's `path` does not exist: cheap, and TensorFlow-free (models.train checks a job's
    path before importing it: such a job fails at once, not seconds later)."""
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")


def open_path(path: Path) -> Source:
    """Detect the format of a dataset file or dir and open it; DatasetError says what was expected."""
    path = Path(path)
    must_exist(path)
    if path.is_file():
        if path.name.endswith((".tar.gz", ".tgz", ".tar")):
            src = cifar.from_tar(path)
            if src is not None:
                return src
        raise DatasetError(f"{path}: not a dataset archive gpudeck knows; expected one of: {FORMATS}")
    for reader in (cifar.from_dir, idx.from_dir, tfrecords.from_dir, folders.from_dir):
        src = reader(path)
        if src is not None:
            return src
    raise DatasetError(f"{path}: no dataset found in this folder; expected one of: {FORMATS}")


def load(dataset: str, seed: int = 0) -> Source:
    """The dataset a job spec names: `synthetic[:HxWxC[:K]]` or a path to a dataset file or folder."""
    ref = parse_dataset(dataset)
    if ref.kind == "synthetic":
        return synthetic.load(ref, seed)
    if ref.kind == "stored":
        raise DatasetError(f"{dataset}: an uploaded dataset is resolved to its folder by a gpudeck worker; give a path")
    return open_path(Path(ref.path))
