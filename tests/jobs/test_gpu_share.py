"""Several jobs on one GPU, against a real Redis: `gpu_memory` shares packed best-fit within a GPU's memory less the
reserve and within what is free on it now, whole GPUs kept whole, a whole-GPU job not starved by a stream of
shares, preemption of shares, quotas and fair share counting a share's part. Workers are registered as `gpudeck up`
registers GPUDECK_JOBS_PER_GPU of them per GPU (tests/e2e/test_gpu_share.py runs the real stack)."""

import json
import random
import time
from dataclasses import replace

import pytest

from jobs import control, lifecycle, outcome, quota, schedule, share, sweeps
from jobs.errors import ValidationError
from jobs.gpus import IdlePolicy, Leftovers, Watchdog, write_sample
from jobs.keys import slots_wanted_key, stop_key
from jobs.store import JobStore
from tests.support.policy import DEFAULTS
from tests.support.workers import rec, register, taken

G = 1 << 30
JOB = {"model": "lenet", "dataset": "synthetic:8x8x1", "params": {"steps": 2}}
H100_MIB = 81559
"""An H100's memory as nvidia-smi reports it (79.6 GiB): 78.6 GiB for shares past the 1 GiB reserve."""


def gpus(redis, per_gpu: int = 4, n: int = 2, host: str = "box", used_mib: dict[int, int] | None = None) -> list:
    """A host of `n` GPUs with `per_gpu` workers each, and its nvidia-smi sample (memory used per GPU)."""
    names = [register(redis, f"{host}.gpu{i}.{j}", host=host, gpus=(str(i),)) for i in range(n) for j in range(per_gpu)]
    sample(redis, host, n, used_mib or {})
    return names


def sample(redis, host: str, n: int, used_mib: dict[int, int]) -> None:
    rows = [
        {"index": i, "uuid": f"GPU-{i}", "memory_total_mib": H100_MIB, "memory_used_mib": used_mib.get(i, 0)}
        for i in range(n)
    ]
    write_sample(redis, host, {"host": host, "gpus": rows})


def submit(redis, settings=DEFAULTS, owner=None, **spec) -> int:
    body = {**JOB, **spec}
    return control.submit(redis, body, settings, extra={"owner": owner} if owner else None)[0]["id"]


def on(redis, job_id: int) -> str | None:
    """The GPU a started job holds ("0"), or None while it waits."""
    r = rec(redis, job_id)
    return ",".join(r["gpu_ids"]) if r["status"] != "queued" else None


def end(redis, job_id: int) -> None:
    taken(redis, job_id)
    assert lifecycle.end(redis, job_id, outcome.SUCCEEDED)


def test_four_10g_shares_fill_one_gpu_and_a_whole_gpu_job_takes_the_other(redis):
    gpus(redis)
    shares = [submit(redis, gpu_memory="10G") for _ in range(4)]
    whole = submit(redis, gpus=1)
    assert [on(redis, i) for i in shares] == ["0"] * 4  # best fit: one GPU filled before another is opened
    assert on(redis, whole) == "1"
    assert len({rec(redis, i)["worker"] for i in shares}) == 4  # each on a worker (a job slot) of its own
    assert rec(redis, shares[0])["spec"]["gpu_memory"] == 10 * G and rec(redis, shares[0])["spec"]["gpus"] == 1
    assert rec(redis, shares[0])["gpu_fraction"] == pytest.approx(10 * 1024 / H100_MIB, abs=1e-4)
    # a fifth share: GPU 0's four slots are busy and GPU 1 is held whole
    fifth = submit(redis, gpu_memory="10G")
    assert on(redis, fifth) is None
    # (78.6G for shares, less four of 10G and their CUDA contexts of 1G, GPUDECK_GPU_CONTEXT_MEMORY)
    assert (
        rec(redis, fifth)["message"]
        == "waiting for 10G of one GPU and its CUDA context (1G); 34.6G free on one GPU now"
    )


def test_shares_fit_within_the_gpus_memory_less_the_reserve(redis):
    gpus(redis, n=1)
    big = submit(redis, gpu_memory="40G")
    second = submit(redis, gpu_memory="40G")  # 80 > 78.6 GiB: waits though a worker of the GPU is free
    small = submit(redis, gpu_memory="36G")  # 76 and a CUDA context of 1G each (GPUDECK_GPU_CONTEXT_MEMORY) fit
    assert (on(redis, big), on(redis, second), on(redis, small)) == ("0", None, "0")
    end(redis, big)
    schedule.place(redis, DEFAULTS)
    assert on(redis, second) == "0"


