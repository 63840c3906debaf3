"""GPUs that fail, against a real Redis: the kernel log's XID lines (a FAKE `dmesg` and a FAKE nvidia-smi on PATH:
no GPU, no NVIDIA driver here) cordon a GPU on a hardware fault and stop the jobs on it as gpu_error (retried, not
charged), an application fault fails only its job, a cordoned GPU takes no job until an admin uncordons it
(tests/e2e/test_gpu_health.py runs the README's section on the real stack)."""

import json
import os
import time

import pytest

from jobs import gpuhealth, lifecycle, outcome, schedule
from jobs.keys import stop_key
from jobs.store import JobStore
from tests.support.live import fake_nvidia_smi
from tests.support.policy import DEFAULTS
from tests.support.workers import register, taken

JOB = {"command": "exec sleep 300", "gpus": 1}
BUSES = "0, 00000000:3B:00.0\n1, 00000000:86:00.0\n"


def kernel(tmp_path, monkeypatch):
    """A FAKE dmesg printing the lines of a file the test appends to, and nvidia-smi's PCI addresses of 2 GPUs."""
    log = tmp_path / "kmsg"
    log.write_text("[    1.000000] Linux version 6.1.0\n[    2.000000] NVRM: Xid (PCI:0000:3b:00): 79, old news\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "dmesg").write_text(f"#!/bin/sh\n# FAKE dmesg for tests\ncat {log}\n")
    (bin_dir / "dmesg").chmod(0o755)
    fake_nvidia_smi(bin_dir, f"case \"$*\" in\n  *pci.bus_id*) printf '{BUSES}' ;;\nesac\nexit 0\n".replace("\n'", "'"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def test_new_xid_lines_are_read_with_their_gpu(tmp_path, monkeypatch):
    log = kernel(tmp_path, monkeypatch)
    reader = gpuhealth.KernelLog()
    assert reader.read() == []  # (what the log held before: the past)
    with log.open("a") as f:
        f.write("[  812.123456] NVRM: Xid (PCI:0000:86:00): 13, pid=4242, name=python, Graphics Exception\n")
        f.write("[  813.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=4243, name=python, GPU has fallen off the bus.\n")
    assert reader.read() == [
        ("1", 13, "pid=4242, name=python, Graphics Exception"),
        ("0", 79, "pid=4243, name=python, GPU has fallen off the bus."),
    ]
    assert reader.read() == []  # each line once


def submit(redis, **spec) -> int:
    from jobs import control

    settings = DEFAULTS.__class__(**{**DEFAULTS.__dict__, "command_jobs": True})
    return control.submit(redis, {**JOB, **spec}, settings)[0]["id"]


def test_a_hardware_xid_cordons_its_gpu_and_retries_its_job_elsewhere_uncharged(redis, client):
    for i in range(2):
        register(redis, f"box.gpu{i}", host="box", gpus=(str(i),))
    first, second = submit(redis, max_retries=1), submit(redis)
    store = JobStore(redis)
    assert store.get(first)["gpu_ids"] == ["0"] and store.get(second)["gpu_ids"] == ["1"]
    store.update(first, started_at=time.time() - 3600)
    gpuhealth.handle(redis, "box", [("0", 79, "GPU has fallen off the bus.")], store.active())
    assert redis.get(stop_key(first)) == b"gpu_error" and redis.get(stop_key(second)) is None
    assert gpuhealth.cordons(redis)[("box", "0")]["xid"] == 79
    taken(redis, first)
    assert lifecycle.end(redis, first, outcome.STOPPED["gpu_error"]) == "queued"  # retried
    rec = store.get(first)
    assert rec["reason"] == "gpu_error" and rec["attempt"] == 2
    assert rec["message"] == (
        "its GPU 0 on box failed (Xid 79: GPU has fallen off the bus.): the GPU is cordoned, the job retried "
        "elsewhere from its checkpoint; retrying"
    )
    assert redis.hgetall("gpudeck:share") == {}  # not charged to its owner
    schedule.place(redis, DEFAULTS)
    assert store.get(first)["status"] == "queued"  # GPU 0 is cordoned, GPU 1 busy
    gpus = client.get("/api/v1/workers").json["workers"]
    assert any(w["state"].startswith("cordoned: Xid 79 at ") for w in gpus), gpus
    assert client.post("/api/v1/gpus/box/1/uncordon").status_code == 404  # (not cordoned)
    answer = client.post("/api/v1/gpus/box/0/uncordon")
    assert answer.status_code == 200 and answer.json["was"]["xid"] == 79
    schedule.place(redis, DEFAULTS)
    assert store.get(first)["status"] == "starting" and store.get(first)["gpu_ids"] == ["0"]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'gpudeck_gpu_errors_total{gpu="0",host="box",xid="79"} 1.0' in metrics


def test_an_application_xid_fails_only_its_job_and_the_gpu_stays_in_service(redis):
    for i in range(2):
        register(redis, f"box.gpu{i}", host="box", gpus=(str(i),))
    mine, other = submit(redis, max_retries=1), submit(redis)
    store = JobStore(redis)
    gpuhealth.handle(redis, "box", [("0", 13, "Graphics Exception: ESR 0x1")], store.active())
    assert redis.get(stop_key(mine)) == b"gpu_app_error" and redis.get(stop_key(other)) is None
    assert gpuhealth.cordons(redis) == {}
    taken(redis, mine)
    assert lifecycle.end(redis, mine, outcome.STOPPED["gpu_app_error"]) == "failed"  # its own: not retried
    rec = store.get(mine)
    assert rec["reason"] == "gpu_error"
    assert rec["message"] == "Xid 13 on its GPU 0: an error of the job's own GPU code (Graphics Exception: ESR 0x1)"
    assert store.get(submit(redis))["gpu_ids"] == ["0"]  # the GPU it was on takes the next job


def test_only_an_admin_uncordons(redis, client, users):
    gpuhealth.cordon(redis, "box", "0", {"xid": 79, "at": time.time(), "text": "x"})
    refused = client.post("/api/v1/gpus/box/0/uncordon", headers=users["alice"])
    assert refused.status_code == 403 and gpuhealth.cordons(redis)
    assert client.post("/api/v1/gpus/box/0/uncordon", headers=users["root"]).status_code == 200
    assert gpuhealth.cordons(redis) == {}


def test_a_cordon_is_sent_to_the_operators_admin_endpoints_signed(redis):
    from jobs import notify
    from jobs.redis_server import free_port
    from jobs.settings import Settings
    from tests.support.webhooks import Receiver

    ops = Receiver(free_port()).start()
    try:
        settings = Settings.from_env(
            {
                "GPUDECK_HOME": str(DEFAULTS.home),
                "GPUDECK_WEBHOOKS": f"ops=http://127.0.0.1:{ops.port}/gpu",
                "GPUDECK_WEBHOOK_SECRETS": "ops=s3cret",
                "GPUDECK_ADMIN_NOTIFY": "ops",
            }
        )
        gpuhealth.handle(redis, "box", [("0", 79, "GPU has fallen off the bus.")], [], settings.admin_notify)
        gpuhealth.handle(redis, "box", [("1", 13, "Graphics Exception")], [], settings.admin_notify)  # (the job's)
        assert notify.deliver(redis, settings) == 1
    finally:
        ops.stop()
    [got] = ops.got
    body = json.loads(got["body"])
    assert body["event"] == "gpu_cordoned" and got["path"] == "/gpu"
    assert {k: body["gpu"][k] for k in ("host", "gpu", "xid", "text")} == {
        "host": "box", "gpu": "0", "xid": 79, "text": "GPU has fallen off the bus."
    }  # fmt: skip
    stamp = got["headers"]["X-Gpudeck-Timestamp"]
    assert got["headers"]["X-Gpudeck-Signature"] == notify.sign("s3cret", stamp, got["body"])
    said = [json.loads(x) for x in redis.lrange("gpudeck:notifications:admin", 0, -1)]
    assert [(s["endpoint"], s["event"], s["delivered"]) for s in said] == [("ops", "gpu_cordoned", True)]


def test_admin_endpoints_must_be_the_operators_webhooks():
    from jobs.errors import ConfigError
    from jobs.settings import Settings

    with pytest.raises(ConfigError, match="GPUDECK_ADMIN_NOTIFY names endpoints GPUDECK_WEBHOOKS has not"):
        Settings.from_env({"GPUDECK_HOME": "/tmp", "GPUDECK_ADMIN_NOTIFY": "ops"})


def test_each_xid_line_counts_once_whichever_sampler_of_the_host_reads_it_and_a_reboot_starts_over(
    tmp_path, monkeypatch, redis
):
    log = kernel(tmp_path, monkeypatch)
    first, second = gpuhealth.KernelLog(redis, "box"), gpuhealth.KernelLog(redis, "box")  # (two workers' samplers)
    assert first.read() == [] and second.read() == []
    with log.open("a") as f:
        f.write("[  813.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=4243, name=python, GPU has fallen off the bus.\n")
    assert [x for _, x, _ in first.read()] == [79]
    assert second.read() == []  # (the lease moved: the host's log was read up to there already)
    log.write_text("[    1.000000] Linux version 6.1.0\n[    3.000000] NVRM: Xid (PCI:0000:3b:00): 79, before\n")
    assert first.read() == []  # (rebooted: what the new log holds is the past)
    with log.open("a") as f:
        f.write("[    9.000000] NVRM: Xid (PCI:0000:86:00): 94, contained ECC error\n")
    assert [(g, x) for g, x, _ in second.read()] == [("1", 94)]


def test_a_rise_of_a_gpus_uncorrectable_ecc_count_is_a_hardware_fault_that_cordons_it(redis, tmp_path, monkeypatch):
    """nvidia-smi's volatile uncorrectable ECC count (a FAKE nvidia-smi reading counts a file holds): what the first
    read finds is the past; a rise cordons the GPU and stops its job as Xid 48 would; GPUs without ECC ([N/A]) and
    a count that fell (the driver reloaded) are not faults; two samplers of the host count a rise once."""
    counts = tmp_path / "ecc.csv"
    counts.write_text("0, 2\n1, [N/A]\n")
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, f'case "$*" in\n  *ecc.errors.uncorrected*) cat {counts} ;;\nesac\nexit 0\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    one, other = gpuhealth.EccWatch(redis, "box"), gpuhealth.EccWatch(redis, "box")
    assert one.read(0.0) == []  # (2 errors before it looked: the past)
    assert one.read(5.0) == []  # (not due: every 10 s)
    counts.write_text("0, 3\n1, [N/A]\n")
    events = one.read(10.0)
    assert events == [("0", 48, "uncorrectable ECC errors: nvidia-smi's volatile count went 2 -> 3")]
    assert other.read(10.0) == []  # (the host's other sampler: counted once)
    counts.write_text("0, 0\n1, [N/A]\n")  # (the driver reloaded)
    assert one.read(20.0) == [] and other.read(30.0) == []
    for i in range(2):
        register(redis, f"box.gpu{i}", host="box", gpus=(str(i),))
    job = submit(redis, max_retries=1)
    store = JobStore(redis)
    assert store.get(job)["gpu_ids"] == ["0"]
    gpuhealth.handle(redis, "box", events, store.active())
    assert redis.get(stop_key(job)) == b"gpu_error"
    assert gpuhealth.cordons(redis)[("box", "0")]["xid"] == 48


def test_a_gpu_cordoned_by_an_older_gpudeck_stays_cordoned(redis):
    """Before issue 64 a cordon was a key a GPU, found by a SCAN of the whole keyspace every round; start-up moves
    such keys into the one hash, so a GPU out of service before an upgrade is still out of service after it."""
    redis.set("gpudeck:cordon:box:1", json.dumps({"xid": 79, "at": 1.0, "text": "fell off the bus"}))
    assert gpuhealth.adopt_legacy_cordons(redis) == 1 and gpuhealth.adopt_legacy_cordons(redis) == 0
    assert gpuhealth.cordons(redis) == {
        ("box", "1"): {"xid": 79, "at": 1.0, "text": "fell off the bus", "cause": "Xid 79"}
    }
    assert redis.get("gpudeck:cordon:box:1") is None


def test_only_an_admin_cordons_a_sampled_gpu_by_hand_and_no_job_is_placed_there(redis, client, users):
    from jobs.gpus import write_sample

    write_sample(redis, "box", {"host": "box", "gpus": [{"index": 0, "uuid": "GPU-0"}, {"index": 1, "uuid": "GPU-1"}]})
    for i in range(2):
        register(redis, f"box.gpu{i}", host="box", gpus=(str(i),))
    refused = client.post("/api/v1/gpus/box/0/cordon", headers=users["alice"])
    assert refused.status_code == 403 and gpuhealth.cordons(redis) == {}
    unknown = client.post("/api/v1/gpus/box/7/cordon", headers=users["root"])
    assert unknown.status_code == 404 and "gpudeck gpu ls" in unknown.get_data(as_text=True)
    bad = client.post("/api/v1/gpus/box/0/cordon", json={"reason": 5}, headers=users["root"])
    assert bad.status_code == 400
    done = client.post("/api/v1/gpus/box/0/cordon", json={"reason": "fan noise"}, headers=users["root"])
    assert done.status_code == 200 and done.json["cordoned"]["cause"] == "by root: fan noise", done.json
    again = client.post("/api/v1/gpus/box/0/cordon", headers=users["root"])
    assert again.status_code == 409 and "by root: fan noise" in again.get_data(as_text=True)
    job = submit(redis)
    assert JobStore(redis).get(job)["gpu_ids"] == ["1"]  # (not the cordoned GPU)
    listed = client.get("/api/v1/gpus", headers=users["alice"]).json["hosts"][0]["gpus"]
    assert listed[0]["cordoned"]["cause"] == "by root: fan noise" and listed[1]["holders"][0]["part"] == 1.0
