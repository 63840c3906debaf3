"""Write small datasets in the real on-disk formats (what the reference scripts and archives contain)."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np


def images(n: int, shape=(32, 32, 3), classes: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8), rng.integers(0, classes, size=n).astype(np.int32)


def _chw_rows(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 3, 1, 2).reshape(len(x), -1)


def cifar_python(root: Path, train, test, variant="cifar10", tar: bool = False) -> Path:
    """cifar-10-batches-py/ (data_batch_1..5, test_batch, batches.meta) or cifar-100-python/ (train, test, meta)."""
    sub = "cifar-10-batches-py" if variant == "cifar10" else "cifar-100-python"
    label_key = b"labels" if variant == "cifar10" else b"fine_labels"
    files: dict[str, bytes] = {}
    if variant == "cifar10":
        xs, ys = np.array_split(train[0], 5), np.array_split(train[1], 5)
        for i, (x, y) in enumerate(zip(xs, ys), 1):
            files[f"data_batch_{i}"] = pickle.dumps(
                {b"batch_label": b"x", label_key: y.tolist(), b"data": _chw_rows(x)}
            )
        files["batches.meta"] = pickle.dumps({b"label_names": [f"class{i}".encode() for i in range(10)]})
        files["test_batch"] = pickle.dumps({label_key: test[1].tolist(), b"data": _chw_rows(test[0])})
    else:
        files["train"] = pickle.dumps(
            {label_key: train[1].tolist(), b"coarse_labels": [0] * len(train[1]), b"data": _chw_rows(train[0])}
        )
        files["test"] = pickle.dumps(
            {label_key: test[1].tolist(), b"coarse_labels": [0] * len(test[1]), b"data": _chw_rows(test[0])}
        )
        files["meta"] = pickle.dumps({b"fine_label_names": [f"c{i}".encode() for i in range(100)]})
    return _emit(root, sub, files, tar, "cifar-10-python.tar.gz" if variant == "cifar10" else "cifar-100-python.tar.gz")


def cifar_binary(root: Path, train, test, variant="cifar10", tar: bool = False) -> Path:
    """cifar-10-batches-bin/data_batch_N.bin (label byte + 3072) or cifar-100-binary/train.bin (coarse, fine + 3072)."""

    def records(x, y):
        labels = (
            y[:, None].astype(np.uint8) if variant == "cifar10" else np.stack([np.zeros_like(y), y], 1).astype(np.uint8)
        )
        return np.concatenate([labels, _chw_rows(x)], 1).tobytes()

    if variant == "cifar10":
        sub = "cifar-10-batches-bin"
        files = {
            f"data_batch_{i}.bin": records(x, y)
            for i, (x, y) in enumerate(zip(np.array_split(train[0], 5), np.array_split(train[1], 5)), 1)
        }
        files["test_batch.bin"] = records(*test)
        files["batches.meta.txt"] = "".join(f"class{i}\n" for i in range(10)).encode()
    else:
        sub = "cifar-100-binary"
        files = {"train.bin": records(*train), "test.bin": records(*test)}
    return _emit(root, sub, files, tar, f"{variant}-binary.tar.gz")


def _emit(root: Path, sub: str, files: dict[str, bytes], tar: bool, tar_name: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if tar:
        path = root / tar_name
        with tarfile.open(path, "w:gz") as t:
            for name, data in files.items():
                info = tarfile.TarInfo(f"{sub}/{name}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        return path
    (root / sub).mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / sub / name).write_bytes(data)
    return root / sub


def idx(root: Path, train, test, gz: bool = True) -> Path:
    """train-images-idx3-ubyte.gz & co: big-endian header (0, 0x08, ndim, dims...) then the bytes."""
    root.mkdir(parents=True, exist_ok=True)
    for prefix, (x, y) in (("train", train), ("t10k", test)):
        for kind, arr in (("images-idx3", x[..., 0] if x.ndim == 4 else x), ("labels-idx1", y.astype(np.uint8))):
            data = (
                struct.pack(">HBB", 0, 0x08, arr.ndim)
                + struct.pack(f">{arr.ndim}I", *arr.shape)
                + arr.astype(np.uint8).tobytes()
            )
            name = f"{prefix}-{kind}-ubyte"
            if gz:
                (root / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (root / name).write_bytes(data)
    return root


def png(image: np.ndarray) -> bytes:
    import tensorflow as tf

    return tf.io.encode_png(image).numpy()


def folders(root: Path, train, test, names=("cat", "dog", "frog")) -> Path:
    """MLSteam's image folders: train/<class>/N.png, test/<class>/N.png."""
    for split, (x, y) in (("train", train), ("test", test)):
        for i, (img, label) in enumerate(zip(x, y)):
            d = root / split / names[label]
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{i}.png").write_bytes(png(img))
    return root


def estimator_tfrecords(root: Path, train, test, validation=None) -> Path:
    """What cifar10_estimator's generate_cifar10_tfrecords.py writes: image = data[i].tobytes() (CHW), label."""
    import tensorflow as tf

    root.mkdir(parents=True, exist_ok=True)
    for name, split in (("train", train), ("validation", validation), ("eval", test)):
        if split is None:
            continue
        with tf.io.TFRecordWriter(str(root / f"{name}.tfrecords")) as w:
            for row, label in zip(_chw_rows(split[0]), split[1]):
                ex = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[row.tobytes()])),
                            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                        }
                    )
                )
                w.write(ex.SerializeToString())
    return root


def slim_tfrecords(root: Path, train, test, names=("airplane", "automobile", "bird")) -> Path:
    """What slim's download_and_convert_cifar10.py writes: image/encoded PNG, image/format, image/class/label,
    and labels.txt."""
    import tensorflow as tf

    root.mkdir(parents=True, exist_ok=True)
    for name, (x, y) in (("train", train), ("test", test)):
        with tf.io.TFRecordWriter(str(root / f"cifar10_{name}.tfrecord")) as w:
            for img, label in zip(x, y):
                f = {
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png(img)])),
                    "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"png"])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                    "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[img.shape[0]])),
                    "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[img.shape[1]])),
                }
                w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
    (root / "labels.txt").write_text("".join(f"{i}:{n}\n" for i, n in enumerate(names)))
    return root


def cifar_tgz(tmp_path: Path, seed: int = 0) -> bytes:
    """A small cifar-10-binary.tar.gz (40 train, 20 test images), as bytes to upload."""
    data = images(40, seed=seed), images(20, seed=seed + 1)
    return cifar_binary(tmp_path / f"src{seed}", *data, tar=True).read_bytes()
