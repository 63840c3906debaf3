"""Adaptive search against a real Redis, through the API (Flask's test client), with the trials' jobs moved by
hand where a worker would run them: what is checked here is the engine (sampling, reporting, stopping, the
budget, the study kept in Redis), fast; tests/e2e/test_search_e2e.py runs searches on real workers."""

from __future__ import annotations

import json

import pytest

from jobs import search
from jobs.keys import SEARCHING_KEY, sweep_stop_key
from jobs.settings import Settings
from jobs.store import JobStore

COMMAND = {"command": "python train.py --lr {LR}", "gpus": 0}
SPACE = {"env.DEPTH": {"int": [2, 6]}, "args.LR": {"loguniform": [1e-4, 1.0]}}


def make(client, **body) -> dict:
    body = {"search": "random", "base": COMMAND, "space": SPACE, "metric": "loss", **body}
    resp = client.post("/api/v1/sweeps", json=body)
    assert resp.status_code == 201, resp.json
    return resp.json


def job_ids(redis) -> list[int]:
    return [int(i) for i in redis.zrange("gpudeck:jobs", 0, -1)]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"space": {"args.LR": {"uniform": [0.5, 0.5]}}}, "space.args.LR", "empty or inverted"),
        ({"space": {"args.LR": {"uniform": [1.0, 0.1]}}}, "space.args.LR", "empty or inverted"),
        ({"space": {"args.LR": {"loguniform": [0, 1]}}}, "space.args.LR", "above 0"),
        ({"space": {"args.LR": {"int": [1.5, 3]}}}, "space.args.LR", "whole numbers"),
        ({"space": {"args.LR": {"choice": []}}}, "space.args.LR", "non-empty list"),
        ({"space": {"args.LR": {"normal": [0, 1]}}}, "space.args.LR", "one of"),
        ({"space": {"args.WIDTH": {"int": [1, 3]}}}, "space.args.WIDTH", "has no {WIDTH}"),
        ({"space": {"params.lr": {"uniform": [0.1, 1]}}}, "space.params.lr", "model job's"),
        ({"space": {"env.1X": {"int": [1, 3]}}}, "space.env.1X", "not a variable name"),
        ({"space": {}}, "space", "non-empty"),
        ({"max_trials": 501}, "max_trials", "from 1 to 500"),
        ({"max_trials": 0}, "max_trials", "from 1 to 500"),
        ({"max_concurrent": "2"}, "max_concurrent", "whole number"),
        ({"mode": "best"}, "mode", "min or max"),
        ({"time_budget": "soon"}, "time_budget", "seconds"),
        ({"seed": -1}, "seed", "0 to"),
        ({"stopping": {"kind": "hyperband"}}, "stopping", "asha"),
        ({"stopping": {"kind": "asha", "reduction_factor": 1}}, "stopping.reduction_factor", "from 2"),
        ({"stopping": {"kind": "median", "reduction_factor": 3}}, "stopping", "unknown"),
        ({"search": "bayes"}, "search", "grid, random, tpe"),
        ({"grid": {"env.DEPTH": [1, 2]}}, "grid", "samples from `space`"),
        ({"metric": None}, "metric", "needs one"),
        ({"metric": "no spaces"}, "metric", "must name"),
    ],
)
def test_bad_searches_are_400s_naming_the_field_and_queue_nothing(command_client, redis, body, field, words):
    body = {"search": "random", "base": COMMAND, "space": SPACE, "metric": "loss", **body}
    resp = command_client.post("/api/v1/sweeps", json={k: v for k, v in body.items() if v is not None})
    assert resp.status_code == 400, resp.json
    fields = resp.json["details"]["fields"]
    assert field in fields and words in fields[field], fields
    assert job_ids(redis) == [] and not redis.exists("gpudeck:next_sweep_id")


