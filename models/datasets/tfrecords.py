"""TFRecords: cifar10_estimator's (`train/validation/eval.tfrecords`, `image` raw bytes, `label`) and
slim's (`image/encoded` PNG/JPEG, `image/class/label`, `labels.txt`)."""

from __future__ import annotations

from pathlib import Path

from models.datasets.base import DatasetError, Source, Split

ESTIMATOR_SPLITS = {"train": "train.tfrecords", "validation": "validation.tfrecords", "test": "eval.tfrecords"}


def _count(files: list[str]) -> int:
    import tensorflow as tf

    n = 0
    for f in files:
        try:
            n += sum(1 for _ in tf.data.TFRecordDataset(f))
        except tf.errors.OpError as exc:
            raise DatasetError(f"{f}: not a readable TFRecord file ({exc.message.splitlines()[0]})") from None
    return n


def _first(files: list[str]) -> bytes:
    import tensorflow as tf

    try:
        for raw in tf.data.TFRecordDataset(files[0]).take(1):
            return raw.numpy()
    except tf.errors.OpError as exc:
        raise DatasetError(f"{files[0]}: not a readable TFRecord file ({exc.message.splitlines()[0]})") from None
    raise DatasetError(f"{files[0]}: holds no records")


def _features(raw: bytes, file: str) -> dict:
    import tensorflow as tf

    try:
        ex = tf.train.Example.FromString(raw)
    except Exception as exc:  # protobuf's DecodeError
        raise DatasetError(f"{file}: records are not tf.train.Example protos ({exc})") from None
    return dict(ex.features.feature)


def _estimator(path: Path) -> Source:
    import tensorflow as tf

    files = {k: str(path / v) for k, v in ESTIMATOR_SPLITS.items() if (path / v).is_file()}
    if "test" not in files:
        raise DatasetError(f"{path}: expected eval.tfrecords beside train.tfrecords (cifar10_estimator's layout)")
    feats = _features(_first([files["train"]]), files["train"])
    if "image" not in feats or "label" not in feats:
        raise DatasetError(
            f"{files['train']}: expected features 'image' (bytes) and 'label' (int64), found {sorted(feats)}"
        )
    dims = [feats[k].int64_list.value[0] if k in feats else d for k, d in (("height", 32), ("width", 32), ("depth", 3))]
    h, w, c = (int(d) for d in dims)
    if len(feats["image"].bytes_list.value[0]) != h * w * c:
        raise DatasetError(
            f"{files['train']}: image holds {len(feats['image'].bytes_list.value[0])} bytes, expected {h}x{w}x{c}"
        )
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(raw):
        ex = tf.io.parse_single_example(raw, spec)
        img = tf.reshape(tf.io.decode_raw(ex["image"], tf.uint8), [c, h, w])  # CHW, as the script wrote it
        return tf.transpose(img, [1, 2, 0]), tf.cast(ex["label"], tf.int32)

    def split(name: str) -> Split | None:
        if name not in files:
            return None
        f = files[name]
        return Split(
            _count([f]), make=lambda: tf.data.TFRecordDataset(f).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        )

    names = _label_names(path)
    if names:
        num_classes = len(names)
    else:  # the original script writes no label list: CIFAR-10 or CIFAR-100 by the labels seen
        labels = [
            int(v)
            for raw in tf.data.TFRecordDataset(files["train"]).take(10_000)
            for v in _features(raw.numpy(), files["train"])["label"].int64_list.value
        ]
        num_classes = 10 if max(labels) < 10 else 100
    return _source(path, "tfrecords-estimator", (h, w, c), num_classes, split, names)


def _label_names(path: Path) -> list[str]:
    """slim's labels.txt (`0:airplane` per line), which models.convert also writes."""
    f = path / "labels.txt"
    if not f.is_file():
        return []
    return [line.split(":", 1)[1].strip() for line in f.read_text().splitlines() if ":" in line]


def _slim(path: Path, by_split: dict[str, list[str]]) -> Source:
    import tensorflow as tf

    first_file = by_split["train"][0]
    feats = _features(_first([first_file]), first_file)
    if "image/encoded" not in feats or "image/class/label" not in feats:
        raise DatasetError(
            f"{first_file}: expected features image/encoded and image/class/label, found {sorted(feats)}"
        )
    first = tf.io.decode_image(feats["image/encoded"].bytes_list.value[0], expand_animations=False)
    h, w, c = (int(d) for d in first.shape)
    names = _label_names(path)
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(raw):
        ex = tf.io.parse_single_example(raw, spec)
        img = tf.io.decode_image(ex["image/encoded"], channels=c, expand_animations=False)
        img = tf.cast(tf.clip_by_value(tf.round(tf.image.resize(img, [h, w])), 0, 255), tf.uint8)
        return tf.ensure_shape(img, (h, w, c)), tf.cast(ex["image/class/label"], tf.int32)

    def split(name: str) -> Split | None:
        files = by_split.get(name)
        if not files:
            return None
        return Split(
            _count(files),
            make=lambda: tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE).map(
                parse, num_parallel_calls=tf.data.AUTOTUNE
            ),
        )

    num_classes = len(names)
    if not num_classes:
        seen = [
            int(_features(raw.numpy(), first_file)["image/class/label"].int64_list.value[0])
            for raw in tf.data.TFRecordDataset(by_split["train"]).take(10_000)
        ]
        num_classes = max(seen) + 1
    return _source(path, "tfrecords-slim", (h, w, c), num_classes, split, names)


def _source(path: Path, fmt: str, shape: tuple[int, int, int], num_classes: int, split, names: list[str]) -> Source:
    """A Source over the splits `split(name)` makes (None for a split the folder lacks)."""
    return Source(
        name=path.name,
        format=fmt,
        shape=shape,
        num_classes=num_classes,
        train=split("train"),
        test=split("test"),
        validation=split("validation"),
        class_names=names,
        path=path,
    )


def from_dir(path: Path) -> Source | None:
    """Either TFRecord layout in `path`; None when there are no TFRecord files."""
    if (path / "train.tfrecords").is_file():
        return _estimator(path)
    files = sorted(p for p in path.iterdir() if ".tfrecord" in p.name and p.is_file())
    if not files:
        return None
    by_split: dict[str, list[str]] = {}
    for f in files:
        for key, split in (("train", "train"), ("validation", "validation"), ("test", "test"), ("eval", "test")):
            if key in f.name:
                by_split.setdefault(split, []).append(str(f))
                break
    if "train" not in by_split or ("test" not in by_split and "validation" not in by_split):
        raise DatasetError(
            f"{path}: TFRecord files must have train and test (or validation) in their names, "
            f"found {[f.name for f in files]}"
        )
    if "test" not in by_split:  # slim's ImageNet/flowers ship train and validation only
        by_split["test"] = by_split.pop("validation")
    return _slim(path, by_split)
