"""Reading a training log as a person does: the TensorFlow start-up chatter folded into one line, and the few lines
that say why a job failed (the exception, the signal, the timeout) picked out of its tail. Shared by the TUI and
`gpudeck logs`; plain text in, plain text out."""

from __future__ import annotations

import re

BANNER = re.compile(
    r"^(?:"
    r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+\.(?:cc|h):\d+\]"  # absl's C++ log line (cuda_*, cpu_feature_guard)
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] (?:tensorflow|external|xla|third_party)/"  # TF's own C++ log
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\."
    r"|oneDNN custom operations are on\."
    r")"
)
"""A line TensorFlow prints while it starts (and on its own, when devices register), not the job's own output."""

FOLD_MIN = 2
"""Fewer banner lines in a row than this are left as they are."""


ENV_LINE = re.compile(r"^(?:\[\w+\] )?\[env\] ")
"""A line of the build of the job's Python environment (jobs.run.buildenv): its own folded phase."""


def is_banner(line: str) -> bool:
    return bool(BANNER.match(line))


def kind_of(line: str) -> str | None:
    """What folds a line: `tf` (TensorFlow's start-up), `env` (the environment's build), or None."""
    return "tf" if BANNER.match(line) else "env" if ENV_LINE.match(line) else None


def folded_line(n: int, kind: str = "tf") -> str:
    what = "TensorFlow start-up" if kind == "tf" else "building the environment"
    return f"··· {n} lines of {what} folded ···"


class Folder:
    """Folding over a log that arrives in pieces: a run of banner lines may span two pieces."""

    def __init__(self) -> None:
        self.run: list[str] = []
        self.kind: str | None = None

    def feed(self, lines: list[str]) -> list[str]:
        """The lines ready to show; a trailing run of banner lines waits for the next piece (or flush())."""
        out = []
        for line in lines:
            kind = kind_of(line)
            if kind is not None and kind == self.kind:
                self.run.append(line)
                continue
            out += self.flush()
            if kind is not None:
                self.run, self.kind = [line], kind
                continue
            out.append(line)
        return out

    def flush(self) -> list[str]:
        run, kind, self.run, self.kind = self.run, self.kind, [], None
        return [folded_line(len(run), kind or "tf")] if len(run) >= FOLD_MIN else run


def fold(lines: list[str]) -> list[str]:
    """`lines` with each run of FOLD_MIN or more TensorFlow start-up lines replaced by one line that counts them."""
    folder = Folder()
    return folder.feed(lines) + folder.flush()


MARKS = re.compile(
    r"error|exception|sigterm|sigkill|killed|timeout|timed out|out of memory|became (?:nan|inf)|no checkpoint"
    r"|stopped at step|cannot|refused|not found",
    re.IGNORECASE,
)
"""Words of a line that explains a failure."""


ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|^(?:\[[\w:.-]+\] )?[\w.]*(?:Error|Exception)\b|\b(?:ERROR|CRITICAL|FATAL)\b"
)
"""A line where an error shows itself: a traceback's head, an exception line, a log line at error level."""

TASK_PREFIX = re.compile(r"^\[[\w:.-]+\] ")
"""`[worker1] `: the prefix of a task's lines in a multi-worker job's log."""


def explain(lines: list[str], most: int = 5) -> list[str]:
    """The few lines of a failed job's log tail that say why: a Python traceback's innermost frame and its
    exception, else the lines that name an error, a signal, a timeout; else the last lines. Banner lines never."""
    lines = [line.rstrip() for line in lines if line.strip() and not is_banner(TASK_PREFIX.sub("", line))]
    bare = [TASK_PREFIX.sub("", line) for line in lines]
    frames = [i for i, b in enumerate(bare) if b.startswith("  File ")]
    if frames:  # a traceback (its head may be cut off a 20-line tail): the innermost frame and the exception
        last = frames[-1]
        exception = next((i for i in range(last + 1, len(bare)) if not bare[i].startswith(" ")), None)
        picked = [last] + ([last + 1] if last + 1 < len(bare) and bare[last + 1].startswith("    ") else [])
        if exception is not None:
            picked.append(exception)
        return [lines[i] for i in picked][-most:]
    hits = [line for line, b in zip(lines, bare) if MARKS.search(b)]
    return (hits or lines)[-most:]
