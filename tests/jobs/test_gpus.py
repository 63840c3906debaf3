"""`nvidia-smi -L` parsing, against a FAKE nvidia-smi that prints the real format (no GPUs here)."""

import os

import pytest

from jobs.gpus import SAMPLE_TTL_S, Sampler, list_gpus, read_all, sample_ttl
from jobs.keys import gpus_key
from tests.support.live import fake_nvidia_smi

REAL_L_OUTPUT = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e1d2c3a-1111-2222-3333-444455556666)
GPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-0a0b0c0d-aaaa-bbbb-cccc-ddddeeeeffff)
"""


def test_lists_gpus_from_nvidia_smi(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path / "bin", f"cat <<'OUT'\n{REAL_L_OUTPUT}OUT\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    assert list_gpus() == [
        {"index": "0", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5e1d2c3a-1111-2222-3333-444455556666"},
        {"index": "1", "name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-0a0b0c0d-aaaa-bbbb-cccc-ddddeeeeffff"},
    ]


def test_no_gpus_when_nvidia_smi_fails_or_is_missing(tmp_path, monkeypatch):
    fake_nvidia_smi(
        tmp_path / "bin",
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert list_gpus() == []
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert list_gpus() == []


MIG_L_OUTPUT = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-e91edf3b-b297-37c1-a2a7-7601c98e4fcd)
  MIG 3g.20gb     Device  0: (UUID: MIG-4c8ba8e8-bcb1-5b3a-b6d3-8f1bb7b8d3ad)
  MIG 1g.5gb      Device  1: (UUID: MIG-9f1bb7b8-0000-5b3a-b6d3-4c8ba8e8d3ad)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0a0b0c0d-aaaa-bbbb-cccc-ddddeeeeffff)
"""


def test_mig_instances_are_devices_of_their_own_in_place_of_their_gpu(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path / "bin", f"cat <<'OUT'\n{MIG_L_OUTPUT}OUT\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    a, b = "MIG-4c8ba8e8-bcb1-5b3a-b6d3-8f1bb7b8d3ad", "MIG-9f1bb7b8-0000-5b3a-b6d3-4c8ba8e8d3ad"
    assert list_gpus() == [
        {"index": a, "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "uuid": a, "parent": "0"},
        {"index": b, "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "uuid": b, "parent": "0"},
        {"index": "1", "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-0a0b0c0d-aaaa-bbbb-cccc-ddddeeeeffff"},
    ]


SLOW_SMI = """\
case "$*" in
  *utilization.gpu*) sleep 3; printf '0, GPU-0000, NVIDIA H100 80GB HBM3, 0, 0, 81559, 40, 70.0, 700.00\\n' ;;
esac
exit 0
"""
"""A FAKE nvidia-smi (none exists here) that takes 3 s to read its one GPU, as a real one can on a loaded box."""


@pytest.mark.slow
def test_a_slow_hosts_sample_stays_until_its_next_one_can_come(tmp_path, monkeypatch, redis_url, redis):
    """Live GPUs must not vanish from /gpus between two samples where nvidia-smi is slow: a host's sample stays
    three rounds as long as its last one took (and SAMPLE_TTL_S where rounds are quick: a dead host's GPUs go)."""
    fake_nvidia_smi(tmp_path / "bin", SLOW_SMI)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    sampler = Sampler(redis_url, host="slow-host")
    sampler.once()  # (a round, timed, as its thread runs it)
    assert sampler.last_round_s >= 3
    assert 0 < redis.ttl(gpus_key("slow-host")) <= SAMPLE_TTL_S  # (the first: no round was timed yet)
    sampler.once()  # (a round, timed, as its thread runs it)
    assert redis.ttl(gpus_key("slow-host")) >= sample_ttl(3) - 2 > SAMPLE_TTL_S  # (3 × (2 s + 3 s), less the rest)
    assert [g["uuid"] for h in read_all(redis) for g in h["gpus"]] == ["GPU-0000"]
    assert sample_ttl(0.2) == SAMPLE_TTL_S
