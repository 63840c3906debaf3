"""GPUs that fail: the kernel log's `NVRM: Xid` lines, read by each worker host's sampler, classified as
k8s-device-plugin and GKE do, and nvidia-smi's uncorrectable ECC counts (a rise is a hardware fault, Xid 48's).

- A hardware fault (XID 48, 63, 64, 74, 79, 92, 94, 95, …: HARDWARE) cordons its GPU (`gpudeck:cordon:<host>:<gpu>`):
  it takes no new job until an admin uncordons it (`gpudeck gpu uncordon HOST:GPU`), and each job holding it is
  stopped with reason gpu_error, retried elsewhere from its checkpoint (an infrastructure failure: not charged to
  its owner's fair share); the operator's GPUDECK_ADMIN_NOTIFY endpoints are told (`gpu_cordoned`).
- An application fault (XID 13, 31, 43, 45, 68, 109: APPLICATION) is the job's own: the jobs on that GPU fail with the
  XID in their message; the GPU stays in service.
- Every XID counts in `gpudeck:gpu-errors` (host|gpu|xid -> n): /metrics' gpudeck_gpu_errors_total.

Only lines that appear after the sampler starts count (an XID from before is the past a reboot may have fixed).
Reading the kernel log needs root (or CAP_SYSLOG); without it nothing is watched and the worker's log says so
once."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from redis import Redis

from jobs import notify
from jobs.keys import CORDONS_KEY, GPU_ERRORS_KEY, LEGACY_CORDON_PATTERN, ecc_seen_key, xid_seen_key
from jobs.run.proc import output_of
from jobs.store import JobStore
from models.states import Reason

log = logging.getLogger(__name__)

XID_LINE = re.compile(
    r"^\[\s*(\d+\.\d+)\] NVRM: Xid \(PCI:([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+)[^)]*\): (\d+),?\s*(.*)$"
)
"""`[ 5123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.`"""
STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")
HARDWARE = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 123, 140})
"""XIDs of the hardware (double-bit ECC, row remapping failures, NVLink, fallen off the bus, GSP): cordon."""
APPLICATION = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs of the application (its own illegal access, its own abort): fail that job only."""
GPU_ERROR = Reason.GPU_ERROR.value
"""The stop of a job whose GPU failed under it (retried elsewhere)."""
GPU_APP_ERROR = "gpu_app_error"
"""The stop of a job whose own code made its GPU report an application XID (not retried)."""


def bus(raw: str) -> str:
    """A PCI address as the kernel log and nvidia-smi both can be matched by: `0000:3b:00` (domain:bus:device)."""
    parts = raw.lower().split(".")[0].split(":")
    domain, rest = parts[0][-4:].rjust(4, "0"), parts[1:3]
    return ":".join([domain, *(p.rjust(2, "0") for p in rest)])


