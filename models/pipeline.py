"""tf.data input pipelines: parallel decode, cache, shuffle, augment, resize, batch, prefetch."""

from __future__ import annotations

import logging

import tensorflow as tf

from models.datasets import Source, Split

log = logging.getLogger("models.train")

CACHE_LIMIT_BYTES = 2 << 30
"""Decoded file datasets up to this size are cached in memory after the first epoch."""


def target_shape(shape: tuple[int, int, int], min_size: int) -> tuple[int, int, int]:
    """The input shape a model gets: the images' own, grown to the model's minimum side."""
    h, w, c = shape
    return (max(h, min_size), max(w, min_size), c)


class Preprocess:
    """Training augmentation and the normalization that training and evaluation share.

    Everything works on whole uint8 batches with vectorized ops (one crop_and_resize for the random crops,
    per-image flips and colour factors as broadcast tensors), so the per-image work is a few kernel calls
    per batch rather than a map call per image (tests/bench: on-disk + crop_flip at 0.96-1.01x of in-memory).
    """

    def __init__(self, source: Source, parts: tuple[str, ...], shape: tuple[int, int, int], seed: int | None):
        self.parts = parts
        self.src_shape = source.shape
        self.shape = shape
        self.seed = seed
        self.pad = max(1, round(source.shape[0] / 8))  # 4 pixels on CIFAR's 32, as the references pad

    def augment(self, images, labels):
        """A batch of uint8 images -> augmented float32 images in [0, 1] (training only)."""
        x = tf.image.convert_image_dtype(images, tf.float32)
        n = tf.shape(x)[0]
        h, w, c = self.src_shape
        if (
            "crop" in self.parts
        ):  # zero-pad then a random h x w window per image, as resize_with_crop_or_pad + random_crop
            p = self.pad
            x = tf.pad(x, [[0, 0], [p, p], [p, p], [0, 0]])
            hp, wp = h + 2 * p, w + 2 * p
            oy = tf.cast(tf.random.uniform([n], 0, 2 * p + 1, dtype=tf.int32, seed=self.seed), tf.float32)
            ox = tf.cast(tf.random.uniform([n], 0, 2 * p + 1, dtype=tf.int32, seed=self.seed), tf.float32)
            boxes = tf.stack([oy / (hp - 1), ox / (wp - 1), (oy + h - 1) / (hp - 1), (ox + w - 1) / (wp - 1)], axis=1)
            x = tf.image.crop_and_resize(x, boxes, tf.range(n), [h, w])  # integer corners: an exact crop
        if "flip" in self.parts:
            flip = tf.random.uniform([n, 1, 1, 1], seed=self.seed) < 0.5
            x = tf.where(flip, tf.reverse(x, axis=[2]), x)
        if "color" in self.parts:  # brightness, saturation, contrast as slim's distort_color, per image
            x = x + tf.random.uniform([n, 1, 1, 1], -32.0 / 255.0, 32.0 / 255.0, seed=self.seed)
            if c == 3:
                gray = tf.image.rgb_to_grayscale(x)
                x = gray + tf.random.uniform([n, 1, 1, 1], 0.5, 1.5, seed=self.seed) * (x - gray)
            mean = tf.reduce_mean(x, axis=[1, 2, 3], keepdims=True)
            x = mean + tf.random.uniform([n, 1, 1, 1], 0.5, 1.5, seed=self.seed) * (x - mean)
            x = tf.clip_by_value(x, 0.0, 1.0)
        return x, labels

    def finish(self, x, labels):
        """A batch of uint8 or [0, 1] float images -> the model's input: resized, standardized if asked."""
        if x.dtype == tf.uint8:
            x = tf.image.convert_image_dtype(x, tf.float32)
        if self.shape[:2] != self.src_shape[:2]:
            x = tf.image.resize(x, self.shape[:2])
        if "standardize" in self.parts:
            x = tf.image.per_image_standardization(x)
        return x, labels

    def train_batch(self, images, labels):
        """Augment then finish one training batch."""
        if set(self.parts) - {"standardize"}:
            images, labels = self.augment(images, labels)
        return self.finish(images, labels)


def _cached(split: Split, ds, shape: tuple[int, int, int]):
    if split.x is None and split.size * shape[0] * shape[1] * shape[2] <= CACHE_LIMIT_BYTES:
        return ds.cache()
    return ds


def train_dataset(source: Source, pre: Preprocess, batch_size: int, seed: int | None):
    """Endless shuffled, augmented, fixed-shape batches."""
    ds = _cached(source.train, source.train.dataset(), source.shape)
    ds = ds.shuffle(min(source.train.size, 50_000), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_size, drop_remainder=True, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(pre.train_batch, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def eval_dataset(split: Split, pre: Preprocess, batch_size: int):
    """The whole split once, in order."""
    ds = split.dataset().batch(batch_size, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.map(pre.finish, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
