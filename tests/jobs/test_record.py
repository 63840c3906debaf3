"""The engine's typed views of a kept spec and a job record (jobs.record): a stored value, or the declared default
where it is missing or null; nothing copied; every field a view declares is one the job spec declares."""

from __future__ import annotations

from jobs import spec as spec_mod
from jobs.record import Job, Kept, Read
from models.specinput import FIELDS


def test_a_kept_spec_reads_its_values_and_the_defaults_where_they_are_missing_or_null():
    kept = spec_mod.normalized(spec_mod.check_shape({"command": "python train.py", "gpus": 2}), default_gpus=0)
    spec = Kept(kept)
    assert (spec.gpus, spec.workers, spec.priority, spec.timeout, spec.command) == (
        2,
        1,
        "normal",
        None,
        "python train.py",
    )
    assert spec.runs_code and not spec.is_session and not spec.multi_worker
    bare = Kept({"model": "lenet", "gpus": None, "env": None, "after": None})
    assert (bare.gpus, dict(bare.env), list(bare.after), bare.preemptible, bare.max_retries) == (0, {}, [], True, 1)
    assert not bare.runs_code


def test_a_view_holds_the_stored_dict_itself_and_replacing_a_field_makes_a_new_one():
    raw = {"model": "lenet", "priority": "low", "a_field_of_tomorrow": 3}
    spec = Kept(raw)
    assert spec.raw is raw and spec.raw["a_field_of_tomorrow"] == 3  # (what a view does not declare is kept)
    high = spec.with_(priority="high")
    assert high.priority == "high" and spec.priority == "low" and raw["priority"] == "low"


def test_a_job_record_is_typed_and_its_spec_too():
    job = Job({"id": 7, "status": "running", "spec": {"model": "resnet20", "workers": 2}, "gpu_ids": [0, 1]})
    assert (job.id, job.status, job.attempt, job.owner, list(job.gpu_ids)) == (7, "running", 1, None, [0, 1])
    assert job.spec.workers == 2 and job.spec.multi_worker and job.trial is None


def test_every_field_a_spec_view_reads_is_a_field_of_the_job_spec():
    read = [name for name, value in vars(Kept).items() if isinstance(value, Read)]
    assert read and not set(read) - set(FIELDS), f"not declared in models.jobspec: {set(read) - set(FIELDS)}"