def test_a_model_jobs_search_takes_only_its_params_and_metrics(command_client, redis):
    base = {"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": 5}}

    def post(**body):
        return command_client.post("/api/v1/sweeps", json={"search": "tpe", "base": base, **body})

    bad = post(space={"params.learning_rate": {"uniform": [0.1, 1]}}, metric="loss")
    assert bad.status_code == 400 and "params" in json.dumps(bad.json["details"]["fields"]), bad.json
    bad = post(space={"params.lr": {"uniform": [0.1, 1]}}, metric="val_acc")
    assert bad.status_code == 400 and "val_accuracy" in bad.json["details"]["fields"]["metric"], bad.json
    bad = post(space={"params.momentum": {"uniform": [0.5, 1.5]}}, metric="loss")  # (its high end is refused)
    assert bad.status_code == 400 and "space.params.momentum" in bad.json["details"]["fields"], bad.json
    bad = post(space={"env.X": {"int": [1, 2]}}, metric="loss")
    assert bad.status_code == 400 and "model job" in bad.json["details"]["fields"]["space.env.X"], bad.json
    assert job_ids(redis) == []
    made = post(space={"params.lr": {"loguniform": [1e-3, 1.0]}}, metric="val_accuracy", max_concurrent=2)
    assert made.status_code == 201, made.json
    jobs = [JobStore(redis).get(i) for i in made.json["job_ids"]]
    assert len(jobs) == 2 and all(1e-3 <= j["spec"]["params"]["lr"] <= 1.0 for j in jobs)
    assert all(j["spec"]["name"].startswith(f"sweep {made.json['id']} lr=") for j in jobs)


def test_the_same_seed_proposes_the_same_trials(command_client, redis):
    """TPE (and random) with a fixed seed: the same first trials twice; another seed, others."""
    firsts = []
    for seed in (7, 7, 8):
        made = make(command_client, search="tpe", seed=seed, max_concurrent=3, max_trials=10)
        firsts.append([JobStore(redis).get(i)["trial"]["values"] for i in made["job_ids"]])
    assert firsts[0] == firsts[1] and firsts[0] != firsts[2], firsts
    spec = JobStore(redis).get(made["job_ids"][0])["spec"]
    values = firsts[2][0]
    assert spec["env"]["DEPTH"] == str(values["env.DEPTH"]) and 2 <= values["env.DEPTH"] <= 6
    assert spec["command"] == f"python train.py --lr {format(values['args.LR'], '.6g')}"


class Trials:
    """The trials' jobs, moved as a worker would move them: running, points, an end."""

    def __init__(self, redis):
        self.redis, self.store = redis, JobStore(redis)
        self.n: dict[int, int] = {}

    def run(self, job_id: int) -> None:
        self.store.update(job_id, status="running", started_at=__import__("time").time())

    def points(self, job_id: int, metric: str, values: list[tuple[int, float]]) -> None:
        pipe = self.redis.pipeline()
        for step, value in values:
            self.n[job_id] = self.n.get(job_id, 0) + 1
            self.store.append_point(job_id, self.n[job_id], {"step": step, metric: value}, pipe)
        pipe.execute()

    def end(self, job_id: int, status: str = "succeeded") -> None:
        reason = "stopped_early" if self.store.stop_reason(job_id) == "stopped_early" else None
        self.store.update(job_id, status=status, reason=reason, ended_at=__import__("time").time())


def drive(redis, settings: Settings, sweep_id: int) -> None:
    """One searcher round, by a searcher that has just started (its study read from Redis)."""
    searcher = search.Searcher(settings)
    searcher.redis = redis
    searcher.round()