def test_what_nvidia_smi_says_is_in_use_counts_too(redis):
    gpus(redis, used_mib={0: 75 * 1024})  # a foreign process (or a job past its share) holds 75 GiB of GPU 0
    first = submit(redis, gpu_memory="10G")
    assert on(redis, first) == "1"  # GPU 0 is declared empty, but only 4.6 GiB of it is free
    assert on(redis, submit(redis, gpu_memory="3G")) == "0"  # (3G and its CUDA context fit in 4.6)


def test_a_share_waits_while_no_gpus_memory_is_known_and_a_whole_job_does_not(redis):
    for i in range(2):
        register(redis, f"box.gpu{i}", gpus=(str(i),))  # (no nvidia-smi sample)
    part = submit(redis, gpu_memory="10G")
    assert on(redis, part) is None
    assert rec(redis, part)["message"] == (
        "waiting for 10G of one GPU; no GPU's memory is known yet (no nvidia-smi sample)"
    )
    assert on(redis, submit(redis, gpus=1)) is not None


def test_a_whole_gpu_job_is_not_starved_by_a_stream_of_shares(redis):
    gpus(redis, per_gpu=4, n=1)
    running = [submit(redis, gpu_memory="10G") for _ in range(3)]
    assert all(on(redis, i) == "0" for i in running)
    whole = submit(redis, gpus=1)  # waits for the shares on the GPU to end
    stream = []
    for job_id in running:
        stream.append(submit(redis, gpu_memory="10G"))  # a new share each time one ends: none starts
        end(redis, job_id)
        schedule.place(redis, DEFAULTS)
        assert on(redis, stream[-1]) is None
    assert on(redis, whole) == "0"
    assert all(on(redis, i) is None for i in stream)
    end(redis, whole)
    schedule.place(redis, DEFAULTS)
    assert [on(redis, i) for i in stream] == ["0"] * 3


def test_a_high_whole_gpu_job_preempts_the_low_shares_of_one_gpu(redis):
    gpus(redis, per_gpu=2, n=2)
    s = replace(DEFAULTS, preempt_after_s=0)
    low = [submit(redis, s, gpu_memory="30G", priority="low") for _ in range(3)]  # two on GPU 0, one on GPU 1
    normal = submit(redis, s, gpu_memory="30G")  # beside the third: both GPUs now hold shares
    assert [on(redis, i) for i in low] == ["0", "0", "1"] and on(redis, normal) == "1"
    high = submit(redis, s, gpus=1, priority="high")
    said = rec(redis, high)["message"]
    assert said.startswith("preempting jobs ") and set(said.split()[2:]) == {
        f"{low[0]}",
        f"{low[1]}",
        "(low),",
        "(low)",
    }
    assert [redis.get(stop_key(i)) for i in low] == [b"preempted", b"preempted", None]  # the GPU 1 share is spared


def test_a_share_counts_as_its_part_of_a_gpu_for_quotas_and_fair_share(redis):
    gpus(redis, per_gpu=4, n=1)
    first = submit(redis, owner="alice", gpu_memory="20G")
    r = rec(redis, first)
    assert quota.holds(r) == r["gpu_fraction"] == pytest.approx(20 * 1024 / H100_MIB, abs=1e-4)
    r["started_at"] = time.time() - 100
    assert share.attempt_seconds(r) == pytest.approx(100 * r["gpu_fraction"], rel=0.01)


@pytest.mark.parametrize("seed", range(6))
def test_no_gpu_is_ever_given_more_than_its_memory_or_a_share_beside_a_whole_job(redis, seed):
    """A random stream of shares (1 to 40 GiB) and whole-GPU jobs on 2 GPUs of 4 slots each, jobs ending at random:
    after every round, each GPU's shares stay within its memory less the reserve, and a GPU held whole holds
    nothing else."""
    rnd = random.Random(seed)
    gpus(redis, per_gpu=4, n=2)
    store = JobStore(redis)
    capacity = (H100_MIB << 20) - DEFAULTS.gpu_memory_reserve
    for _ in range(60):
        if rnd.random() < 0.75:
            submit(redis, **({"gpus": 1} if rnd.random() < 0.2 else {"gpu_memory": rnd.randint(1, 40) * G}))
        active = store.active()
        if active and rnd.random() < 0.5:
            end(redis, rnd.choice(active)["id"])
        schedule.place(redis, DEFAULTS)
        held: dict[str, list[dict]] = {}
        for r in store.active():
            held.setdefault(r["gpu_ids"][0], []).append(r)
        for jobs in held.values():
            whole = [r for r in jobs if not r["spec"].get("gpu_memory")]
            assert len(whole) == 0 or len(jobs) == 1
            # (each share with its CUDA context: what its process holds beside its framework's allocations)
            assert sum(r["spec"].get("gpu_memory") + DEFAULTS.gpu_context_memory for r in jobs if not whole) <= capacity
            assert len({r["worker"] for r in jobs}) == len(jobs)


