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

    def describe(self) -> dict[str, Any]:
        """JSON form for GET /api/v1/models."""
        return {
            "name": self.name,
            "family": self.family,
            "input_shape": list(self.input_shape),
            "min_input_size": self.min_size,
            "description": self.description,
            "params": {k: p.describe() for k, p in params_mod.PARAMS.items()},
        }


def _resnets() -> dict[str, ModelInfo]:
    out = {}
    for depth in (20, 32, 44, 56, 110):
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
            )
    return out


MODELS: dict[str, ModelInfo] = {
    **_resnets(),
    "lenet": ModelInfo("lenet", "slim", "models.slim:lenet", (28, 28, 1), 28, "slim's LeNet"),
}

SYNTHETIC = re.compile(r"^synthetic(?::(\d+)x(\d+)x(\d+)(?::(\d+))?)?$")


@dataclass(frozen=True)
class DatasetRef:
    """A parsed `dataset` field of a job spec."""

    kind: str
    shape: tuple[int, int, int] = (32, 32, 3)
    num_classes: int = 10


def parse_dataset(value: Any) -> DatasetRef:
    """Parse a job spec's dataset (`synthetic`, `synthetic:HxWxC[:K]`); ValueError says what is wrong."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string, got {value!r}")
    m = SYNTHETIC.match(value)
    if m:
        if m.group(1):
            h, w, c = (int(m.group(i)) for i in (1, 2, 3))
            k = int(m.group(4) or 10)
            if not (1 <= h <= 1024 and 1 <= w <= 1024 and c in (1, 3) and 2 <= k <= 10_000):
                raise ValueError("synthetic:HxWxC[:K] needs H, W in 1..1024, C of 1 or 3 and K in 2..10000")
            return DatasetRef("synthetic", (h, w, c), k)
        return DatasetRef("synthetic")
    raise ValueError(f"unknown dataset {value!r}; known: synthetic, synthetic:HxWxC[:classes]")
