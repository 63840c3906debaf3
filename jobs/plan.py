"""Time in the scheduler: how long each job is expected to run, and the plan of the line that backfill and expected
starts share (the scheduler follows it, `expected_start` reports it: one plan, two answers).

- A job's expected duration: what its owner declared (`expected_duration`), else what gpudeck learned (the 90th
  percentile of the last HISTORY succeeded runs): of the same job shape of the same owner (a zoo job's shape is
  its model, dataset and params, a command's its command), else of the same *kind* of the owner's (a zoo job's
  model and dataset name, a command's entry point — its script or module, not its whole text — and the GPUs and
  workers it takes: issue 66), else of that kind of anybody's; bounded by its `timeout`; else its timeout; else
  unknown. Where it comes from (`history`, `kind`, `others`) and the spread of the runs it comes from go with it.
- A running job holds its workers until its progress says it ends (steps per second so far), else until its start
  plus its expected duration, else for good (unknown). One that has overrun its estimate is not killed for it (its
  timeout does that), but its end is unknown from then on: the job waiting for its workers keeps them as it would
  without backfill, so nothing backfills there until it ends (estimates too short cannot starve a big job: each
  small job delays it at most by its own overrun, once).
- The plan (Timeline): each worker's reserved intervals. Placing a job now takes its workers from now to its
  expected end; a job that must wait gets a reservation at the earliest time its workers are all free long enough
  (conservative backfill: every waiting job the round reaches, up to RESERVE_DEPTH, keeps its place in time), and
  a later job starts now only on workers free until it is expected to end. A job of unknown duration starts now
  only on workers nobody has reserved."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from jobs.keys import durations_key
from jobs.placement import WHOLE, GpuKey, Slot, choose, gpu_keys
from jobs.record import Job

INF = math.inf
HISTORY = 20
"""Succeeded runs of one owner's job shape an estimate learns from."""
QUANTILE = 0.9
RESERVE_DEPTH = 32
"""Waiting jobs a round gives a reservation (Slurm's bf_max_job_test): later ones start now in gaps, or wait."""


def shape(spec: dict[str, Any]) -> str:
    """What makes two jobs the same for an estimate: a zoo job's model, dataset and params, a command's command (and
    a session's kind), and the GPUs and workers it runs on. (The stored spec as it is, not its typed view: the hash
    names the owner's history in Redis, and must not move with a default.)"""
    what = (
        {"command": spec.get("command"), "kind": spec.get("kind")}
        if spec.get("command") is not None or spec.get("kind")
        else {"model": spec.get("model"), "dataset": spec.get("dataset"), "params": spec.get("params")}
    )
    what |= {"gpus": spec.get("gpus"), "workers": spec.get("workers")}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


PYTHONS = re.compile(r"^(python[\d.]*|pypy[\d.]*|torchrun|accelerate|deepspeed|uv|poetry|pipenv|conda)$")
"""Programs whose first script or module argument is what a command runs (`python -m pkg`, `torchrun train.py`)."""
SHELLS = ("sh", "bash", "zsh", "env", "exec", "nohup", "time", "run", "launch")


def entry_point(command: str | list[str] | None) -> str:
    """What a command runs, not its whole text: its script (`train.py`) or module (`-m pkg.train`), else its first
    program; its options and arguments left out (`python train.py --lr 0.1` and `--lr 0.2` are one kind)."""
    if command is None:
        return ""
    try:
        words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    except ValueError:
        words = str(command).split()
    words = [w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]  # (VAR=value before it)
    for n, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        if word in ("-m", "--module") and n + 1 < len(words):
            return f"module {words[n + 1]}"
        if word == "-c":  # (python -c CODE: its code is all it runs)
            return f"inline {' '.join(words[n + 1 :])}"
        if word.endswith((".py", ".sh")):
            return f"script {word}"
        if n == 0 and not (PYTHONS.match(base) or base in SHELLS):
            return f"program {word}"
    return f"program {words[0]}" if words else ""


def kind(spec: dict[str, Any]) -> str:
    """What makes two jobs of one kind for an estimate when their shapes differ: a zoo job's model and dataset name
    (not its params or version), a command's entry point (not its text), a session's kind; and the GPUs and
    workers it takes."""
    if spec.get("command") is not None or spec.get("kind"):
        what = {"entry": entry_point(spec.get("command")), "kind": spec.get("kind")}
    else:
        what = {"model": spec.get("model"), "dataset": str(spec.get("dataset") or "").split(":", 1)[0]}
    what |= {"gpus": spec.get("gpus"), "workers": spec.get("workers")}
    return "kind-" + hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


ANYBODY = "*"
"""The owner whose history is every owner's runs of a kind (an estimate for a newcomer's first job)."""


