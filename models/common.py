"""Words every side of gpudeck shares — the `gpudeck` client commands, the server commands and the engine: exit
codes, where the API listens by default, and sizes and durations as people write them.

It imports nothing, so a client command can use it without loading the server (redis, gunicorn, `jobs`). It
lives in `models` because `models` is the bottom package, which every other one may import.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_WAIT_TIMEOUT = 0, 1, 2, 3, 4
"""Exit codes of every gpudeck command: success; a job failed (or fell below --min-accuracy); usage or input
error; API unreachable; `wait --timeout` ran out before the job ended."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT), as a shell reports it."""

DEFAULT_PORT = 8686
"""Port the API binds in `gpudeck up` / `gpudeck api`."""

DEFAULT_API = f"http://127.0.0.1:{DEFAULT_PORT}"
"""Where clients (CLI, TUI) find the API when GPUDECK_API is unset."""

UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """`8G`, `512M`, `10k`, `1000` (bytes or a plain count) as an int; ValueError otherwise."""
    t = text.strip().lower().removesuffix("b")
    try:
        value = int(float(t[:-1]) * UNITS[t[-1]]) if t and t[-1] in UNITS else int(t)
    except OverflowError:  # (a number beyond a float: "1e400G", 400 digits)
        raise ValueError(f"is too large, got {text[:40]!r}") from None
    if value < 1:
        raise ValueError(f"must be at least 1, got {text!r}")
    return value


def size_text(n: float) -> str:
    """Bytes as a short size people read: 10G, 1.5G, 512M."""
    if n >= 1 << 70:  # (beyond any disk, and beyond a float for a number of 400 digits)
        return f"a {len(str(int(n)))}-digit number of bytes" if isinstance(n, int) else "too many bytes"
    for unit, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}".removesuffix(".0") + unit
    return f"{int(n)}B"


AGE = re.compile(r"^(?:\d+[smhdw])+$")
"""A duration as people write it, the one grammar of gpudeck (API, CLI, TUI, settings): a number and a unit, or
several (45s, 90m, 12h, 2d, 2w, 1h30m)."""
AGE_PART = re.compile(r"(\d+)([smhdw])")
AGE_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(seconds: float | None) -> str:
    """Seconds as people read them: `45s`, `3m07s`, `2h05m` (empty for None)."""
    if seconds is None:
        return ""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def parse_age(text: str) -> int:
    """`30d`, `12h`, `2w`, `90m`, `45s`, `1h30m` as seconds (AGE); ValueError otherwise."""
    t = text.strip().lower()
    if not AGE.match(t):
        raise ValueError(f"write a duration such as 90m, 1h30m, 12h or 2w, got {text!r}")
    return sum(int(n) * AGE_S[unit] for n, unit in AGE_PART.findall(t))


def parse_duration(text: str) -> int:
    """Seconds as a whole number (3600) or as an age (90m, 1h30m: parse_age); ValueError otherwise."""
    t = text.strip()
    return int(t) if t.isdigit() else parse_age(t)


def search_text(job: dict) -> str:
    """What a job list's `q` words (the API) and the TUI's filter are looked for in, lower case: the id, name,
    model or command, status, reason, tags, owner and project of a job record or of its API answer (both have
    these)."""
    spec = job["spec"]
    command = spec.get("command")
    shown = " ".join(command) if isinstance(command, list) else str(command or spec.get("kind", ""))
    what = spec.get("model") or shown
    words = [str(job["id"]), str(spec.get("name") or ""), what, job["status"], str(job.get("reason") or "")]
    owner = [str(job.get("owner") or ""), str(spec.get("project") or "")]
    return " ".join([*words, *spec.get("tags", ()), *owner]).lower()


NOTIFY_EVENTS = ("succeeded", "failed", "canceled", "stopped_early", "any")
"""What a notification may be asked for: an end, a trial stopped early, or any change of status."""
NOTIFY_ENTRY = re.compile(r"([A-Za-z0-9_-]{1,40})(?::([a-z_]+(?:,[a-z_]+)*))?")


def notify_problem(value: Any, webhooks: tuple[str, ...] | None) -> str | None:
    """Why `notify` is not a list of the operator's endpoints (`lab`, or `lab:failed,canceled`); None: it is."""
    if not isinstance(value, list) or len(value) > 10 or not all(isinstance(v, str) for v in value):
        return f'must be a list of at most 10 endpoint names such as ["lab"] or ["lab:failed"], got {value!r}'
    for entry in value:
        m = NOTIFY_ENTRY.fullmatch(entry)
        if m is None:
            return f"{entry!r}: write an endpoint's name, optionally :events (lab:failed,canceled)"
        bad = [e for e in (m.group(2) or "").split(",") if e and e not in NOTIFY_EVENTS]
        if bad:
            return f"{entry!r}: unknown events {bad}; one of {', '.join(NOTIFY_EVENTS)}"
        if webhooks is not None and m.group(1) not in webhooks:
            known = ", ".join(webhooks) or "none (GPUDECK_WEBHOOKS is not set)"
            return f"no endpoint {m.group(1)!r}; the operator's: {known}"
    return None


def did_you_mean(word: object, known: Iterable[str]) -> str:
    """`did you mean 'steps'? ` when `word` is close to one of `known` (difflib), else nothing: what a message about
    a mistyped name says before it lists every accepted one."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(known), n=5, cutoff=0.7)
    best = max(
        close, key=lambda k: (difflib.SequenceMatcher(None, word, k).ratio(), _common_prefix(word, k)), default=None
    )
    return f"did you mean {best!r}? " if best else ""


def _common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def iso(ts: float | None) -> str | None:
    """A Unix time as an ISO 8601 UTC string: 2026-11-24T15:17:02.123Z (every date-time the API answers)."""
    if ts is None:
        return None
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
