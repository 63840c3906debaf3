"""Estimates from what gpudeck sees (issue 66 #1), against a real Redis with a clock the test moves: a waiting
job's duration learned from its owner's earlier runs of the same *kind* — a zoo job's model and dataset, a
command's entry point (its script or module, not its whole text), and the GPUs it takes — else from anybody's
runs of that kind; where it comes from and how sure it is go on the job's view and in `gpudeck show`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs import control, forecast, plan
from jobs.record import Job
from jobs.store import JobStore
from tests.support.workers import box, taken
from tui.widgets.fmt import expected_text


@pytest.mark.parametrize(
    ("command", "entry"),
    [
        ("python train.py --lr 0.1", "script train.py"),
        (["python3", "-u", "src/train.py", "--epochs", "3"], "script src/train.py"),
        ("CUDA_LAUNCH_BLOCKING=1 python -m pkg.train --lr 1", "module pkg.train"),
        ("torchrun --nproc_per_node=2 train.py", "script train.py"),
        ("bash run.sh fast", "script run.sh"),
        ("./bin/trainer --config a.yaml", "program ./bin/trainer"),
        ("python -c 'print(1)'", "inline print(1)"),
    ],
)
def test_a_commands_kind_is_what_it_runs_not_its_text(command, entry):
    assert plan.entry_point(command) == entry


def record(job_id: int, owner: str, **spec) -> Job:
    return Job(id=job_id, owner=owner, spec={"gpus": 1, "workers": 1, **spec})


def test_estimates_come_from_the_same_shape_then_the_owners_kind_then_anybodys(redis):
    cmd = {"command": "python train.py --lr 0.1"}
    plan.learn(redis, record(1, "alice", **cmd), 100.0)
    plan.learn(redis, record(2, "alice", **cmd), 120.0)
    history = plan.learned(redis, [])
    same = history.learned(record(3, "alice", **cmd))
    assert (same.seconds, same.source, same.runs, same.spread) == (120.0, "history", 2, (100.0, 120.0))
    kind = history.learned(record(4, "alice", command="python train.py --lr 0.3 --seed 7"))
    assert (kind.seconds, kind.source) == (120.0, "kind")  # (another text, the same script)
    others = history.learned(record(5, "bob", command="python train.py --lr 0.5"))
    assert (others.seconds, others.source) == (120.0, "others")  # (bob's first: alice's runs of the kind)
    assert history.learned(record(6, "alice", command="python eval.py")) is None  # (another script)
    assert history.learned(record(7, "alice", command="python train.py --lr 0.3", gpus=2)) is None  # (other GPUs)
    zoo = {"model": "lenet", "dataset": "cifar10:1.0.0", "params": {"steps": 100}}
    plan.learn(redis, record(8, "alice", **zoo), 30.0)
    longer = history.learned(record(9, "alice", **{**zoo, "params": {"steps": 200}, "dataset": "cifar10:1.1.0"}))
    assert (longer.seconds, longer.source) == (30.0, "kind")  # (a zoo job's kind: its model and dataset name)
    # a declared duration or a timeout shorter than the estimate still wins
    assert plan.expected(record(10, "alice", **cmd, expected_duration=40), history) == (40.0, "declared")
    assert plan.expected(record(11, "alice", **cmd, timeout=60), history) == (60.0, "timeout")


def test_a_job_of_a_known_kind_has_an_expected_start_and_says_how_sure(redis, settings, client):
    """No declared duration anywhere: the running job's end comes from its kind's runs, so the job waiting for
    its GPU has an expected start; the API and `gpudeck show` say where the estimate comes from."""
    s = replace(settings, backfill=True, preempt=False)
    box(redis, 1)
    for seconds in (80.0, 100.0):  # (alice's earlier runs of the script, with other arguments)
        plan.learn(redis, record(0, "alice", command="python train.py --lr 0.01", env_name=None), seconds)
    spec = {"command": "python train.py --lr 0.2", "gpus": 1}
    commands = replace(s, command_jobs=True)
    running = control.submit(redis, spec, commands, extra={"owner": "alice"})[0]["id"]
    taken(redis, running)
    t0 = 1_000_000.0
    assert JobStore(redis).transition(running, ("starting",), status="running", started_at=t0, running_at=t0)
    waiting = control.submit(
        redis, {**spec, "command": "python train.py --lr 0.4"}, commands, extra={"owner": "alice"}
    )[0]["id"]
    start, why = forecast.estimate(redis, s, [waiting], now=t0 + 30)[waiting]
    assert why is None and start == pytest.approx(t0 + 100.0)  # (the running one: 100 s from its start, by kind)
    view = client.get(f"/api/v1/jobs/{waiting}").json
    assert (view["expected_duration_s"], view["expected_duration_source"]) == (100.0, "kind"), view
    assert view["expected_duration_runs"] == 2 and view["expected_duration_spread_s"] == [80.0, 100.0]
    assert expected_text(view) == "expected 1m40s (from its owner's runs of its kind, 2 runs: 1m20s–1m40s)"


def test_a_job_that_says_its_steps_is_expected_to_run_them_at_its_kinds_pace(redis):
    """Issue 66 #1: jobs of a kind run at a like pace; a job that says how many steps it runs (total_steps, a zoo
    job's params.steps) is expected to take them at the pace its kind's runs went, before any guess from their
    durations alone, and a resumed one only the steps it has left."""
    ran = record(1, "alice", command="python train.py --steps 100", total_steps=100)
    ran["progress"] = {"step": 100, "first_step": 0}
    plan.learn(redis, ran, 50.0)  # (0.5 s a step)
    history = plan.learned(redis, [])
    longer = history.learned(record(2, "alice", command="python train.py --steps 400", total_steps=400))
    assert (longer.seconds, longer.source, longer.runs) == (200.0, "steps", 1)  # (not 50 s: the kind's duration)
    bobs = history.learned(record(3, "bob", command="python train.py --steps 40", total_steps=40))
    assert (bobs.seconds, bobs.source) == (20.0, "steps")  # (anybody's pace, for his first)
    resumed = record(4, "alice", command="python train.py --steps 400", total_steps=400)
    resumed["progress"] = {"step": 300}
    assert history.learned(resumed).seconds == 50.0  # (100 steps left)
    unsaid = history.learned(record(5, "alice", command="python train.py --steps 400"))
    assert (unsaid.seconds, unsaid.source) == (50.0, "kind")  # (no steps said: the kind's durations)
    same = history.learned(record(6, "alice", command="python train.py --steps 100", total_steps=100))
    assert same.source == "history"  # (the very same job ran: its own durations first)
