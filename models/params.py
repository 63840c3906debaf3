"""The training params a job spec may carry: types, bounds, defaults. Imports no TensorFlow."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Param:
    """One accepted training param."""

    kind: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def check(self, value: Any) -> str | None:
        """None when `value` is acceptable, else what is wrong with it."""
        if self.kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, self.kind)
        if not ok:
            return f"must be {_KIND_NAMES[self.kind]}, got {type(value).__name__} {value!r}"
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}; got {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"must be >= {self.minimum:g}, got {value!r}"
        if self.maximum is not None and value > self.maximum:
            return f"must be <= {self.maximum:g}, got {value!r}"
        return None

    def describe(self) -> dict[str, Any]:
        """JSON form for the models catalog."""
        out: dict[str, Any] = {"type": _KIND_NAMES[self.kind], "default": self.default, "help": self.help}
        if self.choices:
            out["choices"] = list(self.choices)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop")

PARAMS: dict[str, Param] = {
    "epochs": Param(int, None, "passes over the training set (give epochs or steps)", 1, 100_000),
    "steps": Param(int, None, "training steps (give epochs or steps)", 1, 100_000_000),
    "batch_size": Param(int, 128, "global batch size, split across GPUs", 1, 65_536),
    "optimizer": Param(str, "momentum", "optimizer", choices=OPTIMIZERS),
    "lr": Param(float, 0.1, "learning rate", 0, 100),
    "momentum": Param(float, 0.9, "momentum of momentum/nesterov/rmsprop", 0, 1),
    "weight_decay": Param(float, 0.0, "L2 penalty wd * sum(w^2) / 2 on kernels", 0, 1),
    "seed": Param(int, None, "random seed for weights, data order and synthetic data", 0, 2**31 - 1),
    "log_every": Param(int, None, "steps between metric points (default: about 100 points a run)", 1, 1_000_000),
}


def validate(params: Any) -> dict[str, str]:
    """Problems with a params object, keyed by `params.<name>`; empty when it is valid."""
    if not isinstance(params, dict):
        return {"params": f"must be an object, got {type(params).__name__}"}
    errors: dict[str, str] = {}
    for name, value in params.items():
        param = PARAMS.get(name)
        if param is None:
            errors[f"params.{name}"] = f"unknown param; accepted: {', '.join(sorted(PARAMS))}"
            continue
        problem = param.check(value)
        if problem:
            errors[f"params.{name}"] = problem
    if "epochs" in params and "steps" in params:
        errors["params.steps"] = "give epochs or steps, not both"
    return errors


def resolve(params: dict[str, Any]) -> dict[str, Any]:
    """Params with every default filled in (epochs=1 when neither epochs nor steps is given)."""
    out = {name: p.default for name, p in PARAMS.items()}
    out.update(params)
    if out["epochs"] is None and out["steps"] is None:
        out["epochs"] = 1
    return out
