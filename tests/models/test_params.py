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


def test_a_divergence_warning_needs_a_loss_that_grew_by_orders_and_an_accuracy_at_chance():
    """Issue 25 #15: the README's plain SGD at a huge lr can end without a NaN at a loss of 1e10 and chance
    accuracy; that run is warned of. A loss that grew but learned, or one at chance that never grew, is not."""
    from models.reporting import divergence_warning

    said = divergence_warning(2.3, 9.6e9, 0.0996, 10, 100.0)
    assert said and "grew from 2.3 to 9.6e+09" in said and "0.100" in said and "lr (this run: 100.0)" in said
    assert divergence_warning(2.3, 2.3e4, 0.12, 10, 1.0)  # three orders, within 1.5x chance
    assert divergence_warning(2.3, 2.2e3, 0.10, 10, 1.0) is None  # not quite three orders
    assert divergence_warning(2.3, 9.6e9, 0.9, 10, 1.0) is None  # it grew, then learned
    assert divergence_warning(2.3, 2.3, 0.1, 10, 0.001) is None  # chance, but it never grew: too short a run
    assert divergence_warning(None, None, 0.1, 10, 1.0) is None  # no metric point
    assert divergence_warning(0.0, 5.0, 0.1, 10, 1.0) is None