def learn(redis: Any, rec: Job, seconds: float) -> None:
    """A run of `rec`'s shape took `seconds` (a succeeded attempt): kept for the next estimates of the owner's shape,
    the owner's kind and anybody's kind; and, where it reported its steps, the seconds a step of that kind took (the
    owner's and anybody's). `redis`: a client or a pipeline."""
    p = rec.get("progress") or {}
    step, first = p.get("step"), p.get("first_step") or 0
    per_step = [(key, seconds / (step - first)) for key in History.rate_keys_of(rec)] if step and step > first else []
    for key, value in [(key, seconds) for key, _ in History.keys_of(rec)] + per_step:
        redis.lpush(key, round(value, 6))
        redis.ltrim(key, 0, HISTORY - 1)
        redis.expire(key, 90 * 86400)


def steps_left(rec: Job) -> int | None:
    """The steps a job says it will run (a command's `total_steps`, a zoo job's `params.steps`), less those a
    checkpoint it resumes from has done; None where it says none."""
    spec = rec.spec
    total = spec.total_steps or spec.params.get("steps")
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        return None
    done = (rec.get("progress") or {}).get("step") or 0
    return max(1, total - int(done))


SOURCES = ("history", "steps", "kind", "others")
"""Where a learned estimate comes from, most precise first: the owner's runs of the same job shape; the steps it says
it runs at the pace its kind's runs went (the owner's, else anybody's); the owner's runs of the same kind;
anybody's runs of that kind."""
PER_STEP = ":per-step"
"""The suffix of a kind's key of seconds a step (History.rate_keys_of)."""


@dataclass(frozen=True)
class Learned:
    """An estimate learned from runs: the QUANTILE of them, where from (SOURCES), how many, and their spread (the
    shortest and longest)."""

    seconds: float
    source: str
    runs: int
    spread: tuple[float, float]


class History:
    """What gpudeck learned of jobs' durations, read from Redis as it is asked for (`of`), each key once per History
    (a scheduling round makes one), several at once with `prefetch`."""

    def __init__(self, redis: Redis):
        self.redis = redis
        self.known: dict[str, list[float]] = {}

    @staticmethod
    def keys_of(rec: Job) -> list[tuple[str, str]]:
        spec, owner = rec["spec"], rec.get("owner")
        return [
            (durations_key(owner, shape(spec)), "history"),
            (durations_key(owner, kind(spec)), "kind"),
            (durations_key(ANYBODY, kind(spec)), "others"),
        ]

    @staticmethod
    def rate_keys_of(rec: Job) -> list[str]:
        """Where the seconds a step of `rec`'s kind took are kept: its owner's runs, then anybody's."""
        spec, owner = rec["spec"], rec.get("owner")
        return [durations_key(owner, kind(spec) + PER_STEP), durations_key(ANYBODY, kind(spec) + PER_STEP)]

    def prefetch(self, recs: Iterable[Job]) -> History:
        keys = sorted(
            {key for r in recs for key in [k for k, _ in self.keys_of(r)] + self.rate_keys_of(r)} - set(self.known)
        )
        if keys:
            with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.lrange(key, 0, HISTORY - 1)
                for key, values in zip(keys, pipe.execute()):
                    self.known[key] = sorted(float(v) for v in values)
        return self

    def learned(self, rec: Job) -> Learned | None:
        """The estimate for `rec` from the most precise history there is of it (SOURCES), or None."""
        (shaped, _), *kinds = self.keys_of(rec)
        runs = self.runs(shaped)
        if runs:
            return Learned(_quantile(runs), "history", len(runs), (runs[0], runs[-1]))
        steps = steps_left(rec)
        for key in self.rate_keys_of(rec) if steps else []:
            pace = self.runs(key)
            if pace and steps:
                return Learned(steps * _quantile(pace), "steps", len(pace), (steps * pace[0], steps * pace[-1]))
        for key, source in kinds:
            runs = self.runs(key)
            if runs:
                return Learned(_quantile(runs), source, len(runs), (runs[0], runs[-1]))
        return None

    def runs(self, key: str) -> list[float]:
        """What is kept under `key`, sorted (read once)."""
        if key not in self.known:
            self.known[key] = sorted(float(v) for v in self.redis.lrange(key, 0, HISTORY - 1))
        return self.known[key]

    def of(self, rec: Job) -> float | None:
        """The learned estimate's seconds, or None."""
        found = self.learned(rec)
        return found.seconds if found else None


def _quantile(runs: list[float]) -> float:
    return runs[min(len(runs) - 1, math.ceil(QUANTILE * len(runs)) - 1)]


def learned(redis: Redis, recs: Iterable[Job]) -> History:
    """A History with these records' shapes read (one round trip)."""
    return History(redis).prefetch(recs)


