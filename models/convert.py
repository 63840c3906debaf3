"""`python -m models.convert SRC DST`: write any dataset gpudeck reads as cifar10_estimator-style TFRecords.

What generate_cifar10_tfrecords.py did for CIFAR-10, for every format: DST/train.tfrecords,
DST/validation.tfrecords (when SRC has a validation split), DST/eval.tfrecords, each record an `image`
(raw uint8 bytes, channels first as the script wrote them) and a `label` (int64), plus `height`,
`width`, `depth` and a labels.txt, which the original script left out, so any image size reads back.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

log = logging.getLogger("models.convert")


def _int64(v: int):
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v)]))


def convert(src: str, dst: Path) -> dict[str, int]:
    """Write `src` (a path or `synthetic…`) into `dst`; returns records written per file."""
    from models.datasets import load

    source = load(src)  # (first: a source that is not there is refused without TensorFlow's seconds of import)
    import tensorflow as tf

    dst.mkdir(parents=True, exist_ok=True)
    h, w, c = source.shape
    counts = {}
    for name, split in (("train", source.train), ("validation", source.validation), ("eval", source.test)):
        if split is None:
            continue
        path = dst / f"{name}.tfrecords"
        n = 0
        with tf.io.TFRecordWriter(str(path)) as writer:
            for image, label in split.dataset().as_numpy_iterator():
                feature = {
                    "image": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[image.transpose(2, 0, 1).tobytes()])
                    ),
                    "label": _int64(label),
                    "height": _int64(h),
                    "width": _int64(w),
                    "depth": _int64(c),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
                n += 1
        counts[path.name] = n
        log.info("wrote %d records to %s", n, path)
    names = source.class_names or [str(i) for i in range(source.num_classes)]
    (dst / "labels.txt").write_text("".join(f"{i}:{n}\n" for i, n in enumerate(names)))
    return counts


def main(argv: list[str] | None = None) -> int:
    """Exit 0 on success, 2 when SRC is not a dataset gpudeck reads."""
    parser = argparse.ArgumentParser(
        prog="python -m models.convert", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("src", help="dataset file or folder (any format gpudeck reads), or synthetic[:HxWxC[:K]]")
    parser.add_argument("dst", type=Path, help="folder to write the TFRecords into")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    from models.datasets import DatasetError

    src = args.src if args.src.startswith("synthetic") else str(Path(args.src).resolve())
    try:
        convert(src, args.dst)
    except (DatasetError, ValueError) as exc:
        log.error("error: %s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
