"""Spec normalization and queue routing."""

import pytest

from jobs import keys, spec
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
        "chief": False,
        "after": [],
        "preemptible": True,
    }


def test_every_bad_field_is_reported_at_once():
    with pytest.raises(ValidationError) as err:
        spec.validate({"model": "x", "dataset": 5, "gpus": 99, "extra": 1}, default_gpus=0)
    assert set(err.value.fields) == {"model", "dataset", "gpus", "extra"}
    assert "(and 3 more)" in err.value.message


def test_multi_worker_fields_are_checked():
    base = {"model": "resnet20", "dataset": "synthetic"}
    ok = spec.validate({**base, "workers": 3, "chief": True}, default_gpus=0)
    assert ok["workers"] == 3 and ok["chief"] is True
    for bad, message in [
        ({"workers": 0}, "workers: must be between 1 and 64, got 0"),
        ({"workers": "2"}, "workers: must be an integer, got str '2'"),
        ({"workers": True}, "workers: must be an integer, got bool True"),
        ({"chief": "yes", "workers": 2}, "chief: must be true or false, got 'yes'"),
        ({"chief": True}, "chief: needs workers of 2 or more"),
    ]:
        with pytest.raises(ValidationError, match=message):
            spec.validate({**base, **bad}, default_gpus=0)


def test_queue_names_by_gpus_and_priority():
    assert keys.queue_name(0, "normal") == "cpu"
    assert keys.queue_name(1, "high") == "gpus-1-high"


@pytest.mark.parametrize("name", ["PATH", "VIRTUAL_ENV", "HOME", "REDIS_URL", "GPUDECK_TOKENS", "GPUDECK_JOB_ID"])
def test_a_job_env_may_not_set_what_gpudeck_sets_or_owns(name):
    """Issue 23 #10: the variables gpudeck sets and the service's own settings are refused by name."""
    with pytest.raises(ValidationError) as err:
        spec.validate({"command": "true", "env": {name: "x"}}, default_gpus=0, commands_allowed=True)
    assert "env" in err.value.fields and name in err.value.fields["env"]


def test_a_job_env_may_set_what_reaches_only_its_own_processes():
    ok = {"LD_PRELOAD": "/x.so", "LD_LIBRARY_PATH": "/opt/lib", "PYTHONPATH": "src", "MY_SETTING": "1"}
    assert spec.validate({"command": "true", "env": ok}, default_gpus=0, commands_allowed=True)["env"] == ok
