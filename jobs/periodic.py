"""The one loop every background thread of gpudeck runs (the reaper, the gang placer, the GPU sampler, the
TensorBoard sweeper): do its round every `every_s` until stopped, optionally only while it holds a short lease
that the same thread of other processes competes for, and never die of an error — a thread that died silently
would leave lost jobs running, jobs unplaced or TensorBoards forever."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable

from redis import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

FORK_GUARD = threading.Lock()
"""Held by a worker while it forks a work-horse, and by a helper thread whose round may import modules (`forks_wait`):
a fork in the middle of an import leaves the child that module's import lock, held by a thread the child does not
have, and the work-horse then hangs for good at its first `import numpy` (the searcher imports Optuna, and numpy
with it, on its first round with a search; a trial forked meanwhile did)."""


def _free_in_child() -> None:
    """A work-horse is forked under FORK_GUARD: its copy of the lock is free for it (its fork never returns to let
    it go)."""
    if FORK_GUARD.locked():
        FORK_GUARD.release()


os.register_at_fork(after_in_child=_free_in_child)


STARTING_S = 12.0
"""How long a work-horse may take from its fork to its attempt's heartbeat before it says where it is: a job's
heartbeat outlives its claim by HEARTBEAT_TTL_S (15 s), after which the reaper calls the job lost."""


def say_where_if_stuck(seconds: float = STARTING_S) -> None:
    """Arm this process to print every thread's stack to stderr (a worker's log) after `seconds`, unless
    `not_stuck()` comes first: a work-horse that hangs before its attempt beats (a lock a thread of the worker held
    when it forked, a call that never returns) leaves a job worker_lost and its worker waiting on it with nothing
    in the log; this says where it hung. (faulthandler's watchdog: a thread of its own, in C, no lock of Python's.)"""
    faulthandler.dump_traceback_later(seconds, exit=False, file=sys.stderr)


def not_stuck() -> None:
    """The attempt has begun to beat (or ended): no stack is printed."""
    faulthandler.cancel_dump_traceback_later()


def stack_of(ident: int | None) -> str:
    """Where a thread of this process is now: its stack, as a traceback prints it."""
    frame = sys._current_frames().get(ident or -1)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(the thread has no frame)"


class Beating(threading.Thread):
    """`beat()` every `every_s` from a thread of its own while a `with` block runs: a job's heartbeat while its
    work-horse is busy elsewhere (the pump's loop, an attempt's last uploads), so that a busy work-horse never looks
    like a lost one. `skip()` (a subclass's): a beat left out. A beat that fails (Redis away) is said once, until
    one goes in again; the reaper waits for an outage too."""

    def __init__(self, beat: Callable[[], None], every_s: float, name: str = "gpudeck-heartbeat"):
        super().__init__(name=name, daemon=True)
        self.beat, self.every_s = beat, every_s
        self.stopped = threading.Event()

    def skip(self) -> bool:
        return False

    def run(self) -> None:
        failing = False
        while not self.stopped.wait(self.every_s):
            if self.skip():
                continue
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 (the thread must go on beating once Redis is back)
                if not failing:
                    log.warning("%s: no heartbeat (%s)", self.name, exc)
                failing = True
            else:
                failing = False

    def __enter__(self) -> Beating:
        self.start()
        not_stuck()  # (a work-horse's attempt beats from here on: jobs.worker armed say_where_if_stuck)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.join(10)


class Periodic(threading.Thread, ABC):
    """Subclasses set `what` (for the log) and `every_s`, and write `round()`; `lease_key()` (a key, or None) makes
    one process at a time do the round, for `lease_share` of the interval; `first_wait`: wait before the first."""

    what = "background thread"
    every_s = 1.0
    lease_share = 0.8
    first_wait = False
    forks_wait = False
    """Whether a worker's fork of a work-horse waits for this thread's round (FORK_GUARD): a round that imports."""

    stuck_s = 60.0
    """A round that has not come back after this long is said in the log (by a Watch), with where it is."""

    def __init__(self, redis_url: str, name: str):
        super().__init__(name=name, daemon=True)
        self.redis = Redis.from_url(redis_url)
        self.stopped = threading.Event()
        self.round_since: float | None = None
        """When the round under way began (monotonic), None between rounds."""
        self.last_round_s = 0.0
        """How long the last round this process did took (the GPU sampler's sample lasts as its rounds do:
        gpus.sample_ttl)."""
        self._told: float | None = None

    def lease_key(self) -> str | None:
        return None

    def under_lock(self, key: str, timeout: float, work: Callable[[], object]) -> None:
        """`work()` while this process holds the Redis lock `key` (let go after `timeout` s should the process die in
        it); nothing where another process holds it (the notifier's, exporter's and searcher's one at a time)."""
        lock = self.redis.lock(key, timeout=timeout, blocking=False)
        if not lock.acquire():
            return
        try:
            work()
        finally:
            try:
                lock.release()
            except RedisError:  # (expired: another process took over; or Redis away)
                pass

    @abstractmethod
    def round(self) -> None:
        """One round of the thread's work (the reaper's reap, the placer's placing, …)."""

    def closing(self) -> None:
        """After the last round, once stopped (a placer says its worker is gone)."""

    def once(self) -> None:
        """One round, under the lease when there is one; errors logged, never raised."""
        self.round_since = began = time.monotonic()
        try:
            key = self.lease_key()
            if key is None or self.redis.set(key, "1", nx=True, px=int(self.every_s * 1000 * self.lease_share)):
                with FORK_GUARD if self.forks_wait else contextlib.nullcontext():
                    self.round()
                self.last_round_s = time.monotonic() - began  # (a round another process's lease took is not one)
        except RedisError as exc:
            log.warning("%s: redis unavailable (%s)", self.what, exc)
        except Exception:  # noqa: BLE001 (see the module's doc)
            log.exception("%s: unexpected error", self.what)
        finally:
            self.round_since = None

    def stuck(self) -> str | None:
        """Where its thread is (a stack), when its round has gone on for over `stuck_s` and that was not said yet
        for this round; else None."""
        since = self.round_since
        if since is None or time.monotonic() - since < self.stuck_s or self._told == since:
            return None
        self._told = since
        return stack_of(self.ident)

    def run(self) -> None:
        if self.first_wait:
            self.stopped.wait(self.every_s)
        while not self.stopped.is_set():
            self.once()
            self.stopped.wait(self.every_s)
        try:
            self.closing()
        except RedisError:
            pass


class Watch(Periodic):
    """Says in the log, once a round, where another thread's round has been stuck for its `stuck_s` (a stack): a
    helper that never comes back from a round does its work no more, and nothing else would say so (the GPU
    sampler's samples would just expire, the reaper would reap no more)."""

    what, every_s = "watch", 10.0

    def __init__(self, redis_url: str, helpers: list[Periodic]):
        super().__init__(redis_url, "gpudeck-watch")
        self.helpers = helpers

    def round(self) -> None:
        for helper in self.helpers:
            where = helper.stuck()
            if where is not None:
                log.warning("%s: a round has not come back for over %.0fs; it is at:\n%s", helper.what,
                            helper.stuck_s, where)  # fmt: skip
