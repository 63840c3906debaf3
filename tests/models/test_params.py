"""Training params: every problem named by field."""

import pytest

from models import params
from models.catalog import parse_dataset


def test_valid_params_have_no_problems():
    assert params.validate({"steps": 20, "batch_size": 32, "lr": 1, "optimizer": "adam"}) == {}


@pytest.mark.parametrize(
    "given, field, words",
    [
        ({"steps": "20"}, "params.steps", "integer"),
        ({"steps": True}, "params.steps", "integer"),
        ({"steps": 0}, "params.steps", ">= 1"),
        ({"lr": "fast"}, "params.lr", "number"),
        ({"optimizer": "sgdx"}, "params.optimizer", "one of"),
        ({"bogus": 1}, "params.bogus", "unknown param"),
        ({"epochs": 1, "steps": 2}, "params.steps", "not both"),
    ],
)
def test_problems_are_named(given, field, words):
    problems = params.validate(given)
    assert field in problems and words in problems[field]


def test_resolve_fills_defaults_and_one_epoch():
    p = params.resolve({"batch_size": 16})
    assert p["batch_size"] == 16 and p["epochs"] == 1 and p["steps"] is None and p["optimizer"] == "momentum"


def test_synthetic_dataset_shapes():
    assert parse_dataset("synthetic").shape == (32, 32, 3)
    ref = parse_dataset("synthetic:8x8x1:4")
    assert (ref.shape, ref.num_classes) == ((8, 8, 1), 4)
    for bad in ("synthetic:8x8x2", "my data", "a:b:c", "synthetic:1", "", 3):
        with pytest.raises(ValueError):
            parse_dataset(bad)
