"""Build any catalog model by name (imports TensorFlow through the builder's module)."""

from __future__ import annotations

import importlib

import keras

from models.catalog import MODELS, model_info


def build(name: str, input_shape: tuple[int, int, int], num_classes: int, **hp) -> keras.Model:
    """The catalog model `name` (or an alias), with its own hyper-params plus `hp` (e.g. weight_decay)."""
    info = model_info(name)
    if info is None:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    module, func = info.builder.split(":")
    builder = getattr(importlib.import_module(module), func)
    return builder(input_shape, num_classes, **dict(info.hp), **hp)
