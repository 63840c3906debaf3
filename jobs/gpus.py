"""What `nvidia-smi` says about this host's GPUs: the list, and stats sampled into Redis every 2 s (with what
each running job's processes use: jobs.usage)."""

from __future__ import annotations

import json
import logging
import math
import os
import pwd
import re
import socket
import subprocess
import time
from typing import Any

from redis import Redis

from jobs import gpuhealth, quota, taskrecord, usage
from jobs.keys import GPU_HOSTS_KEY, gpus_key, gpus_lock_key
from jobs.periodic import Periodic
from jobs.record import Job, Kept
from jobs.run.proc import output_of
from jobs.settings import Settings
from jobs.store import JobStore
from models.common import duration, size_text
from models.states import Reason

log = logging.getLogger(__name__)

GPU_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?$")
GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
)
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
KEYS = {
    "utilization.gpu": "utilization",
    "memory.used": "memory_used_mib",
    "memory.total": "memory_total_mib",
    "temperature.gpu": "temperature_c",
    "power.draw": "power_draw_w",
    "power.limit": "power_limit_w",
    "used_memory": "used_memory_mib",
    "process_name": "name",
}
SAMPLE_EVERY_S = 2.0
"""How often a worker host samples nvidia-smi."""
SAMPLE_TTL_S = 10
"""A host's sample expires this long after it was written (at least: sample_ttl), so a dead host's GPUs vanish
from /gpus."""


def sample_ttl(last_round_s: float) -> int:
    """How long a host's sample stays: SAMPLE_TTL_S, or three rounds as long as the last one took where rounds are
    slow (nvidia-smi on a loaded box, the kernel log, the watchdog's stops), so that live GPUs do not vanish from
    /gpus between two samples; a dead sampler's still go within three of its rounds."""
    return max(SAMPLE_TTL_S, math.ceil(3 * (SAMPLE_EVERY_S + last_round_s)))


