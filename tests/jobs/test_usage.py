"""What a running job's processes use (jobs.usage): measured on real processes from /proc, stored in and read
back from a real Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from jobs import usage
from jobs.keys import usage_key
from tests.support.live import cpu_seconds, until

BUSY = "import time\nx = bytearray(64 * 2**20)\nend = time.time() + 30\nwhile time.time() < end: pass"
"""Holds 64 MiB and spins one core."""


def test_a_jobs_process_group_is_measured_and_nothing_else():
    job = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True)  # a trainer: its own group
    other = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True)  # not a job's
    try:
        meter = usage.UsageMeter()
        time.sleep(0.5)
        first, members = meter.measure({job.pid: 7})
        cpu0, t0 = cpu_seconds(job.pid), time.monotonic()
        assert members == {job.pid: 7} and first[7]["cpu_percent"] is None  # one reading: no rate yet
        # the next reading once it has had a tenth of a CPU-second (a second here; longer on a loaded box): a rate
        # over a window where it ran, whatever the load
        until(lambda: time.monotonic() - t0 >= 1.0 and cpu_seconds(job.pid) - cpu0 >= 0.1, 60, "0.1 CPU-s spun")
        used, _ = meter.measure({job.pid: 7})
        spun = (cpu_seconds(job.pid) - cpu0) / (time.monotonic() - t0) * 100  # what it really got of a core
        assert set(used) == {7} and used[7]["processes"] == 1
        assert used[7]["cpu_percent"] > 0 and abs(used[7]["cpu_percent"] - spun) <= 10 + spun / 10, (used, spun)
        assert used[7]["rss_bytes"] >= 64 * 2**20
    finally:
        for p in (job, other):
            p.kill()
            p.wait()


def test_usage_is_summed_over_hosts_and_a_stale_host_is_left_out(redis):
    gpus = [
        {"index": 0, "utilization": 97, "processes": [{"pid": 1, "job_id": 3, "used_memory_mib": 512}]},
        {"index": 1, "utilization": 5, "processes": [{"pid": 2, "job_id": 4, "used_memory_mib": 100}]},
    ]
    usage.write(redis, "a", {3: {"cpu_percent": 150.0, "rss_bytes": 100, "processes": 2}}, gpus)
    usage.write(redis, "b", {3: {"cpu_percent": None, "rss_bytes": 50, "processes": 1}}, None)
    got = usage.read(redis, [3, 4])
    assert set(got) == {3}  # job 4 has a GPU process but no reading of its own
    assert got[3]["cpu_percent"] == 150.0 and got[3]["rss_bytes"] == 150 and got[3]["processes"] == 3
    assert got[3]["gpus"] == [{"index": 0, "utilization": 97, "memory_used_mib": 512, "host": "a"}]
    assert got[3]["hosts"] == ["a", "b"] and 0 < redis.ttl(usage_key(3)) <= usage.TTL_S
    stale = json.loads(redis.hget(usage_key(3), "b"))
    redis.hset(usage_key(3), "b", json.dumps({**stale, "sampled_at": time.time() - usage.TTL_S - 1}))
    assert usage.read(redis, [3])[3]["hosts"] == ["a"]