def test_asha_stops_the_trials_worse_at_a_rung_and_launches_the_next_at_once(command_client, redis, settings):
    made = make(
        command_client,
        metric="val_loss",
        max_trials=5,
        max_concurrent=2,
        seed=1,
        stopping={"kind": "asha", "min_steps": 10, "reduction_factor": 2},
    )
    sweep_id, (first, second) = made["id"], made["job_ids"]
    trials = Trials(redis)
    for job_id in (first, second):
        trials.run(job_id)
    trials.points(first, "val_loss", [(5, 1.0), (10, 0.5)])  # first at rung 0 (step 10): promoted
    drive(redis, settings, sweep_id)
    assert JobStore(redis).stop_reason(first) is None
    trials.points(second, "val_loss", [(5, 2.0), (10, 1.9)])  # worse at rung 0: stopped
    drive(redis, settings, sweep_id)
    assert JobStore(redis).stop_reason(second) == "stopped_early"
    assert JobStore(redis).get(second)["early_stop"] == {"step": 10, "rung": 0, "metric": "val_loss", "value": 1.9}
    trials.end(second)
    drive(redis, settings, sweep_id)  # its slot goes to a third trial in the same round
    shown = command_client.get(f"/api/v1/sweeps/{sweep_id}").json
    assert [t["number"] for t in shown["trials"]] != [] and len(shown["trials"]) == 3
    stopped = next(t for t in shown["trials"] if t["job"] == second)
    assert (stopped["status"], stopped["stopped_early"], stopped["rung"]) == ("succeeded", True, 0)
    assert shown["rungs"][0]["step"] == 10
    assert {(e["job"], e["passed"]) for e in shown["rungs"][0]["trials"]} == {(first, True), (second, False)}
    trials.points(first, "val_loss", [(20, 0.3)])  # rung 1, alone there: promoted
    trials.end(first)
    drive(redis, settings, sweep_id)
    shown = command_client.get(f"/api/v1/sweeps/{sweep_id}").json
    assert shown["best"]["job"] == first and shown["best"]["metric"] == 0.3
    assert shown["best"]["values"] == JobStore(redis).get(first)["trial"]["values"]
    assert shown["budget"]["trials"] == 4 and shown["budget"]["trials_left"] == 1 and shown["state"] == "running"
    # A failed trial counts as failed and the search goes on; then the last trial; then it is done.
    third, fourth = [t["job"] for t in shown["trials"] if t["status"] == "queued"]
    trials.end(third, "failed")
    drive(redis, settings, sweep_id)
    fifth = max(JobStore(redis).get(i)["id"] for i in job_ids(redis))
    assert fifth not in (first, second, third, fourth)
    for job_id in (fourth, fifth):
        trials.run(job_id)
        trials.points(job_id, "val_loss", [(10, 0.4), (20, 0.35)])
        trials.end(job_id)
    drive(redis, settings, sweep_id)
    shown = command_client.get(f"/api/v1/sweeps/{sweep_id}").json
    assert shown["state"] == "done" and len(shown["trials"]) == 5 and not redis.sismember(SEARCHING_KEY, sweep_id)
    outcome = {t["job"]: t["status"] for t in shown["trials"]}
    assert outcome[third] == "failed" and shown["best"]["job"] == first
    frozen = search.frozen_trials(settings.redis_url, json.loads(redis.get(f"gpudeck:sweep:{sweep_id}")))
    assert [f.state.name for f in frozen] == ["COMPLETE", "PRUNED", "FAIL", "COMPLETE", "COMPLETE"]


