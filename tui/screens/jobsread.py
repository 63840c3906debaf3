"""What the jobs table reads from the API (tui.screens.jobs shows it): the newest jobs of a facet and filter, the
live ones older than those, and — sorted by a column but id, between two whole reads — only what may have changed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from textual.worker import NoActiveWorker, get_current_worker

from tui.client import ApiError
from tui.widgets.fmt import ENDED, UNENDED

FACETS = (None, "running", "starting", "queued", *ENDED)
LIVE_FACETS = (None, "running", "starting", "queued")
"""The facets under which a job older than the newest MAX_JOBS is still read when it is live (every page of them):
nobody's running or queued job falls out of the table because 1,000 newer ones ended."""
PAGE = 500
MAX_JOBS = 1000
"""Newest jobs the table holds, sorted by id."""
SORTED_MAX_JOBS = 20_000
"""Sorted by another column, the table reads up to this many, so the order is over every job (pages the API
answers 304 for, unchanged, cost next to nothing)."""
WHOLE_EVERY_S = 30.0
"""Sorted by another column, every job is read again this often (and on a new sort, facet or filter); the refreshes
between read only what may have changed: the newest page (new jobs, ones that just ended) and the live jobs, and a
live job that left both (it ended) on its own. Every job every 2 s cost the API 61 % of a core at 2,000 jobs
(issue 64)."""

Jobs = list[dict[str, Any]]


def cancelled() -> bool:
    """Whether the worker this read runs in was cancelled (a newer read of the table began): its pages stop, so
    two reads never run side by side."""
    try:
        return get_current_worker().is_cancelled
    except NoActiveWorker:
        return False


def live_pages(client: Any, status: str | None, words: str | None, full: Callable[[], bool]) -> Iterator[Jobs]:
    """The live jobs of the facet and filter, a page at a time, until there are no more, `full()` says the
    caller holds enough (every page of them, not the newest 500: a running job fell out behind 1,510 newer ones,
    issue 64) or the read was cancelled."""
    live, cursor = status or ",".join(LIVE_FACETS[1:]), None
    while not full() and not cancelled():
        page = client.jobs(limit=PAGE, cursor=cursor, status=live, q=words)
        yield page["jobs"]
        cursor = page["next_cursor"]
        if cursor is None:
            return


def window(client: Any, status: str | None, words: str | None, most: int) -> tuple[Jobs, int | None, bool]:
    """The newest `most` jobs of the facet and filter (the API filters: older ones are reached by narrowing) and
    the older live ones, how many the store holds, and whether there were more than were read."""
    jobs: Jobs = []
    cursor, total = None, None
    while len(jobs) < most and not cancelled():
        page = client.jobs(limit=PAGE, cursor=cursor, status=status, q=words)
        jobs += page["jobs"]
        cursor, total = page["next_cursor"], page.get("total")
        if cursor is None:
            break
    more = cursor is not None or len(jobs) > most
    jobs = jobs[:most]
    if more and status in LIVE_FACETS:  # (older jobs still live stay in the table, whatever the window)
        seen = {j["id"] for j in jobs}
        for page_jobs in live_pages(client, status, words, lambda: len(jobs) >= SORTED_MAX_JOBS):
            jobs.extend(j for j in page_jobs if j["id"] not in seen)
    return jobs, total, more


def changed(
    client: Any, status: str | None, words: str | None, known: dict[int, dict[str, Any]]
) -> tuple[Jobs, int | None]:
    """The newest page and every live job, laid over the jobs held (`known`, which it may change); a job held as
    live that is in neither (it ended, or was deleted) read on its own. How many the store holds."""
    page = client.jobs(limit=PAGE, status=status, q=words)
    fresh = {j["id"]: j for j in page["jobs"]}
    if status in LIVE_FACETS:
        for page_jobs in live_pages(client, status, words, lambda: len(fresh) >= SORTED_MAX_JOBS):
            fresh.update((j["id"], j) for j in page_jobs)
    for job_id in [i for i, j in known.items() if j["status"] in UNENDED and i not in fresh]:
        try:
            fresh[job_id] = client.job(job_id)
        except ApiError:  # (deleted since)
            known.pop(job_id, None)
    return list({**known, **fresh}.values()), page.get("total")
