"""Slim classifiers by their nets_factory names (the ones Keras does not ship)."""
from __future__ import annotations

import keras
from keras import layers


def lenet(input_shape: tuple[int, int, int], num_classes: int, *, weight_decay: float = 0.0) -> keras.Model:
    """slim's lenet: conv5x5/32, pool, conv5x5/64, pool, fc1024, dropout 0.5, logits."""
    reg = keras.regularizers.L2(weight_decay / 2) if weight_decay else None
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
