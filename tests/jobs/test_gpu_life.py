"""A job's GPUs over its life (issue 44 §3, part): what nvidia-smi read of the GPUs a job holds, every sample,
added up on its record and its owner's idle GPU-hours, against a real Redis with the samples the test gives."""

from __future__ import annotations

from jobs import quota, usage
from jobs.forecast import share_table
from jobs.store import JobStore
from jobs.views import job_view
from tests.support.policy import DEFAULTS
from tui.widgets.fmt import gpu_amount


def test_a_jobs_gpu_utilization_over_its_life_and_its_owners_idle_gpu_hours(redis, client):
    store = JobStore(redis)
    store.create(1, {"model": "lenet", "gpus": 1}, "gpus-1", extra={"owner": "alice"})
    store.create(2, {"model": "lenet", "gpus": 2}, "gpus-2", extra={"owner": "bob"})
    held = {1: ("alice", ["0"], 1.0), 2: ("bob", ["1", "2"], 1.0)}
    for util0, util2 in ((90, 1), (90, 3), (2, 50), (2, 50)):  # four samples, 2 s apart
        gpus = [
            {"index": 0, "utilization": util0},
            {"index": 1, "utilization": None},  # ([N/A]: not counted)
            {"index": 2, "utilization": util2},
        ]
        usage.account(redis, "box", held, gpus, 2.0)
    alice, bob = job_view(store.get(1))["gpu_life"], job_view(store.get(2))["gpu_life"]
    assert alice == {"mean_percent": 46.0, "idle_percent": 50.0, "gpu_seconds": 8.0}, alice
    assert bob == {"mean_percent": 26.0, "idle_percent": 50.0, "gpu_seconds": 8.0}, bob
    store.create(3, {"model": "lenet", "gpus": 1}, "gpus-1")
    assert job_view(store.get(3))["gpu_life"] is None  # (no reading yet)
    table = {o["owner"]: o["idle_gpu_hours"] for o in share_table(redis, DEFAULTS)}
    assert table == {"alice": round(4 / 3600, 3), "bob": round(4 / 3600, 3)}, table  # (two idle samples each)
    assert usage.idle_gpu_hours(redis) == {"alice": 4 / 3600, "bob": 4 / 3600}
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'gpudeck_idle_gpu_seconds_total{owner="alice"} 4.0' in metrics
    assert 'gpudeck_idle_gpu_seconds_total{owner="bob"} 4.0' in metrics


def test_each_second_of_a_hosts_gpus_is_booked_once_whichever_sampler_books_it(redis):
    # Two samplers of one host take turns (the sampling lease moves between its workers' processes), each every 2 s
    # of a moved clock, for 60 s: the job's GPU is booked 60 s, not each sampler's own interval since its last turn.
    store = JobStore(redis)
    store.create(1, {"model": "lenet", "gpus": 1}, "gpus-1", extra={"owner": "alice"})
    gpus = [{"index": 0, "utilization": 80}]
    for n in range(31):  # t = 0, 2, …, 60
        now = 1000.0 + 2 * n
        seconds = usage.booked_seconds(redis, "box", now, 6.0)  # (sampler n % 2: it does not matter which)
        assert seconds == (0.0 if n == 0 else 2.0)
        usage.account(redis, "box", {1: ("alice", ["0"], 1.0)}, gpus, seconds)
    assert job_view(store.get(1))["gpu_life"]["gpu_seconds"] == 60.0
    usage.unbooked(redis, "box")  # (nvidia-smi failed: the gap is not booked)
    assert usage.booked_seconds(redis, "box", 2000.0, 6.0) == 0.0
    assert usage.booked_seconds(redis, "box", 2030.0, 6.0) == 6.0  # (at most three intervals)


def test_shares_count_as_their_parts_in_gpu_seconds_the_share_table_and_the_title_bar(redis):
    from tui.widgets.fmt import box_summary, share_rows

    store = JobStore(redis)
    # three users on shares of GPU 0 (parts 0.25, 0.25, 0.5: they hold one GPU together), alice on GPU 1 whole
    for job_id, owner, part in ((1, "alice", 0.25), (2, "bob", 0.25), (3, "carol", 0.5)):
        store.create(job_id, {"model": "lenet", "gpus": 1, "gpu_memory": 10 << 30}, "gpus-1", extra={"owner": owner})
        store.transition(job_id, ("queued",), status="running", gpu_ids=["0"], gpu_fraction=part)
    store.create(4, {"model": "lenet", "gpus": 1}, "gpus-1", extra={"owner": "alice"})
    store.transition(4, ("queued",), status="running", gpu_ids=["1"])
    held = {r["id"]: (r["owner"], r["gpu_ids"], quota.part(r)) for r in store.active()}
    usage.account(redis, "box", held, [{"index": 0, "utilization": 90}, {"index": 1, "utilization": 90}], 60.0)
    seconds = {i: job_view(store.get(i))["gpu_life"]["gpu_seconds"] for i in (1, 2, 3, 4)}
    assert seconds == {1: 15.0, 2: 15.0, 3: 30.0, 4: 60.0}  # (GPU 0's 60 s split as the scheduler split it)
    share = {"owners": share_table(redis, DEFAULTS)}
    gpus = {o["owner"]: o["gpus"] for o in share["owners"]}
    assert gpus == {"alice": 1.25, "bob": 0.25, "carol": 0.5} and sum(gpus.values()) == 2.0
    assert [row[3] for row in share_rows(share)] == [gpu_amount(gpus[o["owner"]]) for o in share["owners"]]
    workers = [{"alive": True, "host": "box", "gpus": ["0", "1"]}]
    me = {"auth": "named", "name": "alice", "max_gpus": 2}
    assert box_summary(share, workers, me) == "2/2 GPUs busy · 0 queued · you: 1.25/2 GPUs"
    assert box_summary(share, workers, {**me, "name": "bob"}) == "2/2 GPUs busy · 0 queued · you: 0.25/2 GPUs"
