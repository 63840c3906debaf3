"""One interface per backend (issue 63 #4): the engine asks its backend, never which one it has; a process has one
(chosen once); the stub backend lets an engine test see what the engine asked of it, against a real Redis."""

import dataclasses
import re
from pathlib import Path

import pytest

from jobs import control, steer
from jobs.backends import IMPLEMENTATIONS
from jobs.backends import base as backends
from jobs.backends.local import LocalBackend
from jobs.backends.slurm import SlurmBackend
from jobs.backends.stub import StubBackend
from jobs.errors import Conflict, NotImplementedHere
from jobs.record import Kept
from jobs.store import JobStore
from tests.support.policy import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
TINY = {"model": "lenet", "dataset": "synthetic:28x28x1", "params": {"steps": 2, "batch_size": 8}}


@pytest.fixture
def stub():
    backend = StubBackend(gpus=2)
    backends.use(backend)
    yield backend
    backends.use(None)


def test_no_module_outside_the_backends_asks_which_backend_it_has():
    asks = re.compile(r"\bbackend\s*(==|!=|\bin\b)|\.backend\s*(==|!=)")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for package in ("api", "jobs", "tui")
        for path in (ROOT / package).rglob("*.py")
        if "backends" not in path.parts
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line)
    ]
    assert found == []


def test_a_process_has_one_backend_the_settings_name():
    assert type(backends.of(DEFAULTS)) is LocalBackend and backends.of(DEFAULTS) is backends.of(DEFAULTS)
    on_slurm = dataclasses.replace(DEFAULTS, backend="slurm")
    assert type(backends.of(on_slurm)) is SlurmBackend and backends.of(on_slurm).agent_module == "jobs.slurmagent"
    assert set(IMPLEMENTATIONS) == {"local", "slurm"}


def test_the_engine_asks_its_backend_for_defaults_admission_starts_and_steering(redis, stub):
    job = control.submit(redis, TINY, DEFAULTS)[0]
    assert Kept(job["spec"]).gpus == 2  # (the backend's default GPUs, not the live workers')
    assert job["status"] == "queued" and stub.queued_ids == [job["id"]]  # (nothing placed it: the stub starts nothing)
    steer.reprioritize(redis, job["id"], "high", DEFAULTS)
    assert stub.priorities == [(job["id"], "high")] and stub.queued_ids == [job["id"]] * 2
    assert Kept(JobStore(redis).get(job["id"])["spec"]).priority == "high"
    with pytest.raises(Conflict):
        stub.move(redis, job["id"], None, None)


def test_slurm_refuses_what_it_does_not_run_and_moves_nothing(redis):
    on_slurm = dataclasses.replace(DEFAULTS, backend="slurm")
    with pytest.raises(NotImplementedHere, match="sessions do not run on Slurm"):
        SlurmBackend().admit(redis, Kept({"kind": "session"}), on_slurm)
    with pytest.raises(Conflict, match="Slurm orders its queue"):
        SlurmBackend().move(redis, 1, None, None)
