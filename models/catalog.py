"""Which models and datasets exist, without importing TensorFlow (the API serves this)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from models import params as params_mod


@dataclass(frozen=True)
class ModelInfo:
    """A catalog entry: how to build the model and what it expects."""

    name: str
    family: str
    builder: str  # "module:function", imported only when a model is built
    input_shape: tuple[int, int, int]
    min_size: int
    description: str
    hp: tuple[tuple[str, Any], ...] = ()
    parameters: int = 0  # at input_shape and `classes` classes; tests/models check it against the builder
    classes: int = 10

    def describe(self) -> dict[str, Any]:
        """JSON form for GET /api/v1/models."""
        return {
            "name": self.name,
            "family": self.family,
            "input_shape": list(self.input_shape),
            "min_input_size": self.min_size,
            "parameters": self.parameters,
            "parameters_at_classes": self.classes,
            "aliases": sorted(a for a, n in ALIASES.items() if n == self.name),
            "description": self.description,
            "params": {
                k: {**p.describe(), "default": params_mod.defaults(self.name)[k]} for k, p in params_mod.PARAMS.items()
            },
        }


RESNET_PARAMETERS = {20: 271_098, 32: 466_426, 44: 661_754, 56: 857_082, 110: 1_736_058}
"""Exact counts at 32x32x3 and 10 classes (He et al. 2015: 0.27M, 0.46M, 0.66M, 0.85M, 1.7M); v2 has the same."""


def _resnets() -> dict[str, ModelInfo]:
    out = {}
    for depth, count in RESNET_PARAMETERS.items():
        for version, what in (("", "v1 (He et al. 2015)"), ("_v2", "v2 pre-activation")):
            name = f"resnet{depth}{version}"
            out[name] = ModelInfo(
                name=name,
                family="cifar_resnet",
                builder="models.resnet_cifar:build",
                input_shape=(32, 32, 3),
                min_size=8,
                description=f"CIFAR ResNet-{depth} {what}, depth 6n+2 with n={(depth - 2) // 6}",
                hp=(("depth", depth), ("version", 2 if version else 1)),
                parameters=count,
            )
    return out


def _slim() -> dict[str, ModelInfo]:
    # name: (default input, min side, parameters at that input, classes they were counted at, description)
    hand = {
        "lenet": ((28, 28, 1), 28, 3_274_634, 10, "slim's LeNet-5 style net"),
        "cifarnet": ((32, 32, 3), 24, 1_756_426, 10, "slim's cifarnet (conv-pool-LRN x2, fc384, fc192)"),
        "alexnet_v2": ((224, 224, 3), 195, 50_303_912, 1000, "slim's one-tower AlexNet v2"),
    }
    apps = {
        "vgg_16": ((224, 224, 3), 32, 138_357_544, 1000, "VGG-16 (keras.applications.VGG16)"),
        "vgg_19": ((224, 224, 3), 32, 143_667_240, 1000, "VGG-19 (keras.applications.VGG19)"),
        "resnet_v1_50": ((224, 224, 3), 32, 25_636_712, 1000, "ResNet-50 v1 (keras.applications.ResNet50)"),
        "resnet_v2_50": ((224, 224, 3), 32, 25_613_800, 1000, "ResNet-50 v2 (keras.applications.ResNet50V2)"),
        "inception_v3": ((299, 299, 3), 75, 23_851_784, 1000, "Inception v3 (keras.applications.InceptionV3)"),
        "mobilenet_v1": ((224, 224, 3), 32, 4_253_864, 1000, "MobileNet v1 (keras.applications.MobileNet)"),
        "mobilenet_v2": ((224, 224, 3), 32, 3_538_984, 1000, "MobileNet v2 (keras.applications.MobileNetV2)"),
    }
    out = {n: ModelInfo(n, "slim", f"models.slim:{n}", s, m, d, (), p, k) for n, (s, m, p, k, d) in hand.items()}
    out |= {
        n: ModelInfo(n, "slim", "models.slim:application", s, m, d, (("net", n),), p, k)
        for n, (s, m, p, k, d) in apps.items()
    }
    return out


MODELS: dict[str, ModelInfo] = {**_resnets(), **_slim()}

ALIASES = {
    "resnet50": "resnet_v1_50",
    "resnet50_v2": "resnet_v2_50",
    "vgg16": "vgg_16",
    "vgg19": "vgg_19",
    "inception3": "inception_v3",
    "mobilenet": "mobilenet_v1",
    "alexnet": "alexnet_v2",
}
"""Names MLSteam and Keras users type, mapped to the slim names."""


def model_info(name: str) -> ModelInfo | None:
    """The catalog entry for a model name or alias."""
    return MODELS.get(ALIASES.get(name, name))


SYNTHETIC = re.compile(r"^synthetic(?::(\d+)x(\d+)x(\d+)(?::(\d+))?)?$")
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
"""A stored dataset's name, and its version's form too (`cifar10`, `1.0.0`)."""
STORED = re.compile(rf"^({NAME})(?::({NAME}))?$")


@dataclass(frozen=True)
class DatasetRef:
    """A parsed `dataset` field of a job spec."""

    kind: str  # "synthetic", "path" or "stored" (an uploaded dataset: name, version or None for the newest)
    shape: tuple[int, int, int] = (32, 32, 3)
    num_classes: int = 10
    path: str = ""
    name: str = ""
    version: str | None = None


def parse_dataset(value: Any) -> DatasetRef:
    """Parse a spec's dataset (`synthetic`, `synthetic:HxWxC[:K]`, an uploaded `name[:version]`, an absolute
    path); ValueError says what is wrong."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string, got {value!r}")
    if value.startswith("/"):
        return DatasetRef("path", path=value)
    m = SYNTHETIC.match(value)
    if m:
        if m.group(1):
            h, w, c = (int(m.group(i)) for i in (1, 2, 3))
            k = int(m.group(4) or 10)
            if not (1 <= h <= 1024 and 1 <= w <= 1024 and c in (1, 3) and 2 <= k <= 10_000):
                raise ValueError("synthetic:HxWxC[:K] needs H, W in 1..1024, C of 1 or 3 and K in 2..10000")
            return DatasetRef("synthetic", (h, w, c), k)
        return DatasetRef("synthetic")
    m = STORED.match(value)
    if m and m.group(1) != "synthetic":
        return DatasetRef("stored", name=m.group(1), version=m.group(2))
    raise ValueError(
        f"unknown dataset {value!r}; give synthetic, synthetic:HxWxC[:classes], an uploaded NAME[:VERSION] "
        "or an absolute server path"
    )
