"""CIFAR ResNets after He et al. 2015 (v1) and the pre-activation v2 of cifar10_estimator."""

from __future__ import annotations

import keras
from keras import layers

BN = {"momentum": 0.9, "epsilon": 1e-5}
"""BN's moving statistics follow the batches with a time constant of ~10 steps (PyTorch's default), not Keras's
0.99 (~100 steps) or the references' 0.997: with those, a run of a few hundred steps is evaluated with statistics
that still lag weights that moved, and its validation loss reads in the hundreds while its training accuracy is
high (resnet20, 50 steps on the synthetic set: test loss 187 and accuracy 0.10 at 0.99; 0.011 and 0.99 at 0.9)."""


@keras.saving.register_keras_serializable(package="gpudeck")
class ShortcutA(layers.Layer):
    """The paper's option-A shortcut: subsample spatially, zero-pad the new channels (no parameters)."""

    def __init__(self, filters: int, stride: int, pool: str = "subsample", **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.stride = stride
        self.pool = pool

    def call(self, x):
        if self.stride > 1:
            if self.pool == "avg":
                x = keras.ops.average_pool(x, self.stride, self.stride, padding="valid")
            else:
                x = x[:, :: self.stride, :: self.stride, :]
        extra = self.filters - x.shape[-1]
        if extra > 0:
            x = keras.ops.pad(x, [[0, 0], [0, 0], [0, 0], [extra // 2, extra - extra // 2]])
        return x

    def compute_output_shape(self, shape):
        h, w = shape[1], shape[2]
        if self.stride > 1:
            h = None if h is None else -(-h // self.stride) if self.pool != "avg" else h // self.stride
            w = None if w is None else -(-w // self.stride) if self.pool != "avg" else w // self.stride
        return (shape[0], h, w, self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "stride": self.stride, "pool": self.pool}


def _conv(filters: int, stride: int, name: str, wd: float) -> layers.Conv2D:
    return layers.Conv2D(
        filters,
        3,
        strides=stride,
        padding="same",
        use_bias=False,
        kernel_initializer="he_normal",
        kernel_regularizer=keras.regularizers.L2(wd / 2) if wd else None,
        name=name,
    )


def _block_v1(x, filters: int, stride: int, name: str, wd: float):
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = ShortcutA(filters, stride, name=f"{name}_shortcut")(x)
    y = _conv(filters, stride, f"{name}_conv1", wd)(x)
    y = layers.BatchNormalization(**BN, name=f"{name}_bn1")(y)
    y = layers.ReLU(name=f"{name}_relu1")(y)
    y = _conv(filters, 1, f"{name}_conv2", wd)(y)
    y = layers.BatchNormalization(**BN, name=f"{name}_bn2")(y)
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.ReLU(name=f"{name}_out")(y)


def _block_v2(x, filters: int, stride: int, name: str, wd: float, first: bool):
    # Pre-activation (He et al. 2016): BN-ReLU before each conv; the very first block of the
    # net reuses the stem's activation, as cifar10_estimator does.
    pre = x
    if not first:
        pre = layers.BatchNormalization(**BN, name=f"{name}_bn0")(x)
        pre = layers.ReLU(name=f"{name}_relu0")(pre)
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = ShortcutA(filters, stride, pool="avg", name=f"{name}_shortcut")(pre)
    y = _conv(filters, stride, f"{name}_conv1", wd)(pre)
    y = layers.BatchNormalization(**BN, name=f"{name}_bn1")(y)
    y = layers.ReLU(name=f"{name}_relu1")(y)
    y = _conv(filters, 1, f"{name}_conv2", wd)(y)
    return layers.Add(name=f"{name}_add")([shortcut, y])


def build(
    input_shape: tuple[int, int, int],
    num_classes: int,
    *,
    depth: int = 20,
    version: int = 1,
    weight_decay: float = 0.0,
) -> keras.Model:
    """A CIFAR ResNet of depth 6n+2 (16/32/64 filters, n blocks per stage) giving logits."""
    if (depth - 2) % 6 or depth < 8:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2 (20, 32, 44, 56, 110, ...); got {depth}")
    if version not in (1, 2):
        raise ValueError(f"version must be 1 or 2; got {version}")
    n = (depth - 2) // 6
    name = f"resnet{depth}" + ("_v2" if version == 2 else "")
    inputs = keras.Input(shape=input_shape, name="image")
    x = _conv(16, 1, "stem_conv", weight_decay)(inputs)
    x = layers.BatchNormalization(**BN, name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(n):
            stride = 2 if stage > 0 and block == 0 else 1
            block_name = f"stage{stage + 1}_block{block + 1}"
            if version == 1:
                x = _block_v1(x, filters, stride, block_name, weight_decay)
            else:
                x = _block_v2(x, filters, stride, block_name, weight_decay, first=stage == 0 and block == 0)
    if version == 2:
        x = layers.BatchNormalization(**BN, name="final_bn")(x)
        x = layers.ReLU(name="final_relu")(x)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = layers.Dense(
        num_classes,
        kernel_regularizer=keras.regularizers.L2(weight_decay / 2) if weight_decay else None,
        dtype="float32",
        name="logits",
    )(x)
    return keras.Model(inputs, outputs, name=name)
