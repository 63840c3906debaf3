"""/healthz (is the job store reachable, are workers alive) and /metrics (Prometheus text)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from flask import Blueprint, Response, current_app
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from redis.exceptions import RedisError

from api import deps
from jobs import disk, gpuhealth, queues, quota, store, tokens, usage
from jobs import gpus as gpus_mod
from jobs import worker as worker_mod
from jobs.keys import AFTER_KEY, PRIORITIES, job_key, queue_name
from jobs.run import warm
from jobs.store import JobStore

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    """200 while Redis answers ("ok", or "degraded" when no worker is alive to run jobs); 503 when it does not."""
    slots = current_app.extensions["gpudeck.longpolls"]
    long_polls = {"open": slots.held(), "limit": slots.total, "per_client": slots.per_client}  # this process's
    try:
        try:
            deps.redis().ping()
            workers = worker_mod.describe(deps.redis())
        except RedisError as exc:
            if not store.cannot_write(exc):
                raise
            workers = []  # (a Redis that cannot save refuses PING too, and RQ tidies its registry as it reads)
        writes = store.write_refusal(deps.redis())
    except RedisError as exc:
        down = {"status": "unavailable", "redis": f"unreachable: {exc}", "workers": 0, "workers_alive": 0}
        return {**down, "long_polls": long_polls, "command_jobs": deps.settings().command_jobs_allowed}, 503
    alive = sum(w["alive"] for w in workers)
    settings = deps.settings()
    space = disk.report(settings)
    # Degraded while any registered worker stopped beating (killed, hung, its host gone) or none is alive, while
    # Redis cannot save (it refuses writes) and while the disk is below GPUDECK_MIN_FREE (new jobs are refused).
    ok = alive and alive == len(workers) and writes is None and not space["low"]
    return {
        "status": "ok" if ok else "degraded",
        "redis": "ok" if writes is None else f"cannot write: {writes}",
        "workers": len(workers),
        "workers_alive": alive,
        "long_polls": long_polls,
        # what a client's form offers (named tokens require a token, as GPUDECK_TOKENS does)
        "command_jobs": settings.command_jobs_allowed or tokens.any_named(deps.redis()),
        "disk": space,
        "redis_saving": _saving(deps.redis()),
        "gpus_not_released": not_released(deps.redis()),
    }


NOT_RELEASED_S = 60
"""How long a process may hold GPU memory after its job ended before /healthz names it."""


def not_released(redis, now: float | None = None) -> list[dict]:
    """GPU memory still held a minute after its job ended (a process that outlived it: jobs.gpus.Leftovers): host,
    GPU, the job, the pid, MiB, for how long. Such a GPU takes no job of whole GPUs meanwhile."""
    now = time.time() if now is None else now
    out = []
    for host in gpus_mod.read_all(redis):
        for g in host.get("gpus", []):
            for p in g.get("processes") or []:
                since = p.get("left_since")
                if p.get("left_by") is not None and since is not None and now - since >= NOT_RELEASED_S:
                    out.append(
                        {
                            "host": host.get("host"),
                            "gpu": str(g.get("index")),
                            "job_id": p["left_by"],
                            "pid": p.get("pid"),
                            "used_memory_mib": p.get("used_memory_mib"),
                            "for_s": round(now - since),
                        }
                    )
    return out


def _saving(redis) -> str:
    """How Redis keeps the queue across a restart: `appendonly`, `snapshots`, `none`, or `unknown` (a Redis that
    will not say: CONFIG off, as some managed ones have it)."""
    try:
        if int(redis.info("persistence").get("aof_enabled") or 0):
            return "appendonly"
        return "snapshots" if (redis.config_get("save").get("save") or "").strip() else "none"
    except RedisError:
        return "unknown"


class _Collector:
    """Reads the store when Prometheus scrapes; nothing is kept between scrapes."""

    def __init__(self, redis):
        self.redis = redis

    def collect(self):
        jobs = GaugeMetricFamily("gpudeck_jobs", "Jobs by status.", labels=["status"])
        for status, n in JobStore(self.redis).count_by_status().items():
            jobs.add_metric([status], n)
        yield jobs
        queued = GaugeMetricFamily(
            "gpudeck_queue_length", "Queued jobs by kind (cpu, gpus-N, with -high/-low).", labels=["queue"]
        )
        ids = [i for members in queues.lines(self.redis).values() for i, _ in members]
        ids += [int(i) for i in self.redis.smembers(AFTER_KEY)]
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(job_key(job_id), "queue")
        counts = Counter(q.decode() for q in pipe.execute() if q)
        for name in sorted({"cpu", *worker_kinds(1), *counts}):
            queued.add_metric([name], counts.get(name, 0))
        yield queued
        workers = GaugeMetricFamily("gpudeck_workers", "Workers by state.", labels=["state"])
        states: dict[str, int] = {"idle": 0, "busy": 0, "lost": 0}
        for w in worker_mod.describe(self.redis):
            states[w["state"]] = states.get(w["state"], 0) + 1
        for state, n in states.items():
            workers.add_metric([state], n)
        yield workers
        ready = warm.ready(self.redis)  # (what warm starts cost: issue 65 #4)
        yield GaugeMetricFamily("gpudeck_warm_trainers", "Warm trainers kept ready by workers.", value=len(ready))
        held = GaugeMetricFamily(
            "gpudeck_warm_memory_bytes", "Resident memory of a worker's warm trainer or interpreter.", labels=["worker"]
        )
        for name, said in sorted(ready.items()):
            held.add_metric([name], said["rss_bytes"])
        yield held
        labels = ["host", "gpu", "uuid", "name"]
        util = GaugeMetricFamily("gpudeck_gpu_utilization_ratio", "GPU utilization (0-1).", labels=labels)
        used = GaugeMetricFamily("gpudeck_gpu_memory_used_bytes", "GPU memory in use.", labels=labels)
        total = GaugeMetricFamily("gpudeck_gpu_memory_total_bytes", "GPU memory.", labels=labels)
        for host in gpus_mod.read_all(self.redis):
            for g in host["gpus"]:
                key = [host["host"], str(g["index"]), g["uuid"], g["name"]]
                # Values nvidia-smi reported as [N/A] stay absent rather than reading as zero.
                if g.get("utilization") is not None:
                    util.add_metric(key, g["utilization"] / 100)
                if g.get("memory_used_mib") is not None:
                    used.add_metric(key, g["memory_used_mib"] * 2**20)
                if g.get("memory_total_mib") is not None:
                    total.add_metric(key, g["memory_total_mib"] * 2**20)
        yield from (util, used, total)
        xids = CounterMetricFamily(
            "gpudeck_gpu_errors", "XIDs the kernel log reported per GPU.", labels=["host", "gpu", "xid"]
        )
        for (host_name, gpu, xid), n in sorted(gpuhealth.errors(self.redis).items()):
            xids.add_metric([host_name, gpu, str(xid)], n)
        yield xids
        idle = CounterMetricFamily(
            "gpudeck_idle_gpu_seconds", "GPU-seconds an owner held GPUs under 5 % utilization.", labels=["owner"]
        )
        for owner, hours in sorted(usage.idle_gpu_hours(self.redis).items(), key=lambda kv: kv[0] or ""):
            idle.add_metric([owner or "-"], hours * 3600)
        yield idle
        held = GaugeMetricFamily(
            "gpudeck_project_gpus", "GPUs a project's running jobs hold (a share counts its part).", labels=["project"]
        )
        by_project: dict[str, float] = {}
        for rec in JobStore(self.redis).active():
            if rec.spec.project is not None:
                by_project[rec.spec.project] = by_project.get(rec.spec.project, 0.0) + quota.holds(rec)
        for project, gpus in sorted(by_project.items()):
            held.add_metric([project], gpus)
        yield held
        cordoned = GaugeMetricFamily("gpudeck_gpus_cordoned", "GPUs out of service after a hardware error.")
        cordoned.add_metric([], len(gpuhealth.cordons(self.redis)))
        yield cordoned
        settings = deps.settings()
        free = GaugeMetricFamily("gpudeck_disk_free_bytes", "Free bytes on the filesystem of GPUDECK_HOME.")
        free.add_metric([], disk.space(settings.home)[0])
        yield free
        taken = GaugeMetricFamily(
            "gpudeck_disk_used_bytes",
            "Bytes under GPUDECK_HOME by kind (measured at most once a minute).",
            labels=["kind"],
        )
        for kind, n in disk.used(settings, self.redis_dir()).items():
            taken.add_metric([kind], n)
        yield taken

    def redis_dir(self) -> Path | None:
        """Where Redis keeps its files, when this host can see them (an embedded or local Redis)."""
        try:
            found = Path(self.redis.config_get("dir").get("dir") or "")
        except RedisError:  # a managed Redis may not answer CONFIG
            return None
        return found if found.is_absolute() and found.is_dir() else None


@bp.get("/metrics")
def metrics():
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(deps.redis()))
    return Response(generate_latest(registry), content_type="text/plain; version=0.0.4; charset=utf-8")  # (as is)


def worker_kinds(gpus: int) -> list[str]:
    """The queue labels of jobs of one GPU count, by priority."""
    return [queue_name(gpus, p) for p in PRIORITIES]