def test_a_trial_that_finished_before_its_stop_is_complete_and_stopped_trials_rank_too(command_client, redis, settings):
    """Issue 42 #3: with trials shorter than the stop's reaction, the stop arrives after the last step: the trial
    finished (jobs.outcome makes its end a success, not a stop) and ranks as complete; a trial stopped early ranks
    too, by the last value it reported (as Determined and Ray Tune rank), so the best is the best of all."""
    made = make(
        command_client, metric="val_loss", max_trials=3, max_concurrent=3, seed=1,
        stopping={"kind": "asha", "min_steps": 10, "reduction_factor": 2},
    )  # fmt: skip
    sweep_id, (first, second, third) = made["id"], made["job_ids"]
    trials, store = Trials(redis), JobStore(redis)
    for job_id in (first, second, third):
        trials.run(job_id)
    trials.points(first, "val_loss", [(10, 0.5)])
    drive(redis, settings, sweep_id)
    trials.points(second, "val_loss", [(10, 1.9)])
    trials.points(third, "val_loss", [(10, 2.0)])
    drive(redis, settings, sweep_id)
    assert store.stop_reason(second) == store.stop_reason(third) == "stopped_early"
    # second had trained its last step when the stop came: its trainer's end is a success with a result
    store.update(second, status="succeeded", reason=None, ended_at=1.0, result={"val_loss": 1.8})
    trials.end(third)  # third was stopped: its last value, 2.0, stands
    trials.points(first, "val_loss", [(20, 2.5)])  # first went on and got worse
    trials.end(first)
    drive(redis, settings, sweep_id)
    shown = command_client.get(f"/api/v1/sweeps/{sweep_id}").json
    by_job = {t["job"]: t for t in shown["trials"]}
    assert (by_job[second]["stopped_early"], by_job[second]["metric"]) == (False, 1.8)
    assert (by_job[third]["stopped_early"], by_job[third]["metric"]) == (True, 2.0)
    assert [r["job_id"] for r in shown["jobs"]] == [second, third, first]
    assert [r["rank"] for r in shown["jobs"]] == [1, 2, 3] and shown["best"]["job"] == second
    frozen = search.frozen_trials(settings.redis_url, json.loads(redis.get(f"gpudeck:sweep:{sweep_id}")))
    assert sorted(f.state.name for f in frozen) == ["COMPLETE", "COMPLETE", "PRUNED"]


def test_a_stopped_search_launches_no_more_and_a_budget_ends_it(command_client, redis, settings):
    made = make(command_client, metric="loss", max_trials=10, max_concurrent=1)
    sweep_id, (first,) = made["id"], made["job_ids"]
    trials = Trials(redis)
    stop = command_client.post(f"/api/v1/sweeps/{sweep_id}/stop")
    assert stop.status_code == 200 and stop.json["stopped"] == "stopped on request"
    trials.run(first)
    trials.points(first, "loss", [(1, 0.5)])
    trials.end(first)
    drive(redis, settings, sweep_id)
    shown = command_client.get(f"/api/v1/sweeps/{sweep_id}").json
    assert shown["state"] == "stopped" and len(shown["trials"]) == 1 and shown["best"]["metric"] == 0.5
    # its time stops at its last trial's end (issue 67 #5: a finished sweep's time_used_s kept growing)
    record = json.loads(redis.get(f"gpudeck:sweep:{sweep_id}"))
    ended = float(JobStore(redis).get(first)["ended_at"])
    assert shown["budget"]["time_used_s"] == round(ended - record["created_at"], 1)
    assert command_client.post("/api/v1/sweeps/999/stop").status_code == 404
    listed = command_client.get("/api/v1/sweeps").json["sweeps"]
    assert listed[0]["id"] == sweep_id and listed[0]["search"] == "random" and listed[0]["trials"] == 1

    timed = make(command_client, metric="loss", max_trials=10, max_concurrent=1, time_budget=1)
    (job_id,) = timed["job_ids"]
    trials.run(job_id)
    record = json.loads(redis.get(f"gpudeck:sweep:{timed['id']}"))
    redis.set(f"gpudeck:sweep:{timed['id']}", json.dumps({**record, "created_at": record["created_at"] - 5}))
    drive(redis, settings, timed["id"])  # past its budget: its running trial is stopped, no other launched
    assert JobStore(redis).stop_reason(job_id) == "stopped_early"
    trials.end(job_id)
    drive(redis, settings, timed["id"])
    shown = command_client.get(f"/api/v1/sweeps/{timed['id']}").json
    assert shown["state"] == "stopped" and "time budget" in shown["stopped"] and len(shown["trials"]) == 1
    assert shown["budget"]["time_left_s"] == 0


