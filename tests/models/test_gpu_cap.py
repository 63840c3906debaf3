"""A zoo job with a share of a GPU: its trainer tells TensorFlow to make the GPU one logical device of exactly its
share before anything touches a device (models.trainer.cap_gpu_memory), and the frameworks' knobs a command job gets
(models.protocol.share_env)."""

import pytest

from models import protocol

pytestmark = pytest.mark.xdist_group("tensorflow")  # (TensorFlow in this process: tests/conftest.py)


class OneGpuConfig:
    """tf.config as it is on a host with one GPU (this machine has none: a FAKE device list), recording what
    TensorFlow is told; the configuration objects are TensorFlow's own."""

    def __init__(self, tf):
        self.LogicalDeviceConfiguration = tf.config.LogicalDeviceConfiguration
        self.told: list[tuple[object, list]] = []

    def list_physical_devices(self, kind: str) -> list[str]:
        return ["/physical_device:GPU:0"] if kind == "GPU" else []

    def set_logical_device_configuration(self, device, configs) -> None:
        self.told.append((device, configs))


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported by the tests that use it (not when every test process collects this module: the
    trainer imports it too)."""
    import tensorflow

    return tensorflow


def cap_gpu_memory(config, env):
    from models.trainer import cap_gpu_memory

    return cap_gpu_memory(config, env)


def test_the_trainer_makes_its_gpu_a_logical_device_of_exactly_its_share(tf):
    config = OneGpuConfig(tf)
    said = cap_gpu_memory(config, {protocol.GPU_MEMORY_ENV: str(10 << 30)})
    assert said == "gpu_memory: TensorFlow's GPU capped at 10240 MiB (a logical device with memory_limit)"
    [(device, configs)] = config.told
    assert device == "/physical_device:GPU:0"
    assert [c.memory_limit for c in configs] == [10240]
    assert isinstance(configs[0], tf.config.LogicalDeviceConfiguration)


def test_no_share_tells_tensorflow_nothing_and_no_gpu_is_said_plainly(tf):
    config = OneGpuConfig(tf)
    assert cap_gpu_memory(config, {}) is None and config.told == []
    said = cap_gpu_memory(tf.config, {protocol.GPU_MEMORY_ENV: str(1 << 30)})  # (the real one: no GPU here)
    assert said == "gpu_memory 1024 MiB: TensorFlow sees no GPU here, nothing to cap"


def test_a_share_is_told_its_bytes_and_the_frameworks_knobs():
    assert protocol.share_env(None, None) == {}
    assert protocol.share_env(10 << 30, 0.1256) == {
        "GPUDECK_GPU_MEMORY": str(10 << 30),
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.1256",
    }
