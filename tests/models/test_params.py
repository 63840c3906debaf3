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


def test_a_loss_that_exploded_before_its_first_point_is_judged_against_an_untrained_model():
    """Issue 42 #2: lenet at lr 100 logged 4.5e20 first and 4.5e21 at its peak: against its first point it grew
    only tenfold, against what an untrained model scores (ln 10 = 2.30) by twenty orders. A test loss above the
    untrained model's says it learned nothing even where test accuracy is a little above chance."""
    from models.reporting import divergence_warning

    said = divergence_warning(4.5e20, 4.5e21, 0.0996, 10, 100.0)
    assert said and "grew to 4.5e+21 from an untrained model's 2.3 (ln 10; its first logged: 4.5e+20)" in said
    said = divergence_warning(3.3e10, 3.3e11, 0.17, 10, 100.0, test_loss=89.3)
    assert said and "its test loss 89.3 is above an untrained model's (test accuracy 0.170)" in said
    assert divergence_warning(3.3e10, 3.3e11, 0.17, 10, 100.0, test_loss=1.2) is None  # above chance, loss low: learned
    assert divergence_warning(2.3, 3.3e11, 0.9, 10, 100.0, test_loss=0.3) is None


def test_a_loss_that_is_not_finite_is_always_a_warning():
    """Issue 67 #6: lenet at lr 100 with stop_on_nonfinite=false ended `succeeded` with a NaN loss and no warning
    (the divergence check reads a NaN as no growth). The trainer's result now says so, whatever else it holds."""
    from models.reporting import nonfinite_warning

    finite = {"test_accuracy": 0.99, "test_loss": 0.05}
    assert nonfinite_warning(finite, 0.1) is None
    assert "final training loss is nan" in nonfinite_warning(finite, float("nan"))
    assert "result's test_loss is inf" in nonfinite_warning({**finite, "test_loss": float("inf")}, 0.1)
