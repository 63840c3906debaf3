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
    """Per-example training augmentation and the normalization that training and evaluation share."""

    def __init__(self, source: Source, parts: tuple[str, ...], shape: tuple[int, int, int], seed: int | None):
        self.parts = parts
        self.src_shape = source.shape
        self.shape = shape
        self.seed = seed
        self.pad = max(1, round(source.shape[0] / 8))  # 4 pixels on CIFAR's 32, as the references pad

    def augment(self, image, label):
        x = tf.image.convert_image_dtype(image, tf.float32)  # uint8 -> [0, 1]
        h, w, c = self.src_shape
        if "crop" in self.parts:
            x = tf.image.resize_with_crop_or_pad(x, h + 2 * self.pad, w + 2 * self.pad)
            x = tf.image.random_crop(x, [h, w, c], seed=self.seed)
        if "flip" in self.parts:
            x = tf.image.random_flip_left_right(x, seed=self.seed)
        if "color" in self.parts:  # slim's distort_color, fast mode
            x = tf.image.random_brightness(x, 32.0 / 255.0, seed=self.seed)
            if c == 3:
                x = tf.image.random_saturation(x, 0.5, 1.5, seed=self.seed)
            x = tf.clip_by_value(tf.image.random_contrast(x, 0.5, 1.5, seed=self.seed), 0.0, 1.0)
        return x, label

    def finish(self, x, label):
        """Float [0, 1] images (one or a batch) -> the model's input: resized, standardized if asked."""
        if x.dtype == tf.uint8:
            x = tf.image.convert_image_dtype(x, tf.float32)
        if self.shape[:2] != self.src_shape[:2]:
            x = tf.image.resize(x, self.shape[:2])
        if "standardize" in self.parts:
            x = tf.image.per_image_standardization(x)
        return x, label


def _cached(split: Split, ds, shape: tuple[int, int, int]):
    if split.x is None and split.size * shape[0] * shape[1] * shape[2] <= CACHE_LIMIT_BYTES:
        return ds.cache()
    return ds


def train_dataset(source: Source, pre: Preprocess, batch_size: int, seed: int | None):
    """Endless shuffled, augmented, fixed-shape batches."""
    ds = _cached(source.train, source.train.dataset(), source.shape)
    ds = ds.shuffle(min(source.train.size, 50_000), seed=seed, reshuffle_each_iteration=True).repeat()
    if pre.parts and pre.parts != ("standardize",):
        ds = ds.map(pre.augment, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch_size, drop_remainder=True, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(pre.finish, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def eval_dataset(split: Split, pre: Preprocess, batch_size: int):
    """The whole split once, in order."""
    ds = split.dataset().batch(batch_size, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.map(pre.finish, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
