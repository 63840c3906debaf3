"""The training params a job spec may carry: types, bounds, defaults. Imports no TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.common import did_you_mean


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
        if self.kind is list:
            return _check_boundaries(value)
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

    def bounds(self, choices: str = "choices") -> dict[str, Any]:
        """The allowed values: `choices` (under the key given), `minimum`, `maximum`, those that are set."""
        out: dict[str, Any] = {choices: list(self.choices)} if self.choices else {}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out

    def describe(self) -> dict[str, Any]:
        """JSON form for the models catalog."""
        return {"type": _KIND_NAMES[self.kind], "default": self.default, "help": self.help, **self.bounds()}


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list"}

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop")
SCHEDULES = ("constant", "piecewise", "exponential", "cosine")
AUGMENT_PARTS = {
    "none": (),
    "flip": ("flip",),
    "crop": ("crop",),
    "crop_flip": ("crop", "flip"),
    "standardize": ("standardize",),
    "standard": ("crop", "flip", "standardize"),
    "color": ("color",),
}
"""Augment names; `+` combines them (`crop_flip+color`). `standardize` is per-image standardization, applied
at evaluation too; the rest only in training."""

RECIPES: dict[str, dict[str, Any]] = {
    # He et al. 2015, section 4.2: SGD 0.1, momentum 0.9, wd 1e-4, /10 at 32k and 48k of 64k steps, pad-crop-flip.
    "resnet-paper": {
        "optimizer": "momentum",
        "lr": 0.1,
        "momentum": 0.9,
        "weight_decay": 1e-4,
        "batch_size": 128,
        "schedule": "piecewise",
        "boundaries": [0.5, 0.75],
        "augment": "crop_flip",
    },
    # tensorflow/models tutorials/image/cifar10_estimator: wd 2e-4, pad-crop-flip, per-image standardization.
    "cifar10-estimator": {
        "optimizer": "momentum",
        "lr": 0.1,
        "momentum": 0.9,
        "weight_decay": 2e-4,
        "batch_size": 128,
        "schedule": "piecewise",
        "boundaries": [0.5, 0.75],
        "augment": "standard",
    },
    # research/slim train_image_classifier.py defaults: RMSProp (decay 0.9, momentum 0.9, eps 1.0), lr 0.01
    # x0.94 every 2 epochs, label smoothing, moving average of weights, wd 4e-5.
    "slim": {
        "optimizer": "rmsprop",
        "lr": 0.01,
        "momentum": 0.9,
        "epsilon": 1.0,
        "weight_decay": 4e-5,
        "batch_size": 32,
        "schedule": "exponential",
        "decay_rate": 0.94,
        "decay_epochs": 2.0,
        "label_smoothing": 0.1,
        "moving_average": 0.9999,
        "augment": "crop_flip+color",
    },
}


def parse_augment(value: str) -> tuple[str, ...]:
    """The augmentation steps an `augment` param names; ValueError for an unknown name."""
    parts: list[str] = []
    for name in value.split("+"):
        if name not in AUGMENT_PARTS:
            raise ValueError(f"unknown augment {name!r}; known: {', '.join(AUGMENT_PARTS)} (combine with +)")
        parts += [p for p in AUGMENT_PARTS[name] if p not in parts]
    return tuple(parts)


def _check_boundaries(value: Any) -> str | None:
    if not isinstance(value, list) or not value:
        return f"must be a non-empty list of fractions of the run, got {value!r}"
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1 for v in value):
        return f"each boundary must be a number between 0 and 1 (a fraction of the run), got {value!r}"
    if len(set(value)) != len(value):
        return f"each boundary once, got {value!r}"
    return None  # in any order: they are points of the run (the schedule sorts them)


PARAMS: dict[str, Param] = {
    "epochs": Param(
        int,
        None,
        "passes over the training set (give epochs or steps; neither: one epoch, at least 200 steps)",
        1,
        100_000,
    ),
    "steps": Param(int, None, "training steps (give epochs or steps)", 1, 100_000_000),
    "batch_size": Param(int, 128, "global batch size, split across GPUs", 1, 65_536),
    "optimizer": Param(str, "momentum", "optimizer", choices=OPTIMIZERS),
    "lr": Param(float, 0.1, "learning rate", 0, 100),
    "momentum": Param(float, 0.9, "momentum of momentum/nesterov/rmsprop", 0, 1),
    "weight_decay": Param(float, 0.0, "L2 penalty wd * sum(w^2) / 2 on kernels", 0, 1),
    "seed": Param(int, None, "random seed for weights, data order and synthetic data", 0, 2**31 - 1),
    "log_every": Param(int, None, "steps between metric points (default: about 100 points a run)", 1, 1_000_000),
    "recipe": Param(str, None, "named settings that explicit params override", choices=tuple(RECIPES)),
    "augment": Param(str, "none", f"training augmentation: {', '.join(AUGMENT_PARTS)}, combined with +"),
    "schedule": Param(str, "constant", "learning-rate schedule", choices=SCHEDULES),
    "boundaries": Param(list, [0.5, 0.75], "piecewise: fractions of the run where lr is divided by 10"),
    "decay_rate": Param(float, 0.94, "exponential: lr multiplier every decay_epochs", 0, 1),
    "decay_epochs": Param(float, 2.0, "exponential: epochs between decays", 0.001, 10_000),
    "warmup_epochs": Param(float, 0.0, "linear warmup from 0 before any schedule", 0, 10_000),
    "epsilon": Param(float, 1e-7, "optimizer epsilon (adam, adamw, rmsprop)", 0, 10),
    "label_smoothing": Param(float, 0.0, "label smoothing of the cross-entropy", 0, 0.5),
    "moving_average": Param(
        float, 0.0, "decay of a moving average of weights used for evaluation; 0 = off", 0, 0.99999
    ),
    "mixed_precision": Param(bool, False, "float16 compute on GPU (bfloat16 on CPU), float32 weights"),
    "xla": Param(bool, False, "compile the training step with XLA"),
    "grad_accum": Param(int, 1, "accumulate gradients over this many batches per update", 1, 1024),
    "remat": Param(bool, False, "recompute activations in the backward pass to save memory"),
    "stop_on_nonfinite": Param(
        bool, True, "end the job as diverged when the training loss becomes NaN or infinite; false trains on"
    ),
}


def validate(params: Any) -> dict[str, str]:
    """Problems with a params object, keyed by `params.<name>`; empty when it is valid."""
    if not isinstance(params, dict):
        return {"params": f"must be an object, got {type(params).__name__}"}
    errors: dict[str, str] = {}
    for name, value in params.items():
        param = PARAMS.get(name)
        if param is None:
            hint = did_you_mean(name, PARAMS)
            errors[f"params.{name}"] = f"unknown param; {hint}accepted: {', '.join(sorted(PARAMS))}"
            continue
        problem = param.check(value)
        if problem is None and name == "augment":
            try:
                parse_augment(value)
            except ValueError as exc:
                problem = str(exc)
        if problem:
            errors[f"params.{name}"] = problem
    if "epochs" in params and "steps" in params:
        errors["params.steps"] = "give epochs or steps, not both"
    return errors


DEFAULT_MIN_STEPS = 200
"""A job that gives neither epochs nor steps trains one epoch, but no fewer steps than this: one epoch of a small
set (the synthetic one is 16 steps at the default batch) teaches a model nothing, and a first run should show
learning."""


def total_steps(params: dict[str, Any], resolved: dict[str, Any], steps_per_epoch: int) -> int:
    """The steps a run trains: `steps`, else `epochs` of `steps_per_epoch`; given neither (in `params`, as the job
    spec has them), one epoch and at least DEFAULT_MIN_STEPS."""
    if resolved["steps"] is not None:
        return resolved["steps"]
    if params.get("epochs") is None and params.get("steps") is None:
        return max(resolved["epochs"] * steps_per_epoch, DEFAULT_MIN_STEPS)
    return resolved["epochs"] * steps_per_epoch


MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    # slim's LeNet trains at SGD 0.01 (train_lenet_on_mnist.sh); momentum 0.9 at the zoo's 0.1 made its 1,024-wide
    # fully connected layer die on some seeds (test accuracy at chance). At 0.01 every seed learns.
    "lenet": {"lr": 0.01},
}
"""Where a model's own defaults differ from PARAMS' (GET /api/v1/models shows each model's)."""


def defaults(model: str | None = None) -> dict[str, Any]:
    """Every param's default, for `model` where it has its own."""
    return {name: p.default for name, p in PARAMS.items()} | MODEL_DEFAULTS.get(model or "", {})


def resolve(params: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """Defaults (the model's own where it has them), then the recipe's settings, then the explicit params
    (epochs=1 when neither epochs nor steps)."""
    out = defaults(model)
    out.update(RECIPES.get(params.get("recipe") or "", {}))
    out.update(params)
    if out["epochs"] is None and out["steps"] is None:
        out["epochs"] = 1
    return out
