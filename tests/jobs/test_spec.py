"""Spec normalization and queue routing."""

import pytest

from jobs import queues, spec
from jobs.errors import ValidationError


def test_defaults_are_filled_in():
    s = spec.validate({"model": "lenet", "dataset": "synthetic:28x28x1"}, default_gpus=1)
    assert s == {
        "model": "lenet",
        "dataset": "synthetic:28x28x1",
        "params": {},
        "gpus": 1,
        "name": "lenet",
        "tags": [],
        "priority": "normal",
        "timeout": None,
        "max_retries": 1,
        "workers": 1,
    }


def test_every_bad_field_is_reported_at_once():
    with pytest.raises(ValidationError) as err:
        spec.validate({"model": "x", "dataset": "y", "gpus": 99, "extra": 1}, default_gpus=0)
    assert set(err.value.fields) == {"model", "dataset", "gpus", "extra"}
    assert "(and 3 more)" in err.value.message


def test_multi_worker_jobs_are_refused_for_now():
    with pytest.raises(ValidationError, match="workers: must be 1"):
        spec.validate({"model": "resnet20", "dataset": "synthetic", "workers": 2}, default_gpus=0)


def test_queue_names_by_gpus_and_priority():
    assert queues.queue_name(0, "normal") == "cpu"
    assert queues.queue_name(1, "high") == "gpus-1-high"
    assert queues.worker_queues(2) == ["gpus-2-high", "gpus-2", "gpus-2-low"]
