"""Image folders, MLSteam's format: `train/<class>/*.png|jpg`, `test/<class>/*` (optional `validation/`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.datasets.base import DatasetError, Source, Split

EXTENSIONS = {".png", ".jpg", ".jpeg"}
MAGIC = {b"\x89PNG\r\n\x1a\n": "png", b"\xff\xd8\xff": "jpeg"}


def _files(split_dir: Path, classes: list[str]) -> tuple[list[str], np.ndarray]:
    paths, labels = [], []
    for label, name in enumerate(classes):
        d = split_dir / name
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.suffix.lower() in EXTENSIONS and f.is_file():
                head = f.read_bytes()[:8] if f.stat().st_size else b""
                if not any(head.startswith(m) for m in MAGIC):
                    raise DatasetError(f"{f}: not a PNG or JPEG image (it does not start like one)")
                paths.append(str(f))
                labels.append(label)
    return paths, np.asarray(labels, np.int32)


def _decoder(shape: tuple[int, int, int]):
    import tensorflow as tf

    h, w, c = shape

    def decode(path, label):
        img = tf.io.decode_image(tf.io.read_file(path), channels=c, expand_animations=False)
        img = tf.cast(tf.clip_by_value(tf.round(tf.image.resize(img, [h, w])), 0, 255), tf.uint8)
        return tf.ensure_shape(img, shape), label

    return decode


def from_dir(path: Path) -> Source | None:
    """`path/train/<class>/…` and `path/test/<class>/…`; None when there is no train/ of class folders."""
    train_dir = path / "train"
    if not train_dir.is_dir() or not any(p.is_dir() for p in train_dir.iterdir()):
        return None
    import tensorflow as tf

    classes = sorted(p.name for p in train_dir.iterdir() if p.is_dir())
    if len(classes) < 2:
        raise DatasetError(f"{train_dir}: expected a folder per class (at least 2), found {classes}")
    if not (path / "test").is_dir():
        raise DatasetError(f"{path}: expected test/<class>/ folders beside train/")
    splits = {}
    for split in ("train", "test", "validation"):
        if (path / split).is_dir():
            extra = sorted(p.name for p in (path / split).iterdir() if p.is_dir() and p.name not in classes)
            if extra:
                raise DatasetError(f"{path / split}: classes {extra} are not in train/ ({classes})")
            splits[split] = _files(path / split, classes)
    if not len(splits["train"][0]) or not len(splits["test"][0]):
        raise DatasetError(f"{path}: train/ and test/ must each hold at least one .png/.jpg image")
    first = tf.io.decode_image(tf.io.read_file(splits["train"][0][0]), expand_animations=False)
    h, w, c = (int(d) for d in first.shape)
    shape = (h, w, c)
    decode = _decoder(shape)  # type: ignore[arg-type]

    def split_of(name: str) -> Split | None:  # (train and test: always there, checked above)
        if name not in splits:
            return None
        paths, labels = splits[name]

        def make():
            ds = tf.data.Dataset.from_tensor_slices((paths, labels))
            return ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)

        return Split(len(paths), make=make)

    return Source(
        name=path.name,
        format="image-folders",
        shape=shape,
        num_classes=len(classes),  # type: ignore[arg-type]
        train=split_of("train"),  # type: ignore[arg-type]
        test=split_of("test"),  # type: ignore[arg-type]
        validation=split_of("validation"),  # type: ignore[arg-type]
        class_names=classes,
        path=path,
    )