def test_bad_shares_are_refused_naming_gpu_memory_and_nothing_is_stored(redis, client):
    gpus(redis, n=1)
    for body, problem in (
        (
            {"gpu_memory": "100G"},
            "asks 100G of one GPU; the largest, GPU 0 of box, has 79.6G: 77.6G for a share once "
            "GPUDECK_GPU_MEMORY_RESERVE (1G) and its CUDA context (GPUDECK_GPU_CONTEXT_MEMORY, 1G) are kept",
        ),
        ({"gpu_memory": "ten gigs"}, "must be a size such as 512M, 10G or 1.5GiB (or bytes), got 'ten gigs'"),
        ({"gpu_memory": "1M"}, "must be between 64M and 1T, got 1M"),
        ({"gpu_memory": "10G", "gpus": 2}, "is part of one GPU: it needs gpus 1, got gpus 2"),
        ({"gpu_memory": "10G", "workers": 2}, "is part of one GPU: a multi-worker job holds whole GPUs (drop workers)"),
    ):
        resp = client.post("/api/v1/jobs", json={**JOB, **body})
        assert resp.status_code == 400, body
        assert resp.json["details"]["fields"]["gpu_memory"] == problem
    assert redis.keys("gpudeck:job:*") == []
    with pytest.raises(ValidationError):
        control.submit(redis, {**JOB, "gpu_memory": "78G"}, DEFAULTS)  # over 77.6G
    assert control.submit(redis, {**JOB, "gpu_memory": "77G"}, DEFAULTS)[0]["id"]


def test_the_watchdog_stops_a_share_over_its_memory_past_the_grace_and_spares_its_neighbour(redis):
    gpus(redis, n=1)
    over, under = submit(redis, gpu_memory="10G"), submit(redis, gpu_memory="10G")
    store = JobStore(redis)
    dog = Watchdog(grace_s=10, context=DEFAULTS.gpu_context_memory)

    # (`under` holds its 10G and its CUDA context, as a PyTorch share capped the README's way did on an H200:
    # 10850 MiB in nvidia-smi; each process may hold one context beside its share, GPUDECK_GPU_CONTEXT_MEMORY)
    def look(at: float, over_mib: int, under_mib: int = 10850) -> None:
        procs = [
            {"pid": 100, "used_memory_mib": over_mib - 1024, "job_id": over},
            {"pid": 101, "used_memory_mib": 1024, "job_id": over},  # (a job's processes add up)
            {"pid": 200, "used_memory_mib": under_mib, "job_id": under},
            {"pid": 300, "used_memory_mib": 30_000, "job_id": None},  # (a foreign process is nobody's share)
        ]
        dog.look(store, store.active(), [{"index": 0, "processes": procs}], at)

    look(0, 12 * 1024)  # its two processes: 10G and two contexts of 1G
    assert dog.over == {}
    look(1, 13 * 1024)
    look(8, 11 * 1024)  # back under: the grace starts again
    look(9, 13 * 1024)
    look(15, 14 * 1024)
    assert redis.get(stop_key(over)) is None
    look(19, 13 * 1024)
    assert redis.get(stop_key(over)) == b"gpu_memory_exceeded" and redis.get(stop_key(under)) is None
    taken(redis, over)
    assert lifecycle.end(redis, over, outcome.STOPPED["gpu_memory_exceeded"]) == "failed"
    r = rec(redis, over)
    assert r["reason"] == "gpu_memory_exceeded"
    assert r["message"] == (
        "it used 14G of GPU 0 (its peak) for 10 s, more than its gpu_memory of 10G and 2 CUDA contexts of 1G "
        "(GPUDECK_GPU_MEMORY_GRACE: 10 s, GPUDECK_GPU_CONTEXT_MEMORY): stopped so that the jobs sharing the GPU go on"
    )
    assert r["gpu_memory_exceeded"]["peak"] == 14 * G and r["gpu_memory_exceeded"]["gpu_memory"] == 10 * G
    assert rec(redis, under)["status"] == "starting"


