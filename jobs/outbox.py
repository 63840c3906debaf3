"""One outbox (issue 63 #4): items due at a time in a sorted set, each tried in its turn until it is done or given
up, waiting twice as long after each failure; one process at a time delivers (a lock held for the round). Its two
users: the exports to MLflow (jobs.export, an item a job id, its state on the job's record) and the webhook
notifications (jobs.notify, an item a delivery id, its state in a hash)."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from redis import Redis
from redis.client import Pipeline

from jobs.periodic import Periodic

FIRST_RETRY_S = 5.0
"""The wait before the second attempt; each later one waits twice as long, at most RETRY_MAX_S."""
RETRY_MAX_S = 3600.0
GIVE_UP_S = 86400.0
"""An item still failing this long after it was queued is given up (recorded so)."""


def backoff(attempts: int, first_s: float = FIRST_RETRY_S) -> float:
    """Seconds to wait after the `attempts`-th failure."""
    return min(RETRY_MAX_S, first_s * 2 ** (attempts - 1))


def gave_up(queued_at: float, now: float | None = None) -> bool:
    """Whether an item queued at `queued_at` that failed again is given up."""
    return (time.time() if now is None else now) - queued_at > GIVE_UP_S


@dataclass(frozen=True)
class Box:
    """An outbox's keys and sizes."""

    due_key: str
    """Sorted set: item -> when it is due (epoch s)."""
    lock_key: str
    lock_s: float
    """The round's lock lives this long at most (a delivering process that died frees it then)."""
    batch: int
    """Items tried in one round at most."""

    def put(self, pipe: Redis | Pipeline, item: str, at: float | None = None) -> None:
        """`item` due at `at` (now)."""
        pipe.zadd(self.due_key, {item: time.time() if at is None else at})

    def pending(self, redis: Redis, now: float | None = None) -> int:
        """How many items are due now."""
        return int(redis.zcount(self.due_key, "-inf", time.time() if now is None else now))

    def settle(self, pipe: Redis | Pipeline, item: str, retry_at: float | None) -> None:
        """`item` done or given up (None: out of the box), or due again at `retry_at`."""
        if retry_at is None:
            pipe.zrem(self.due_key, item)
        else:
            pipe.zadd(self.due_key, {item: retry_at})

    def deliver(self, redis: Redis, attempt: Callable[[str], int], now: float | None = None) -> int:
        """One attempt at each item due now (`attempt` settles it, and counts what it made); the total made."""
        now = time.time() if now is None else now
        due = [raw.decode() for raw in redis.zrangebyscore(self.due_key, "-inf", now, start=0, num=self.batch)]
        return sum(attempt(item) for item in due)


class Outbox(Periodic):
    """Delivers an outbox's due items each round, in one process at a time."""

    box: Box

    def wanted(self) -> bool:
        """Whether this process delivers at all (configured)."""
        return True

    @abstractmethod
    def deliver(self) -> int:
        """One attempt at each due item (the export's or the notification's `deliver` with this process's
        settings)."""

    def round(self) -> None:
        if self.wanted() and self.box.pending(self.redis):
            self.under_lock(self.box.lock_key, self.box.lock_s, self.deliver)
