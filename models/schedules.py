"""Learning-rate schedules: constant, piecewise (/10 at fractions), exponential (slim), cosine; linear warmup."""

from __future__ import annotations

import math

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="gpudeck")
class Schedule(keras.optimizers.schedules.LearningRateSchedule):
    """One schedule object for every kind, so the optimizer and checkpoints see the same type."""

    def __init__(
        self,
        lr: float,
        kind: str,
        total_steps: int,
        steps_per_epoch: int,
        boundaries: list[float] | None = None,
        decay_rate: float = 0.94,
        decay_epochs: float = 2.0,
        warmup_steps: int = 0,
    ):
        self.lr = float(lr)
        self.kind = kind
        self.total_steps = max(1, int(total_steps))
        self.steps_per_epoch = max(1, int(steps_per_epoch))
        self.boundaries = sorted(boundaries or [0.5, 0.75])  # points of the run: the order given does not matter
        self.decay_rate = float(decay_rate)
        self.decay_epochs = float(decay_epochs)
        self.warmup_steps = int(warmup_steps)

    def value(self, step: float) -> float:
        """The learning rate at `step`, in plain Python (the same formula as __call__)."""
        return float(self(tf.constant(step, tf.float32)))

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        lr = tf.constant(self.lr, tf.float32)
        if self.kind == "piecewise":
            for b in self.boundaries:
                lr = tf.where(step >= round(b * self.total_steps), lr / 10.0, lr)
        elif self.kind == "exponential":
            every = self.decay_epochs * self.steps_per_epoch
            lr = lr * tf.pow(self.decay_rate, tf.floor(step / every))  # staircase, as slim
        elif self.kind == "cosine":
            span = max(1, self.total_steps - self.warmup_steps)
            done = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
            lr = lr * 0.5 * (1.0 + tf.cos(math.pi * done))
        if self.warmup_steps:
            lr = tf.where(step < self.warmup_steps, self.lr * (step + 1) / self.warmup_steps, lr)
        return lr

    def get_config(self):
        return {
            "lr": self.lr,
            "kind": self.kind,
            "total_steps": self.total_steps,
            "steps_per_epoch": self.steps_per_epoch,
            "boundaries": self.boundaries,
            "decay_rate": self.decay_rate,
            "decay_epochs": self.decay_epochs,
            "warmup_steps": self.warmup_steps,
        }
