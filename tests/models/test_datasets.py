"""Every dataset format, written for real by the tests, read back; damaged files refused by name."""

import pickle

import numpy as np
import pytest

from models.datasets import DatasetError, load, open_path
from tests.support import formats

pytestmark = pytest.mark.xdist_group("tensorflow")  # (TensorFlow in this process: tests/conftest.py)


def read_all(split):
    xs, ys = zip(*split.dataset().as_numpy_iterator())
    return np.stack(xs), np.array(ys)


def same(split, expected):
    x, y = read_all(split)
    assert np.array_equal(x, expected[0]) and np.array_equal(y, expected[1])


TRAIN, TEST = formats.images(10), formats.images(4, seed=1)


@pytest.mark.parametrize("tar", [False, True])
@pytest.mark.parametrize(
    "writer, fmt", [(formats.cifar_python, "cifar-python"), (formats.cifar_binary, "cifar-binary")]
)
def test_cifar10_both_versions_as_archive_or_extracted(tmp_path, writer, fmt, tar):
    path = writer(tmp_path, TRAIN, TEST, "cifar10", tar=tar)
    src = open_path(path)
    assert (src.name, src.format, src.num_classes, src.shape) == ("cifar10", fmt, 10, (32, 32, 3))
    assert src.class_names == [f"class{i}" for i in range(10)]
    same(src.train, TRAIN)
    same(src.test, TEST)


@pytest.mark.parametrize("writer", [formats.cifar_python, formats.cifar_binary])
def test_cifar100(tmp_path, writer):
    train, test = formats.images(6, classes=100), formats.images(3, classes=100, seed=2)
    src = open_path(writer(tmp_path, train, test, "cifar100", tar=True))
    assert src.name == "cifar100" and src.num_classes == 100
    same(src.train, train)
    same(src.test, test)


def test_a_parent_folder_of_the_extracted_batches_works_too(tmp_path):
    formats.cifar_python(tmp_path, TRAIN, TEST)
    assert open_path(tmp_path).format == "cifar-python"


@pytest.mark.parametrize("gz", [True, False])
def test_idx(tmp_path, gz):
    train, test = formats.images(7, (28, 28, 1)), formats.images(3, (28, 28, 1), seed=3)
    src = open_path(formats.idx(tmp_path, train, test, gz=gz))
    assert src.format == "idx" and src.shape == (28, 28, 1)
    same(src.train, train)
    same(src.test, test)


def test_image_folders(tmp_path):
    train, test = formats.images(6, (12, 10, 3), classes=3), formats.images(3, (12, 10, 3), classes=3, seed=4)
    src = open_path(formats.folders(tmp_path, train, test))
    assert src.format == "image-folders" and src.shape == (12, 10, 3) and src.class_names == ["cat", "dog", "frog"]
    x, y = read_all(src.train)
    # files are listed class by class: compare as sets of (label, image)
    got = sorted((int(label), img.tobytes()) for img, label in zip(x, y))
    assert got == sorted((int(label), img.tobytes()) for img, label in zip(*train))


def test_estimator_tfrecords(tmp_path):
    val = formats.images(2, seed=5)
    src = open_path(formats.estimator_tfrecords(tmp_path, TRAIN, TEST, validation=val))
    assert src.format == "tfrecords-estimator" and src.train.size == 10 and src.validation.size == 2
    same(src.train, TRAIN)
    same(src.validation, val)
    same(src.test, TEST)


def test_slim_tfrecords(tmp_path):
    train, test = formats.images(5, classes=3), formats.images(2, classes=3, seed=6)
    src = open_path(formats.slim_tfrecords(tmp_path, train, test))
    assert src.format == "tfrecords-slim" and src.class_names == ["airplane", "automobile", "bird"]
    assert src.num_classes == 3
    same(src.train, train)
    same(src.test, test)


