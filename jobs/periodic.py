"""The one loop every background thread of gpudeck runs (the reaper, the gang placer, the GPU sampler, the
TensorBoard sweeper): do its round every `every_s` until stopped, optionally only while it holds a short lease
that the same thread of other processes competes for, and never die of an error — a thread that died silently
would leave lost jobs running, jobs unplaced or TensorBoards forever."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from redis import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


class Periodic(threading.Thread, ABC):
    """Subclasses set `what` (for the log) and `every_s`, and write `round()`; `lease_key()` (a key, or None) makes
    one process at a time do the round, for `lease_share` of the interval; `first_wait`: wait before the first."""

    what = "background thread"
    every_s = 1.0
    lease_share = 0.8
    first_wait = False

    def __init__(self, redis_url: str, name: str):
        super().__init__(name=name, daemon=True)
        self.redis = Redis.from_url(redis_url)
        self.stopped = threading.Event()

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
        try:
            key = self.lease_key()
            if key is None or self.redis.set(key, "1", nx=True, px=int(self.every_s * 1000 * self.lease_share)):
                self.round()
        except RedisError as exc:
            log.warning("%s: redis unavailable (%s)", self.what, exc)
        except Exception:  # noqa: BLE001 (see the module's doc)
            log.exception("%s: unexpected error", self.what)

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