def test_a_grid_answers_in_the_same_shape(command_client, redis):
    base = {"command": "python train.py --depth {DEPTH}", "gpus": 0}
    bad = command_client.post("/api/v1/sweeps", json={"base": base, "grid": {"args.WIDTH": [1, 2]}})
    assert bad.status_code == 400 and "has no {WIDTH}" in bad.json["details"]["fields"]["grid.args.WIDTH"]
    grid = {"args.DEPTH": [2], "env.X": ["a", "b"]}
    made = command_client.post("/api/v1/sweeps", json={"base": base, "grid": grid, "metric": "loss"})
    assert made.status_code == 201, made.json
    specs = [JobStore(redis).get(i)["spec"] for i in made.json["job_ids"]]
    assert [(s["env"], s["command"], s["name"]) for s in specs] == [
        ({"X": "a"}, "python train.py --depth 2", f"sweep {made.json['id']} DEPTH=2 X=a"),
        ({"X": "b"}, "python train.py --depth 2", f"sweep {made.json['id']} DEPTH=2 X=b"),
    ]
    shown = command_client.get(f"/api/v1/sweeps/{made.json['id']}").json
    assert shown["search"] == "grid" and shown["state"] == "running" and shown["metric"] == "loss"
    assert [t["values"] for t in shown["trials"]] == [{"args.DEPTH": 2, "env.X": "a"}, {"args.DEPTH": 2, "env.X": "b"}]
    stopped = command_client.post(f"/api/v1/sweeps/{made.json['id']}/stop").json
    assert stopped["state"] == "stopped" and {t["status"] for t in stopped["trials"]} == {"canceled"}


def test_the_median_rule_stops_a_trial_below_the_others_median_at_the_same_step(command_client, redis, settings):
    made = make(
        command_client,
        metric="accuracy",
        max_trials=5,
        max_concurrent=5,
        seed=2,
        stopping={"kind": "median", "min_steps": 2},
    )
    first, *others = made["job_ids"]
    trials = Trials(redis)
    for n, job_id in enumerate(made["job_ids"][:3]):  # three finish (the rule's startup trials)
        trials.run(job_id)
        trials.points(job_id, "accuracy", [(1, 0.5 + n / 10), (2, 0.6 + n / 10), (3, 0.7 + n / 10)])
        trials.end(job_id)
    drive(redis, settings, made["id"])
    good, bad = others[2], others[3]
    for job_id, values in ((good, [(1, 0.7), (2, 0.8)]), (bad, [(1, 0.2), (2, 0.3)])):
        trials.run(job_id)
        trials.points(job_id, "accuracy", values)
    drive(redis, settings, made["id"])
    assert JobStore(redis).stop_reason(bad) == "stopped_early" and JobStore(redis).stop_reason(good) is None
    assert JobStore(redis).get(bad)["early_stop"] == {"step": 2, "rung": None, "metric": "accuracy", "value": 0.3}
    assert made["job_ids"][0] == first


def test_every_trial_passes_its_makers_submit_rules_at_creation_and_when_it_starts(command_client, redis, settings):
    """Issue 37 #3: a search space is no way around a token's rules (a priority above --max-priority, a job that
    cannot be preempted), and a search launches no trial once its maker's token is revoked."""
    from jobs import tokens

    carol = {"Authorization": f"Bearer {tokens.create(redis, 'carol', max_priority='normal')}"}
    dave = {"Authorization": f"Bearer {tokens.create(redis, 'dave')}"}
    model = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}}
    space = {"params.lr": {"loguniform": [1e-3, 0.1]}}
    for who, key, values, rule in (
        (carol, "priority", ["normal", "high"], "max_priority"),
        (dave, "preemptible", [True, False], "preemptible_admin_only"),
    ):
        body = {"search": "random", "base": model, "space": {**space, key: {"choice": values}}, "metric": "loss"}
        resp = command_client.post("/api/v1/sweeps", json=body, headers=who)
        assert resp.status_code == 403, resp.json
        assert resp.json["details"]["field"] == f"space.{key}" and resp.json["details"]["rule"] == rule
        assert f"space.{key}" in resp.json["message"]
    assert job_ids(redis) == [] and command_client.get("/api/v1/sweeps", headers=dave).json["sweeps"] == []

    body = {"search": "random", "base": model, "space": space, "metric": "loss", "max_trials": 4, "max_concurrent": 1}
    made = command_client.post("/api/v1/sweeps", json=body, headers=dave)
    assert made.status_code == 201, made.json
    (first,) = made.json["job_ids"]
    tokens.revoke(redis, "dave")
    trials = Trials(redis)
    trials.run(first)
    trials.points(first, "loss", [(1, 0.5)])
    trials.end(first)
    drive(redis, settings, made.json["id"])
    assert job_ids(redis) == [first]  # no trial for a maker whose token is gone
    record = json.loads(redis.get(f"gpudeck:sweep:{made.json['id']}"))
    assert record["owner"] == "dave"
    assert "the token of 'dave' was revoked" in redis.get(sweep_stop_key(made.json["id"])).decode()