def bus_ids(timeout: float = 10.0) -> dict[str, str]:
    """PCI address (bus()) -> GPU index, from nvidia-smi."""
    try:
        out = output_of(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"], timeout)
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in out.splitlines():
        index, _, address = (c.strip() for c in line.partition(","))
        if index and address:
            found[bus(address)] = index
    return found


class KernelLog:
    """The new `NVRM: Xid` lines of the kernel log (`dmesg`), each as (GPU index or None, xid, text). Where the
    host's log was read up to is kept in Redis (`gpudeck:xid-seen:<host>`), so each line counts once however many of
    the host's workers' samplers take turns reading it."""

    def __init__(self, redis: Redis | None = None, host: str = "") -> None:
        self.redis, self.host = redis, host
        self.seen: float | None = None
        self.said = False

    def read(self) -> list[tuple[str | None, int, str]]:
        if self.redis is not None:
            raw = self.redis.get(xid_seen_key(self.host))
            self.seen = float(raw) if raw is not None else None
        found = self._read()
        if self.redis is not None and self.seen is not None:
            self.redis.set(xid_seen_key(self.host), repr(self.seen))
        return found

    def _read(self) -> list[tuple[str | None, int, str]]:
        try:
            text = output_of(["dmesg"], 10)
        except (OSError, subprocess.SubprocessError) as exc:
            if not self.said:
                log.info("GPU errors are not watched here: the kernel log cannot be read (%s)", exc)
                self.said = True
            return []
        stamps = [float(m.group(1)) for m in (STAMP.match(x) for x in text.splitlines()) if m]
        if self.seen is not None and stamps and max(stamps) < self.seen:
            self.seen = None  # (the host rebooted: its log starts again at 0; what it holds now is the past)
        found: list[tuple[float, str, int, str]] = []
        last = self.seen
        for line in text.splitlines():
            m = XID_LINE.match(line.strip())
            if m:
                at = float(m.group(1))
                if self.seen is not None and at > self.seen:
                    found.append((at, bus(m.group(2)), int(m.group(3)), m.group(4).strip()))
                last = at if last is None else max(last, at)
        first = self.seen is None
        self.seen = last if last is not None else 0.0
        if first or not found:
            return []
        where = bus_ids()
        return [(where.get(address), xid, rest) for _, address, xid, rest in found]


ECC_XID = 48
"""What an uncorrectable ECC error is as an XID (the kernel log says `Xid 48`, a double-bit ECC error)."""
ECC_EVERY_S = 10.0
"""How often a host's GPUs' ECC counts are read."""
ECC_QUERY = ["nvidia-smi", "--query-gpu=index,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader,nounits"]


class EccWatch:
    """New uncorrectable ECC errors of a host's GPUs (nvidia-smi's volatile count since the driver loaded), every
    ECC_EVERY_S, each GPU whose count rose since the last read as an event (index, ECC_XID, text) for `handle`: a
    hardware fault. The counts are kept in Redis (`gpudeck:ecc-seen:<host>`), so the host's samplers taking turns
    count each rise once; a count first read, or one that fell (the driver reloaded), is where the next read starts
    (what happened before is the past, as the kernel log's lines from before are). `[N/A]` (ECC off, or a GPU
    without it): not watched."""

    def __init__(self, redis: Redis, host: str, every_s: float = ECC_EVERY_S) -> None:
        self.redis, self.host, self.every_s = redis, host, every_s
        self.last: float | None = None

    def read(self, now: float) -> list[tuple[str | None, int, str]]:
        if self.last is not None and now - self.last < self.every_s:
            return []
        self.last = now
        counts = self.counts()
        if not counts:
            return []
        key = ecc_seen_key(self.host)
        before = {k.decode(): int(v) for k, v in self.redis.hgetall(key).items()}
        self.redis.hset(key, mapping={gpu: str(n) for gpu, n in counts.items()})
        return [
            (gpu, ECC_XID, f"uncorrectable ECC errors: nvidia-smi's volatile count went {before[gpu]} -> {n}")
            for gpu, n in counts.items()
            if gpu in before and n > before[gpu]
        ]

    @staticmethod
    def counts() -> dict[str, int]:
        """GPU index -> its uncorrectable ECC errors since the driver loaded (GPUs without ECC left out)."""
        try:
            out = output_of(ECC_QUERY, 10)
        except (OSError, subprocess.SubprocessError):
            return {}
        found = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                found[parts[0]] = int(parts[1])
        return found


def handle(
    redis: Redis,
    host: str,
    events: list[tuple[str | None, int, str]],
    active: Sequence[dict[str, Any]],
    admins: tuple[str, ...] = (),
) -> None:
    """Apply what the kernel log said of this host's GPUs: count, cordon (telling the operator's `admins`
    endpoints, GPUDECK_ADMIN_NOTIFY) and stop (see the module's doc)."""
    store = JobStore(redis)
    for gpu, xid, text in events:
        redis.hincrby(GPU_ERRORS_KEY, f"{host}|{gpu if gpu is not None else '?'}|{xid}", 1)
        if gpu is None:
            log.warning("Xid %s on %s at a PCI address nvidia-smi does not list: %s", xid, host, text)
            continue
        hardware = xid in HARDWARE or xid not in APPLICATION
        at = time.time()
        if hardware:
            why = {"xid": xid, "at": at, "text": text[:300]}
            cordon(redis, host, gpu, why)
            log.error("GPU %s of %s cordoned: Xid %s (%s)", gpu, host, xid, text)
            notify.enqueue_event(redis, admins, "gpu_cordoned", {"host": host, "gpu": gpu, **why})
        on = [r for r in active if str(r.get("worker", "")).startswith(f"{host}.") and gpu in (r.get("gpu_ids") or [])]
        for rec in on:
            if store.stop_reason(rec["id"]):
                continue
            if hardware:
                message = (
                    f"its GPU {gpu} on {host} failed (Xid {xid}: {text[:200]}): the GPU is cordoned, the job "
                    "retried elsewhere from its checkpoint"
                )
                stop = GPU_ERROR
            else:
                message = f"Xid {xid} on its GPU {gpu}: an error of the job's own GPU code ({text[:200]})"
                stop = GPU_APP_ERROR
            store.update(rec["id"], gpu_error={"xid": xid, "gpu": gpu, "host": host, "message": message})
            store.request_stop(rec["id"], stop, only_first=True)


def cordon(redis: Redis, host: str, gpu: str, why: dict[str, Any]) -> None:
    """Take a GPU out of service (`why`: xid, at, text) until an admin uncordons it."""
    redis.hset(CORDONS_KEY, f"{host}:{gpu}", json.dumps(why))


def cause(why: dict[str, Any]) -> str:
    """Why a GPU is cordoned, in a few words: `Xid 79` (a hardware error), or `by alice: fan noise` (by hand)."""
    if why.get("xid") is not None:
        return f"Xid {why['xid']}"
    return f"by {why.get('by') or 'an admin'}" + (f": {why['text']}" if why.get("text") else "")


def cordons(redis: Redis) -> dict[tuple[str, str], dict[str, Any]]:
    """Every cordoned GPU: (host, index) -> {xid, at, text}."""
    out = {}
    for field, raw in sorted(redis.hgetall(CORDONS_KEY).items()):
        host, gpu = field.decode().rsplit(":", 1)
        why = json.loads(raw)
        out[(host, gpu)] = {**why, "cause": cause(why)}
    return out


def uncordon(redis: Redis, host: str, gpu: str) -> bool:
    """Put a cordoned GPU back in service; False when it was not cordoned."""
    return bool(redis.hdel(CORDONS_KEY, f"{host}:{gpu}"))


def adopt_legacy_cordons(redis: Redis) -> int:
    """Cordons an older gpudeck kept as a key a GPU (LEGACY_CORDON_PATTERN), moved into CORDONS_KEY (a GPU cordoned
    before an upgrade stays out of service after it); how many. Once, at start-up: it scans the keyspace."""
    moved = 0
    for key in redis.scan_iter(LEGACY_CORDON_PATTERN, count=1000):
        raw = redis.get(key)
        if raw is not None:
            _, _, host, gpu = key.decode().split(":", 3)
            redis.hsetnx(CORDONS_KEY, f"{host}:{gpu}", raw)
            moved += 1
        redis.delete(key)
    return moved


def errors(redis: Redis) -> dict[tuple[str, str, int], int]:
    """(host, gpu, xid) -> how many times the kernel log said so."""
    out = {}
    for field, n in redis.hgetall(GPU_ERRORS_KEY).items():
        host, gpu, xid = field.decode().rsplit("|", 2)
        out[(host, gpu, int(xid))] = int(n)
    return out
