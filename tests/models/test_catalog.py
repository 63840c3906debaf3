"""The catalog the API serves matches what the builders build."""

import pytest

from models.catalog import ALIASES, MODELS, model_info

# keras.applications' published counts (ImageNet, 1000 classes) and slim's nets.
PUBLISHED = {
    "vgg_16": 138_357_544,
    "vgg_19": 143_667_240,
    "resnet_v1_50": 25_636_712,
    "resnet_v2_50": 25_613_800,
    "inception_v3": 23_851_784,
    "mobilenet_v1": 4_253_864,
    "mobilenet_v2": 3_538_984,
}

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tensorflow")]  # (TensorFlow here: tests/conftest.py)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_catalog_counts_and_shapes_are_the_builders(name):
    from models import zoo  # (TensorFlow: imported by the tests that build, not where tests are collected)

    info = MODELS[name]
    model = zoo.build(name, info.input_shape, info.classes)
    assert model.count_params() == info.parameters
    assert model.output_shape == (None, info.classes)
    if name in PUBLISHED:
        assert info.parameters == PUBLISHED[name]


@pytest.mark.parametrize("name", ["inception_v3", "alexnet_v2", "mobilenet_v2", "cifarnet"])
def test_smallest_input_builds(name):
    from models import zoo

    info = MODELS[name]
    model = zoo.build(name, (info.min_size, info.min_size, 3), 5)
    assert model.output_shape == (None, 5)


def test_aliases_users_type():
    assert model_info("resnet50").name == "resnet_v1_50" and model_info("vgg16").name == "vgg_16"
    assert all(model_info(a) is not None for a in ALIASES)
    assert MODELS["vgg_16"].describe()["aliases"] == ["vgg16"]
