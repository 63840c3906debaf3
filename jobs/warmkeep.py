"""What a worker keeps warm (jobs.run.warm): the part of GpudeckWorker that notes a zoo job's hand-off, hands the warm
process it keeps to the work-horse of a job it can serve, and makes the next one ready — one a GPU, of the kind its
GPUs' last job was (a zoo trainer, or a Python command's interpreter), made again after WARM_RETRY_S where one failed
by itself. A mixin of the RQ worker (jobs.worker), which holds its state: `_warm`, `_let_go`, `_warm_failed_at`."""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from jobs.errors import NotFound
from jobs.keys import RUN_JOB, job_id_of, warm_wanted_key
from jobs.placement import live_slots
from jobs.record import Kept
from jobs.run import warm
from jobs.run.launch import WorkerContext
from jobs.store import JobStore

log = logging.getLogger("jobs.worker")

WARM_RETRY_S = 60.0
"""How long a worker whose warm trainer failed to start waits before it tries again."""


def _unwanted(held: warm.Warm, want: warm.PythonWant | str | None) -> str | None:
    """Why the warm process a worker keeps is not what its GPUs' jobs want now (None: keep it)."""
    if want is None:
        return None
    if want == "zoo":
        return None if held.want is None else "zoo jobs run on these GPUs now"
    return None if held.want == want else "Python jobs of another environment (or other imports) run on these GPUs now"


class KeepsWarm:
    """The warm-keeping half of jobs.worker.GpudeckWorker (RQ's Worker gives it `name` and `connection`)."""

    name: str
    connection: Redis
    context: WorkerContext | None
    _warm: warm.Warm | None
    _let_go: list[warm.Warm]
    _warm_failed_at: float

    def _warm_for(self, job: Any) -> warm.Warm | None:
        """The warm trainer for this RQ job's work-horse: a zoo job of one worker (noted: this worker keeps one ready
        from now on), when it is alive, young enough and of the code on disk; None otherwise."""
        if self.context is None or not self.context.settings.warm or job.func_name != RUN_JOB:
            return None
        if (job_id := job_id_of(job.id)) is None:
            return None
        try:
            spec = Kept(JobStore(self.connection).get(job_id)["spec"])
        except (NotFound, RedisError):
            return None
        if not warm.warm_wanted(spec):
            return None
        now = time.time()
        max_age = self.context.settings.warm_max_age_s
        try:  # (the first worker of these GPUs keeps the next one warm, whichever slot ran this one)
            if not spec.runs_code:  # (a Python command's work-horse notes its environment at its end)
                self.connection.set(self._warm_key(), repr(now), ex=max(1, int(max_age)))
        except RedisError:
            pass  # (no warm trainer made for the next job: it starts cold)
        if self._warm is None or (self._warm.want is not None) != spec.runs_code:
            return None  # (a zoo trainer for a command, an interpreter for a zoo job: kept for a job it serves)
        why = self._warm.stale(self.context.settings.warm_max_age_s)
        if why is not None:
            self._let_warm_go(self._warm, why)
            self._warm = None
            return None
        return self._warm

    def _keep_warm(self) -> None:
        """Reap the warm trainers that exited; let a stale one go; make one ready while a zoo job ran on this worker's
        GPUs in the last GPUDECK_WARM_MAX_AGE and it is their first worker (GPUDECK_WARM=on, jobs in a sandbox)."""
        self._let_go = [w for w in self._let_go if not w.reap()]
        if self.context is None or not self.context.settings.warm:
            return
        max_age = self.context.settings.warm_max_age_s
        now = time.time()
        want = self._keeps_warm(now, max_age)
        if self._warm is not None:
            why = self._warm.stale(max_age) or _unwanted(self._warm, want)
            if why is None:
                return
            if 0 < (self._warm.proc.returncode or 0) < 128:  # (it failed by itself, not killed: as one whose
                self._warm_failed_at = now  # imports touched a device; again after WARM_RETRY_S, not each job)
            self._let_warm_go(self._warm, why)
            self._warm = None
        if now - self._warm_failed_at <= WARM_RETRY_S or want is None:
            return
        if isinstance(want, warm.PythonWant):
            self._warm = warm.start_python(self.context, want)
        else:
            self._warm = warm.start(self.context)
        if self._warm is None:
            self._warm_failed_at = now

    def _warm_key(self) -> str:
        assert self.context is not None
        return warm_wanted_key(socket.gethostname(), self.context.gpu_ids)

    def _keeps_warm(self, now: float, max_age: float) -> warm.PythonWant | str | None:
        """What this worker keeps warm now: "zoo" (a trainer) where a zoo job ran on its GPUs (any of their slots)
        in the last `max_age` s, a warm interpreter's environment where a Python command job did (the last job's
        kind wins), None for nothing — or where it is not the first by name of the live workers of these GPUs on
        this host, the one a job of whole GPUs is placed on (placement.whole_pool). One warm process a GPU, not one
        a job slot (four slots a GPU kept four, 577 MiB each: issue 64)."""
        try:
            want = warm.wanted(self.connection.get(self._warm_key()), now, max_age)
            if want is None:
                return None
            slots = live_slots(self.connection)[0]
        except RedisError:
            return None
        me = slots.get(self.name)
        mates = [s.name for s in slots.values() if me is not None and s.host == me.host and s.gpus == me.gpus]
        return want if me is None or min(mates) == self.name else None

    def _let_warm_go(self, w: warm.Warm, why: str | None) -> None:
        if why is not None:
            log.info("worker %s: warm trainer pid %s let go: %s", self.name, w.proc.pid, why)
        w.close()
        self._let_go.append(w)
