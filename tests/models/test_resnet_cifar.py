"""CIFAR ResNets: parameter counts of He et al. 2015 (Table 6) and output shapes."""

import importlib

import pytest

pytestmark = pytest.mark.xdist_group("tensorflow")  # (TensorFlow in this process: tests/conftest.py)


@pytest.fixture(scope="module")
def zoo():
    """The model zoo (TensorFlow: imported by these tests, not when every test process collects this module)."""
    return importlib.import_module("models.zoo")


# The paper's counts: 0.27M, 0.46M, 0.66M, 0.85M, 1.7M (option-A shortcuts have no parameters).
PAPER = {20: 0.27e6, 32: 0.46e6, 44: 0.66e6, 56: 0.85e6, 110: 1.7e6}


@pytest.mark.parametrize("depth", sorted(PAPER))
@pytest.mark.parametrize("suffix", ["", "_v2"])
def test_parameter_counts_match_the_paper(depth, suffix, zoo):
    model = zoo.build(f"resnet{depth}{suffix}", (32, 32, 3), 10)
    assert model.count_params() == pytest.approx(PAPER[depth], rel=0.03)
    assert model.output_shape == (None, 10)


def test_exact_counts_of_resnet20(zoo):
    # 3x3 convs without bias + BN (4 params per channel, 2 trainable) + a 64x10 dense layer.
    assert zoo.build("resnet20", (32, 32, 3), 10).count_params() == 271_098
    assert zoo.build("resnet20", (32, 32, 3), 100).count_params() == 271_098 + 90 * 65


def test_other_input_shapes_and_class_counts(zoo):
    model = zoo.build("resnet20_v2", (8, 8, 1), 7)
    assert model.input_shape == (None, 8, 8, 1)
    assert model.output_shape == (None, 7)


def test_bad_depth_is_refused_with_what_was_received():
    from models import resnet_cifar

    with pytest.raises(ValueError, match="6n\\+2.*got 21"):
        resnet_cifar.build((32, 32, 3), 10, depth=21)


def test_unknown_model_names_the_known_ones(zoo):
    with pytest.raises(KeyError, match="resnet20"):
        zoo.build("resnet21", (32, 32, 3), 10)