def test_a_process_that_outlives_its_job_keeps_whole_gpu_jobs_off_its_gpu_and_healthz_names_it(redis, client):
    gpus(redis, per_gpu=1, n=2)
    marks = Leftovers()
    first = [{"index": 0, "processes": [{"pid": 4242, "used_memory_mib": 900, "job_id": 7}]}]
    marks.mark(first, 1000.0)  # job 7's trainer on GPU 0
    later = [{"index": 0, "processes": [{"pid": 4242, "used_memory_mib": 900, "job_id": None}]}]
    marks.mark(later, 1010.0)  # job 7 ended; its process still holds 900 MiB
    assert later[0]["processes"][0]["left_by"] == 7 and later[0]["processes"][0]["left_since"] == 1010.0
    marks.mark(later, 1030.0)
    assert later[0]["processes"][0]["left_since"] == 1010.0  # (since it was first seen so)
    rows = [
        {"index": 0, "memory_total_mib": H100_MIB, "memory_used_mib": 900, "processes": later[0]["processes"]},
        {"index": 1, "memory_total_mib": H100_MIB, "memory_used_mib": 0, "processes": []},
    ]
    rows[0]["processes"][0]["left_since"] = time.time() - 90
    write_sample(redis, "box", {"host": "box", "sampled_at": time.time(), "gpus": rows})
    part = submit(redis, gpu_memory="10G")
    assert on(redis, part) == "0"  # a share fits beside it (best fit: the GPU it fills most)
    end(redis, part)
    whole = [submit(redis, gpus=1) for _ in range(2)]
    # GPU 0's worker is free and nobody holds it, but its memory is not all back: no whole-GPU job goes there
    assert [on(redis, i) for i in whole] == ["1", None]
    said = client.get("/healthz").json["gpus_not_released"]
    assert [(g["host"], g["gpu"], g["job_id"], g["pid"], g["used_memory_mib"]) for g in said] == [
        ("box", "0", 7, 4242, 900)
    ]
    assert said[0]["for_s"] >= 90
    marks.mark([{"index": 0, "processes": []}], 1040.0)  # released: forgotten
    assert marks.owned == {} and marks.since == {}


def test_mig_instances_are_scheduled_as_devices_of_their_own(redis):
    a, b = "MIG-4c8ba8e8-bcb1-5b3a-b6d3-8f1bb7b8d3ad", "MIG-9f1bb7b8-0000-5b3a-b6d3-4c8ba8e8d3ad"
    for name, device in (("box.mig-a", a), ("box.mig-b", b)):
        register(redis, name, gpus=(device,))
    sample(redis, "box", 1, {})  # (nvidia-smi's rows are whole GPUs': a MIG instance's memory is not among them)
    pair = submit(redis, gpus=2)
    assert on(redis, pair) is None  # one process uses one MIG instance at most: two are not a job's two GPUs
    ones = [submit(redis, gpus=1) for _ in range(2)]
    assert sorted(on(redis, i) for i in ones) == sorted([a, b])  # each pinned by its MIG UUID
    end(redis, ones[0])
    assert on(redis, submit(redis, gpu_memory="4G")) is None  # a share goes to a GPU whose memory is known


def test_a_high_share_preempts_a_low_whole_gpu_job_and_a_sweeps_trials_share(redis):
    gpus(redis, per_gpu=2, n=1)
    s = replace(DEFAULTS, preempt_after_s=0)
    low = submit(redis, s, gpus=1, priority="low")
    assert on(redis, low) == "0"
    high = submit(redis, s, gpu_memory="20G", priority="high")
    assert rec(redis, high)["message"] == f"preempting job {low} (low)"
    end(redis, low)  # (as its stop ends it)
    schedule.place(redis, s)
    assert on(redis, high) == "0"
    made = sweeps.create(redis, {"base": {**JOB, "gpu_memory": "20G"}, "grid": {"params.lr": [0.1, 0.2]}}, s)
    schedule.place(redis, s)
    trials = [rec(redis, j["id"]) for j in made["jobs"]]
    assert [t["spec"]["gpu_memory"] for t in trials] == [20 * G, 20 * G]
    assert sum(on(redis, t["id"]) == "0" for t in trials) == 1  # one beside the high share: one slot left