def _run(args: list[str], timeout: float) -> str | None:
    try:
        return output_of(["nvidia-smi", *args], timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("nvidia-smi %s: %s", " ".join(args), exc)
        return None


MIG_LINE = re.compile(r"^MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)$")
"""A MIG instance under its GPU in `nvidia-smi -L` (`  MIG 1g.10gb     Device  0: (UUID: MIG-…)`)."""


def list_gpus(timeout: float = 10.0) -> list[dict[str, str]]:
    """`nvidia-smi -L` as [{index, name, uuid}]: each GPU, or, for a GPU the operator split into MIG instances,
    each instance in its place (index and uuid its `MIG-` UUID, which CUDA_VISIBLE_DEVICES pins, `parent` its
    GPU's index): the GPU itself runs nothing then. Empty when there is no nvidia-smi or it fails."""
    out = _run(["-L"], timeout)
    if out is None:
        log.info("no GPUs: nvidia-smi -L did not answer")
        return []
    gpus: list[dict[str, str]] = []
    for line in out.splitlines():
        m = GPU_LINE.match(line.strip())
        if m:
            gpus.append({"index": m.group(1), "name": m.group(2), "uuid": m.group(3) or ""})
            continue
        mig = MIG_LINE.match(line.strip())
        if mig and gpus:
            parent = next(g for g in reversed(gpus) if "parent" not in g)
            gpus.append(
                {"index": mig.group(3), "name": f"{parent['name']} MIG {mig.group(1)}", "uuid": mig.group(3),
                 "parent": parent["index"]}
            )  # fmt: skip
    split = {g["parent"] for g in gpus if "parent" in g}
    return [g for g in gpus if "parent" in g or g["index"] not in split]


def _value(raw: str) -> Any:
    """A CSV cell: `[N/A]`, `[Not Supported]` and the like become None; numbers become numbers."""
    raw = raw.strip()
    if not raw or (raw.startswith("[") and raw.endswith("]")) or raw in ("N/A", "Not Supported"):
        return None
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw


def parse_csv(text: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """`--format=csv,noheader,nounits` output as dicts keyed by our names."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            # a name with a comma in it: the name is the third field of a GPU row
            extra = len(cells) - len(fields)
            if extra > 0 and fields is GPU_FIELDS:
                cells = cells[:2] + [", ".join(cells[2 : 3 + extra])] + cells[3 + extra :]
            else:
                continue
        row = {}
        for f, c in zip(fields, cells):
            row[KEYS.get(f, f)] = c if f in ("uuid", "name", "gpu_uuid", "process_name") else _value(c)
        rows.append(row)
    return rows


def sample(pid_jobs: dict[int, int], timeout: float = 10.0) -> list[dict[str, Any]] | None:
    """Per-GPU stats with their processes, each mapped to a gpudeck job id where its pid is a trainer's."""
    gpu_text = _run([f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"], timeout)
    if gpu_text is None:
        return None
    gpus = parse_csv(gpu_text, GPU_FIELDS)
    app_text = _run([f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv,noheader,nounits"], timeout) or ""
    apps = parse_csv(app_text, APP_FIELDS)
    for gpu in gpus:
        gpu["processes"] = [
            {
                "pid": a["pid"],
                "name": a["name"],
                "used_memory_mib": a["used_memory_mib"],
                "job_id": pid_jobs.get(a["pid"]),
                "user": user_of(a["pid"]),
            }
            for a in apps
            if a["gpu_uuid"] == gpu["uuid"]
        ]
    return gpus


def user_of(pid: Any) -> str | None:
    """Who runs process `pid` on this host (a foreign process on a GPU is somebody's), or None."""
    try:
        uid = os.stat(f"/proc/{int(pid)}").st_uid
        return pwd.getpwuid(uid).pw_name
    except (OSError, KeyError, TypeError, ValueError):
        return None


def utilization(redis: Redis, host: str) -> dict[str, Any]:
    """GPU index -> utilization (%, None where nvidia-smi says [N/A]) in `host`'s newest sample ({}: none)."""
    raw = redis.get(gpus_key(host))
    try:
        return {str(g.get("index")): g.get("utilization") for g in json.loads(raw)["gpus"]} if raw else {}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def write_sample(redis: Redis, host: str, doc: dict[str, Any], ttl: float | None = None) -> None:
    """A host's newest sample (`doc`: host, sampled_at, gpus), living `ttl` seconds (None: until the next), and
    the host among those read_all reads."""
    with redis.pipeline(transaction=False) as pipe:
        pipe.set(gpus_key(host), json.dumps(doc), ex=None if ttl is None else max(1, int(ttl)))
        pipe.sadd(GPU_HOSTS_KEY, host)
        pipe.execute()


def read_all(redis: Redis) -> list[dict[str, Any]]:
    """Every live host's latest sample, by host name."""
    hosts = sorted(h.decode() for h in redis.smembers(GPU_HOSTS_KEY))
    values = redis.mget([gpus_key(h) for h in hosts]) if hosts else []
    return [json.loads(v) for v in values if v]


class Sampler(Periodic):
    """Samples this host's GPUs into Redis every SAMPLE_EVERY_S, once per host however many workers run."""

    what, every_s, lease_share = "gpu sampler", SAMPLE_EVERY_S, 0.9

    def __init__(
        self,
        redis_url: str,
        host: str | None = None,
        grace_s: float = 10.0,
        context: int = Settings.gpu_context_memory,
        idle_gpu: str = "off",
        idle_window_s: float = 1800.0,
        admins: tuple[str, ...] = (),
    ):
        super().__init__(redis_url, "gpudeck-gpu-sampler")
        self.host = host or socket.gethostname()
        self.meter = usage.UsageMeter()
        self.sampled_at: float | None = None
        self.watchdog = Watchdog(grace_s, context)
        self.leftovers = Leftovers()
        self.kernel = gpuhealth.KernelLog(self.redis, self.host)
        self.ecc = gpuhealth.EccWatch(self.redis, self.host)
        self.admins = admins
        self.idle = IdlePolicy(idle_gpu, idle_window_s)

    def lease_key(self) -> str:
        return gpus_lock_key(self.host)

    def pid_jobs(self, active: list[Job]) -> dict[int, int]:
        """Trainer pid on this host -> its job, of the `active` records."""
        out = {}
        for rec in active:  # (one deleted meanwhile is not among them)
            job_id = rec["id"]
            if rec.get("pid") and self.here(rec):
                out[rec["pid"]] = job_id
            if (spec := rec.spec).multi_worker:
                for task in taskrecord.read(self.redis, job_id, spec.workers):
                    if task.get("pid") and task.get("host") == self.host:
                        out[task["pid"]] = job_id
        return out

    def here(self, rec: Job) -> bool:
        """Whether a job's worker runs on this host."""
        return str(rec.get("worker", "")).startswith(f"{self.host}.")

    def round(self) -> None:
        active = JobStore(self.redis).active()  # (read once: the processes' jobs, and who holds which GPUs here)
        # every process of a job's trainers (a command's python under its shell too) maps to the job
        used, members = self.meter.measure(self.pid_jobs(active))
        gpus = sample(members)
        now = time.monotonic()
        if gpus is not None:
            self.leftovers.mark(gpus, time.time())
            doc = {"host": self.host, "sampled_at": time.time(), "gpus": gpus}
            write_sample(self.redis, self.host, doc, sample_ttl(self.last_round_s))
            # (a job's GPUs over its life: what it held them for, how busy; each second once, whichever of the
            # host's samplers books it)
            seconds = usage.booked_seconds(self.redis, self.host, time.time(), 3 * SAMPLE_EVERY_S)
            if seconds:
                mine = [r for r in active if r.get("gpu_ids") and self.here(r)]
                held = {r["id"]: (r.get("owner"), list(r["gpu_ids"]), quota.part(r)) for r in mine}
                usage.account(self.redis, self.host, held, gpus, seconds)
        else:
            usage.unbooked(self.redis, self.host)
        self.sampled_at = now if gpus is not None else None
        usage.write(self.redis, self.host, used, gpus)
        if gpus is not None:
            self.watchdog.look(JobStore(self.redis), [r for r in active if self.here(r)], gpus, now)
            self.idle.look(JobStore(self.redis), [r for r in active if self.here(r)], gpus, time.time())
            events = self.kernel.read()  # (the kernel log's new XIDs: a GPU that failed, or a job's own error)
            events += self.ecc.read(now)  # (and new uncorrectable ECC errors)
            if events:
                gpuhealth.handle(self.redis, self.host, events, active, self.admins)


class Leftovers:
    """Processes that outlive their job on a GPU: a pid a sample once mapped to a job that the next samples see
    with no live job is marked `left_by` (that job) and `left_since` (when first seen so). The scheduler gives the
    GPU no job of whole GPUs while one holds memory there (jobs.placement.memory), /healthz names those held for a
    minute."""

    def __init__(self) -> None:
        self.owned: dict[int, int] = {}
        """pid -> the job it was seen as (while nvidia-smi lists it)."""
        self.since: dict[int, float] = {}

    def mark(self, gpus: list[dict[str, Any]], now: float) -> None:
        seen: set[int] = set()
        for gpu in gpus:
            for p in gpu.get("processes") or []:
                pid = p.get("pid")
                seen.add(pid)
                if p.get("job_id") is not None:
                    self.owned[pid] = p["job_id"]
                    self.since.pop(pid, None)
                elif pid in self.owned:
                    p["left_by"] = self.owned[pid]
                    p["left_since"] = self.since.setdefault(pid, now)
        for pid in set(self.owned) - seen:
            del self.owned[pid]
            self.since.pop(pid, None)


class Watchdog:
    """Every share's GPU memory against its `gpu_memory`, from each sample's processes (each process counts for
    the job whose process tree holds it, so nobody pays for a neighbour), each process allowed its CUDA `context`
    beside (GPUDECK_GPU_CONTEXT_MEMORY: nvidia-smi counts it, a framework's cap does not): a job above that for
    longer than `grace_s` is stopped as a cancel stops it, reason gpu_memory_exceeded, its record saying the peak
    and the share. A job of whole GPUs is never watched (it has the GPU)."""

    def __init__(self, grace_s: float, context: int):
        self.grace_s, self.context = grace_s, context
        self.over: dict[int, tuple[float, int, str]] = {}
        """job id -> (when it went over, its peak in bytes, its GPU) while it stays over."""

    def look(self, store: JobStore, active: list[Job], gpus: list[dict[str, Any]], now: float) -> None:
        shares = {r["id"]: r for r in active if Kept(r["spec"]).gpu_memory}
        used: dict[int, int] = {}
        where: dict[int, str] = {}
        processes: dict[int, int] = {}
        for gpu in gpus:
            for p in gpu.get("processes") or []:
                if p.get("job_id") in shares:
                    used[p["job_id"]] = used.get(p["job_id"], 0) + (int(p.get("used_memory_mib") or 0) << 20)
                    where[p["job_id"]] = str(gpu.get("index"))
                    processes[p["job_id"]] = processes.get(p["job_id"], 0) + 1
        for job_id in set(self.over) - set(shares):
            del self.over[job_id]
        for job_id, rec in shares.items():
            cap = rec.spec.gpu_memory or 0
            if used.get(job_id, 0) <= cap + processes.get(job_id, 0) * self.context:
                self.over.pop(job_id, None)
                continue
            since, peak, _ = self.over.get(job_id, (now, 0, ""))
            peak = max(peak, used[job_id])
            self.over[job_id] = (since, peak, where[job_id])
            if now - since < self.grace_s or store.stop_reason(job_id):
                continue
            n = processes[job_id]
            contexts = f"{n} CUDA context{'s' if n > 1 else ''} of {size_text(self.context)}"
            message = (
                f"it used {size_text(peak)} of GPU {where[job_id]} (its peak) for {now - since:.0f} s, more than "
                f"its gpu_memory of {size_text(cap)} and {contexts} (GPUDECK_GPU_MEMORY_GRACE: {self.grace_s:g} s, "
                "GPUDECK_GPU_CONTEXT_MEMORY): stopped so that the jobs sharing the GPU go on"
            )
            store.update(
                job_id,
                gpu_memory_exceeded={"peak": peak, "gpu_memory": cap, "gpu": where[job_id], "message": message},
            )
            store.request_stop(job_id, Reason.GPU_MEMORY_EXCEEDED.value, only_first=True)
            log.warning("job %s: %s", job_id, message)


class IdlePolicy:
    """The operator's idle-GPU policy (GPUDECK_IDLE_GPU=warn|stop, GPUDECK_IDLE_GPU_WINDOW): a running job whose
    every GPU reads under usage.IDLE_PERCENT for a whole window is warned (its record's `idle_warning`: the job's
    `warning`, ⚠ in listings) or, with `stop`, stopped as a cancel stops it (canceled, reason idle). Its first window
    never counts (loading data, compiling: nothing is judged before start + window); sessions (their own `idle`
    rule) and jobs an admin marked `idle_exempt` are never judged."""

    def __init__(self, mode: str, window_s: float):
        self.mode, self.window_s = mode, window_s
        self.since: dict[int, float] = {}
        """job id -> when its GPUs went idle (wall clock), while they stay idle."""

    def look(self, store: JobStore, active: list[Job], gpus: list[dict[str, Any]], now: float) -> None:
        if self.mode == "off":
            return
        util = {str(g.get("index")): g["utilization"] for g in gpus if isinstance(g.get("utilization"), (int, float))}
        watched = set()
        for rec in active:
            spec = rec.spec
            started = rec.get("running_at") or rec.get("started_at")
            read = [util[i] for i in rec.get("gpu_ids") or [] if i in util]
            if rec.get("status") != "running" or spec.is_session or spec.idle_exempt:
                continue
            if not started or not read:
                continue
            if now - float(started) < self.window_s or max(read) >= usage.IDLE_PERCENT:
                continue  # (its first window, or busy: an idle run starts again)
            watched.add(rec["id"])
            since = self.since.setdefault(rec["id"], now)
            if now - since < self.window_s:
                continue
            idle = f"its GPUs were under {usage.IDLE_PERCENT} % for {duration(now - since)}"
            if self.mode == "warn" and not rec.get("idle_warning"):
                message = f"{idle} (GPUDECK_IDLE_GPU=warn): it holds GPUs others could use"
                store.update(rec["id"], idle_warning={"since": since, "message": message})
                log.warning("job %s: %s", rec["id"], message)
            elif self.mode == "stop" and not store.stop_reason(rec["id"]):
                message = f"stopped: {idle} (GPUDECK_IDLE_GPU=stop, window {duration(self.window_s)})"
                store.update(rec["id"], idle_stop={"since": since, "message": message})
                store.request_stop(rec["id"], Reason.IDLE.value, only_first=True)
                log.warning("job %s: %s", rec["id"], message)
        for job_id in set(self.since) - watched:
            del self.since[job_id]
