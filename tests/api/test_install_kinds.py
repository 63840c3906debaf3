"""Issue 68: a box installed without TensorFlow (gpudeck without its `tensorflow` extra) refuses a zoo job at
submission in one line saying what to install, and runs everything else; what its workers can run is on
`GET /api/v1/doctor`. (tests/install/test_install.py installs such a box from a wheel and runs it.)"""

from __future__ import annotations

from tests.support.workers import register

LEAN = {"tensorflow": False, "uv": True, "jupyter": False}


def test_a_zoo_job_is_refused_in_one_line_where_no_worker_has_tensorflow(command_client, redis):
    register(redis, "box.cpu", facts=LEAN)
    refused = command_client.post("/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic", "gpus": 0})
    assert refused.status_code == 409, refused.json
    line = refused.json["message"]
    assert "\n" not in line and "TensorFlow is not installed" in line and "gpudeck[tensorflow]" in line
    assert refused.json["details"]["field"] == "model"
    sweep = {"base": {"model": "lenet", "dataset": "synthetic", "gpus": 0}, "grid": {"params.lr": [0.1, 0.2]}}
    assert command_client.post("/api/v1/sweeps", json=sweep).status_code == 409  # (a grid of them too)
    assert redis.zcard("gpudeck:jobs") == 0
    assert command_client.post("/api/v1/jobs", json={"command": "true", "gpus": 0}).status_code == 201
    # one worker that has it is enough (a lab's API host without TensorFlow, its GPU hosts with it)
    register(redis, "gpu-host.gpu0", host="gpu-host", gpus=("0",), facts={**LEAN, "tensorflow": True})
    made = command_client.post("/api/v1/jobs", json={"model": "lenet", "dataset": "synthetic", "gpus": 0})
    assert made.status_code == 201, made.json
    hosts = {h["host"]: h for h in command_client.get("/api/v1/doctor").json["hosts"]}
    assert (hosts["box"]["tensorflow"], hosts["box"]["jupyter"], hosts["gpu-host"]["tensorflow"]) == (
        False,
        False,
        True,
    )


def test_a_cpu_job_where_every_worker_holds_a_gpu_is_refused_with_the_way_out(command_client, redis):
    """Issue 67 #4: on a GPU box whose `up` started no CPU worker, a `--gpus 0` job was accepted and waited for good
    ("starts unknown"). It is a 409 that says what to do; with a CPU worker it runs as before. And `gpudeck up`
    gives a GPU host a CPU worker where it has cores to spare."""
    from jobs.supervisor import cpu_workers_default

    register(redis, "box.gpu0", gpus=("0",))
    refused = command_client.post("/api/v1/jobs", json={"command": "true", "gpus": 0})
    assert refused.status_code == 409 and refused.json["details"]["field"] == "gpus", refused.json
    assert "--cpu-workers 1" in refused.json["message"] and "--gpus 1" in refused.json["message"]
    assert command_client.post("/api/v1/jobs", json={"command": "true"}).status_code == 201  # (a GPU by default)
    register(redis, "box.cpu", facts=None)
    assert command_client.post("/api/v1/jobs", json={"command": "true", "gpus": 0}).status_code == 201
    assert (cpu_workers_default(0, 2), cpu_workers_default(1, 16), cpu_workers_default(2, 2)) == (1, 1, 0)