def test_the_idle_gpu_policy_warns_then_stops_sparing_the_young_the_exempt_and_sessions(redis, client):
    gpus(redis, per_gpu=1, n=5)
    store = JobStore(redis)
    t0 = 1_000_000.0
    ids = [submit(redis, gpus=1) for _ in range(3)]
    exempt = submit(redis, gpus=1, idle_exempt=True)
    shell = control.submit(redis, {"kind": "session", "gpus": 1}, replace(DEFAULTS, command_jobs=True))[0]["id"]
    for job_id in (*ids, exempt, shell):
        store.transition(job_id, ("starting",), status="running", running_at=t0, started_at=t0)
    young = ids[2]
    store.update(young, running_at=t0 + 500)  # (it started later: still in its first window)

    def look(policy, at: float, util: dict[str, int]) -> None:
        rows = [{"index": i, "utilization": util.get(str(i), 0)} for i in range(5)]
        policy.look(store, store.active(), rows, at)

    warn = IdlePolicy("warn", window_s=600)
    look(warn, t0 + 300, {})  # within every job's first window: nothing counts
    look(warn, t0 + 700, {})  # idle from here on
    look(warn, t0 + 1000, {"1": 80})  # job 2's GPU busy: its idle run starts again
    look(warn, t0 + 1290, {})
    assert all(store.get(i).get("idle_warning") is None for i in (*ids, exempt))
    look(warn, t0 + 1310, {})  # job 1: idle for 610 s
    said = store.get(ids[0])["idle_warning"]["message"]
    assert said == "its GPUs were under 5 % for 10m10s (GPUDECK_IDLE_GPU=warn): it holds GPUs others could use"
    assert client.get(f"/api/v1/jobs/{ids[0]}").json["warning"] == said
    assert store.get(ids[1]).get("idle_warning") is None and store.get(young).get("idle_warning") is None
    assert store.get(exempt).get("idle_warning") is None and store.get(shell).get("idle_warning") is None

    stop = IdlePolicy("stop", window_s=600)
    look(stop, t0 + 2000, {})
    look(stop, t0 + 2700, {})
    assert {i for i in (*ids, exempt, shell) if redis.get(stop_key(i))} == set(ids)  # the exempt, the session never
    taken(redis, ids[1])
    assert lifecycle.end(redis, ids[1], outcome.STOPPED["idle"]) == "canceled"
    r = store.get(ids[1])
    assert r["reason"] == "idle"
    assert r["message"] == "stopped: its GPUs were under 5 % for 11m40s (GPUDECK_IDLE_GPU=stop, window 10m00s)"


def test_only_an_admin_exempts_a_job_from_the_idle_policy(client, users):
    refused = client.post("/api/v1/jobs", json={**JOB, "idle_exempt": True}, headers=users["alice"])
    assert refused.status_code == 403 and refused.json["details"]["rule"] == "idle_exempt_admin_only"
    assert client.post("/api/v1/jobs", json={**JOB, "idle_exempt": True}, headers=users["root"]).status_code == 201


def test_a_share_that_fits_a_gpu_whose_slots_are_busy_wants_one_more_there_and_takes_it(redis):
    """Job slots that follow demand (issue 64): one worker a GPU, as a default `gpudeck up`; shares that fit a GPU's
    memory but find its worker busy say so (slots_wanted_key), a GPU at a time as its memory allows, and a worker
    more on that GPU takes one. Nothing is wanted where the memory is not there or the GPU is held whole."""
    gpus(redis, per_gpu=1)
    wanted = lambda: json.loads(redis.get(slots_wanted_key("box")) or "{}")  # noqa: E731
    whole = submit(redis, gpus=1)
    first = submit(redis, gpu_memory="10G")
    held, other = on(redis, whole), on(redis, first)
    assert {held, other} == {"0", "1"} and wanted() == {}
    taken(redis, whole), taken(redis, first)  # (their workers run them)
    second = submit(redis, gpu_memory="10G")
    assert on(redis, second) is None and wanted() == {other: 1}  # (never beside the whole-GPU job)
    end(redis, whole)
    schedule.place(redis, DEFAULTS)
    assert on(redis, second) == held and wanted() == {}
    taken(redis, second)
    third, fourth = submit(redis, gpu_memory="30G"), submit(redis, gpu_memory="30G")
    assert on(redis, third) is None and on(redis, fourth) is None
    assert wanted() == {"0": 1, "1": 1}  # (67.6G free on each: 31G of it promised to the first, so the second
    huge = submit(redis, gpu_memory="60G")  # goes to the other GPU; 60G and its context fit neither then)
    assert on(redis, huge) is None and wanted() == {"0": 1, "1": 1}
    register(redis, "box.gpu1.extra", host="box", gpus=("1",))  # (what gpudeck up starts for it)
    schedule.place(redis, DEFAULTS)
    assert [on(redis, third), on(redis, fourth)].count("1") == 1 and wanted() == {"0": 1}