def test_a_trial_asked_for_but_never_launched_is_launched_by_the_next_round_and_no_number_is_skipped(
    command_client, redis, settings
):
    """`gpudeck up` stopped between the study giving out a trial and its job's submission (the searcher's process
    killed there): the next round submits that trial's job, so the numbers stay 0, 1, 2 and the search ends."""
    made = make(command_client, metric="loss", max_trials=3, max_concurrent=1, seed=1)
    sweep_id, (first,) = made["id"], made["job_ids"]
    trials = Trials(redis)
    trials.run(first)
    trials.points(first, "loss", [(1, 0.5)])
    trials.end(first)
    record = json.loads(redis.get(f"gpudeck:sweep:{sweep_id}"))
    asked = search.study(settings.redis_url or "", record)  # (asked; the process went before it submitted)
    lost = asked.ask({k: search._distribution(d) for k, d in record["space"].items()})
    assert lost.number == 1
    drive(redis, settings, sweep_id)
    shown = command_client.get(f"/api/v1/sweeps/{sweep_id}").json
    assert [t["number"] for t in shown["trials"]] == [0, 1] and shown["trials"][1]["job"] is not None
    second = shown["trials"][1]["job"]
    assert JobStore(redis).get(second)["trial"]["number"] == 1
    for job_id in (second,):
        trials.run(job_id)
        trials.points(job_id, "loss", [(1, 0.4)])
        trials.end(job_id)
    drive(redis, settings, sweep_id)
    third = command_client.get(f"/api/v1/sweeps/{sweep_id}").json["trials"][2]
    assert third["number"] == 2


def test_a_trial_the_study_made_but_gave_no_values_yet_is_completed_and_launched(command_client, redis, settings):
    """The searcher's process went between the study making a trial and setting its values (each its own write to
    the study's journal): the next round samples the missing ones and launches it; no number is skipped (the README
    search's restart test saw 0, 2 where it went there)."""
    made = make(command_client, metric="loss", max_trials=2, max_concurrent=1, seed=1)
    sweep_id, (first,) = made["id"], made["job_ids"]
    trials = Trials(redis)
    trials.run(first)
    trials.end(first)
    record = json.loads(redis.get(f"gpudeck:sweep:{sweep_id}"))
    the_study = search.study(settings.redis_url or "", record)
    half = the_study._storage.create_new_trial(the_study._study_id)  # (made, no value set)
    assert the_study._storage.get_trial(half).params == {}
    drive(redis, settings, sweep_id)
    shown = command_client.get(f"/api/v1/sweeps/{sweep_id}").json
    assert [t["number"] for t in shown["trials"]] == [0, 1] and shown["trials"][1]["job"] is not None
    values = shown["trials"][1]["values"]
    assert (
        set(values) == set(record["space"])
        and JobStore(redis).get(shown["trials"][1]["job"])["trial"]["values"] == values
    )