def test_synthetic_is_learnable_and_seeded():
    a, b = load("synthetic:8x8x1:3", seed=1), load("synthetic:8x8x1:3", seed=1)
    assert a.shape == (8, 8, 1) and a.num_classes == 3 and np.array_equal(a.train.x, b.train.x)


def test_convert_writes_tfrecords_that_read_back(tmp_path):
    import subprocess

    from jobs.run.proc import python_module

    train, test = formats.images(7, (28, 28, 1)), formats.images(3, (28, 28, 1), seed=3)
    formats.idx(tmp_path / "mnist", train, test)
    run = subprocess.run(
        python_module("models.convert", str(tmp_path / "mnist"), str(tmp_path / "out")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["eval.tfrecords", "labels.txt", "train.tfrecords"]
    src = open_path(tmp_path / "out")
    assert src.format == "tfrecords-estimator" and src.shape == (28, 28, 1)
    same(src.train, train)
    same(src.test, test)
    bad = subprocess.run(
        python_module("models.convert", str(tmp_path / "nowhere"), str(tmp_path / "o2")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "no such file or directory" in bad.stdout


# -- damaged and wrong files -------------------------------------------------------------------


def test_truncated_cifar_archive(tmp_path):
    path = formats.cifar_python(tmp_path, TRAIN, TEST, tar=True)
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(DatasetError, match="cifar-10-python.tar.gz"):
        open_path(path)


def test_truncated_binary_batch(tmp_path):
    d = formats.cifar_binary(tmp_path, TRAIN, TEST)
    (d / "data_batch_3.bin").write_bytes((d / "data_batch_3.bin").read_bytes()[:-100])
    with pytest.raises(DatasetError, match=r"data_batch_3.bin: \d+ bytes is not a whole number of 3073-byte"):
        open_path(d)


def test_missing_batch(tmp_path):
    d = formats.cifar_python(tmp_path, TRAIN, TEST)
    (d / "test_batch").unlink()
    with pytest.raises(DatasetError, match="missing test_batch"):
        open_path(d)


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    d = formats.cifar_python(tmp_path, TRAIN, TEST)

    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    (d / "data_batch_2").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
    with pytest.raises(
        DatasetError, match="data_batch_2: not a readable CIFAR python batch.*refusing to load builtins.print"
    ):
        open_path(d)


def test_idx_with_wrong_magic_or_truncated(tmp_path):
    d = formats.idx(tmp_path, formats.images(4, (28, 28, 1)), formats.images(2, (28, 28, 1)), gz=False)
    f = d / "train-labels-idx1-ubyte"
    good = f.read_bytes()
    f.write_bytes(b"\x00\x00\x08\x03" + good[4:])
    with pytest.raises(DatasetError, match="train-labels-idx1-ubyte: expected an IDX file of unsigned bytes with 1"):
        open_path(d)
    f.write_bytes(good[:-1])
    with pytest.raises(DatasetError, match="train-labels-idx1-ubyte: header says"):
        open_path(d)


def test_a_non_image_in_image_folders(tmp_path):
    d = formats.folders(tmp_path, formats.images(4, (8, 8, 3), classes=2), formats.images(2, (8, 8, 3), classes=2))
    (d / "train" / "cat" / "notes.png").write_text("not an image")
    with pytest.raises(DatasetError, match="notes.png: not a PNG or JPEG"):
        open_path(d)


def test_garbage_tfrecords(tmp_path):
    (tmp_path / "train.tfrecords").write_bytes(b"garbage" * 10)
    (tmp_path / "eval.tfrecords").write_bytes(b"garbage" * 10)
    with pytest.raises(DatasetError, match="train.tfrecords"):
        open_path(tmp_path)


def test_unknown_folder_or_file(tmp_path):
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(DatasetError, match="no dataset found in this folder"):
        open_path(tmp_path)
    with pytest.raises(DatasetError, match="readme.txt: not a dataset archive"):
        open_path(tmp_path / "readme.txt")