def expected(rec: Job, history: History) -> tuple[float | None, str | None]:
    """(seconds, where that comes from: declared, history, timeout) a job is expected to run; (None, None) unknown."""
    spec = rec.spec
    if spec.expected_duration:
        return float(spec.expected_duration), "declared"
    learnt = history.learned(rec)
    timeout = float(spec.timeout) if spec.timeout else None
    if learnt is not None and (timeout is None or learnt.seconds <= timeout):
        return learnt.seconds, learnt.source
    if timeout is not None:
        return timeout, "timeout"
    return None, None


def expected_end(rec: Job, now: float, history: History) -> tuple[float, str | None]:
    """When a running job is expected to free its workers (INF: unknown), and from what: progress, or its expected
    duration's source."""
    p = rec.get("progress") or {}
    step, total, first = p.get("step"), p.get("total_steps"), p.get("first_step") or 0
    since = p.get("since") or rec.get("running_at")  # (a script's second training counts from its first point)
    if step and total and since and step > first:
        return now + max(0.0, (now - float(since)) / (step - first) * (total - step)), "progress"
    took, source = expected(rec, history)
    if took is None:
        return INF, None
    end = float(rec.get("started_at") or now) + took
    return (end, source) if end > now else (INF, None)  # (overran: unknown from now on)


def _until(start: float, took: float | None) -> float:
    """When a job of `took` seconds that starts at `start` ends (INF: unknown)."""
    return start + took if took is not None else INF


@dataclass
class Timeline:
    """Each worker's reserved intervals [start, end) from `now` on (end INF: for good), and each GPU's: what of it
    is taken then (a share's bytes, or all of it: WHOLE). `capacity`: what shares may take of each GPU (its memory
    less the reserve; a GPU missing takes no share); `live`: what is free on it now (nvidia-smi's)."""

    now: float
    slots: dict[str, Slot]
    busy: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    capacity: dict[GpuKey, float] = field(default_factory=dict)
    live: dict[GpuKey, float] = field(default_factory=dict)
    gpus: dict[GpuKey, list[tuple[float, float, float]]] = field(default_factory=dict)

    def hold(self, names: Iterable[str], start: float, end: float, amount: float = WHOLE) -> None:
        """`names` reserved during [start, end), and `amount` of each of their GPUs (0: the workers only)."""
        keys: set[GpuKey] = set()
        for name in names:
            if name in self.slots:
                self.busy.setdefault(name, []).append((start, end))
                keys.update(gpu_keys(self.slots[name]))
        for key in keys if amount > 0 else ():
            self.gpus.setdefault(key, []).append((start, end, amount))

    def take(self, names: Iterable[str], start: float, took: float | None, amount: float = WHOLE) -> None:
        """Reserve `names` (and `amount` of their GPUs) for a job of `took` seconds (None: unknown, for good) from
        `start`."""
        self.hold(names, start, _until(start, took), amount)

    def free(self, name: str, start: float, end: float) -> bool:
        """Whether `name` is reserved by nobody during [start, end)."""
        return all(e <= start or b >= end for b, e in self.busy.get(name, ()))

    def taken(self, key: GpuKey, start: float, end: float) -> float:
        """The most of GPU `key` taken at any time during [start, end) (WHOLE: held whole then)."""
        spans = self.gpus.get(key, ())
        points = [start] + [b for b, _, _ in spans if start < b < end]
        return max((sum(a for b, e, a in spans if b <= p < e) for p in points), default=0.0)

    def fit_at(
        self,
        names: Iterable[str],
        start: float,
        places: int,
        k: int,
        took: float | None,
        share: float | None = None,
    ) -> list[list[Slot]] | None:
        """The places a job of `took` seconds (None: unknown, for good) gets at `start` among `names`, or None;
        `share`: the bytes of one GPU it takes (None: whole GPUs)."""
        end = _until(start, took)
        pool = [self.slots[n] for n in names if n in self.slots and self.free(n, start, end)]

        def room(key: GpuKey) -> float:
            if key not in self.capacity:
                return -INF
            left = self.capacity[key] - self.taken(key, start, end)
            return min(left, self.live.get(key, INF)) if start <= self.now else left

        return choose(pool, places, k, share, lambda key: self.taken(key, start, end), room)

    def times(self) -> list[float]:
        """When something may start: now, and every end of a reservation still to come."""
        ends = {e for v in self.busy.values() for _, e in v} | {e for v in self.gpus.values() for _, e, _ in v}
        return sorted({self.now} | {e for e in ends if self.now < e < INF})

    def earliest(
        self, places: int, k: int, took: float | None, share: float | None = None
    ) -> tuple[float | None, list[list[Slot]] | None]:
        """The earliest time a job of `took` seconds fits, with its places; (None, None) when no known time."""
        for t in self.times():
            chosen = self.fit_at(self.slots, t, places, k, took, share)
            if chosen is not None:
                return t, chosen
        return None, None
