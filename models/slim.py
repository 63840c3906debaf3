"""Slim classifiers by their nets_factory names: keras.applications where Keras has the net, else built here."""

from __future__ import annotations

import keras
from keras import layers

APPLICATIONS = {
    "vgg_16": "VGG16",
    "vgg_19": "VGG19",
    "resnet_v1_50": "ResNet50",
    "resnet_v2_50": "ResNet50V2",
    "inception_v3": "InceptionV3",
    "mobilenet_v1": "MobileNet",
    "mobilenet_v2": "MobileNetV2",
}
"""Slim names whose architecture keras.applications ships (built with weights=None: nothing is downloaded)."""


def _l2(weight_decay: float):
    return keras.regularizers.L2(weight_decay / 2) if weight_decay else None


def application(
    input_shape: tuple[int, int, int], num_classes: int, *, net: str, weight_decay: float = 0.0
) -> keras.Model:
    """A keras.applications net with random weights and a logits head of `num_classes`."""
    builder = getattr(keras.applications, APPLICATIONS[net])
    model = builder(
        include_top=True, weights=None, input_shape=input_shape, classes=num_classes, classifier_activation=None
    )
    if weight_decay:  # keras.applications take no regularizer argument; put one on every kernel variable
        for layer in model.layers:
            for attr in ("kernel", "depthwise_kernel"):
                kernel = getattr(layer, attr, None)
                if kernel is not None:
                    kernel.regularizer = _l2(weight_decay)
    return keras.Model(model.inputs, model.outputs, name=net)


def lenet(input_shape: tuple[int, int, int], num_classes: int, *, weight_decay: float = 0.0) -> keras.Model:
    """slim's lenet: conv5x5/32, pool, conv5x5/64, pool, fc1024, dropout 0.5, logits."""
    reg = _l2(weight_decay)
    inputs = keras.Input(shape=input_shape, name="image")
    x = layers.Conv2D(32, 5, padding="same", activation="relu", kernel_regularizer=reg, name="conv1")(inputs)
    x = layers.MaxPooling2D(2, name="pool1")(x)
    x = layers.Conv2D(64, 5, padding="same", activation="relu", kernel_regularizer=reg, name="conv2")(x)
    x = layers.MaxPooling2D(2, name="pool2")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(1024, activation="relu", kernel_regularizer=reg, name="fc3")(x)
    x = layers.Dropout(0.5, name="dropout3")(x)
    outputs = layers.Dense(num_classes, kernel_regularizer=reg, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="lenet")


@keras.saving.register_keras_serializable(package="gpudeck")
class LocalResponseNorm(layers.Layer):
    """tf.nn.local_response_normalization as cifarnet uses it (depth_radius 4, bias 1, alpha 0.001/9, beta 0.75)."""

    def __init__(self, depth_radius: int = 4, bias: float = 1.0, alpha: float = 0.001 / 9.0, beta: float = 0.75, **kw):
        super().__init__(**kw)
        self.depth_radius, self.bias, self.alpha, self.beta = depth_radius, bias, alpha, beta

    def call(self, x):
        import tensorflow as tf

        return tf.nn.local_response_normalization(x, self.depth_radius, self.bias, self.alpha, self.beta)

    def get_config(self):
        return {
            **super().get_config(),
            "depth_radius": self.depth_radius,
            "bias": self.bias,
            "alpha": self.alpha,
            "beta": self.beta,
        }


def cifarnet(input_shape: tuple[int, int, int], num_classes: int, *, weight_decay: float = 0.0) -> keras.Model:
    """slim's cifarnet: conv5x5/64, pool3/2, LRN, conv5x5/64, LRN, pool3/2, fc384, fc192, logits."""
    reg = _l2(weight_decay)
    inputs = keras.Input(shape=input_shape, name="image")
    x = layers.Conv2D(64, 5, padding="same", activation="relu", kernel_regularizer=reg, name="conv1")(inputs)
    x = layers.MaxPooling2D(3, 2, padding="same", name="pool1")(x)
    x = LocalResponseNorm(name="norm1")(x)
    x = layers.Conv2D(64, 5, padding="same", activation="relu", kernel_regularizer=reg, name="conv2")(x)
    x = LocalResponseNorm(name="norm2")(x)
    x = layers.MaxPooling2D(3, 2, padding="same", name="pool2")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(384, activation="relu", kernel_regularizer=reg, name="fc3")(x)
    x = layers.Dropout(0.5, name="dropout3")(x)
    x = layers.Dense(192, activation="relu", kernel_regularizer=reg, name="fc4")(x)
    outputs = layers.Dense(num_classes, kernel_regularizer=reg, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="cifarnet")


def alexnet_v2(input_shape: tuple[int, int, int], num_classes: int, *, weight_decay: float = 0.0) -> keras.Model:
    """slim's alexnet_v2: the one-tower AlexNet with its fully connected layers as convolutions."""
    reg = _l2(weight_decay)

    def conv(x, filters, size, name, strides=1, padding="same"):
        return layers.Conv2D(
            filters, size, strides=strides, padding=padding, activation="relu", kernel_regularizer=reg, name=name
        )(x)

    inputs = keras.Input(shape=input_shape, name="image")
    x = conv(inputs, 64, 11, "conv1", strides=4, padding="valid")
    x = layers.MaxPooling2D(3, 2, name="pool1")(x)
    x = conv(x, 192, 5, "conv2")
    x = layers.MaxPooling2D(3, 2, name="pool2")(x)
    x = conv(x, 384, 3, "conv3")
    x = conv(x, 384, 3, "conv4")
    x = conv(x, 256, 3, "conv5")
    x = layers.MaxPooling2D(3, 2, name="pool5")(x)
    x = conv(x, 4096, 5, "fc6", padding="valid")
    x = layers.Dropout(0.5, name="dropout6")(x)
    x = conv(x, 4096, 1, "fc7")
    x = layers.Dropout(0.5, name="dropout7")(x)
    x = layers.Conv2D(num_classes, 1, kernel_regularizer=reg, name="fc8")(x)
    x = layers.GlobalAveragePooling2D(name="squeeze")(x)  # 1x1 at 224, as slim's spatial_squeeze
    outputs = layers.Activation("linear", dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="alexnet_v2")
