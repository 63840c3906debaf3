"""What every client command shares: the client's settings, the options declared once (`--api`/`--token`, `--json`,
the spec options of `submit` and `run`, `--min-accuracy`), parameter types, tables drawn with rich, and waiting
for a job. Nothing here imports the server (redis, gunicorn, `jobs`)."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import threading
import time
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from models import jobspec, specfields
from models.common import DEFAULT_API, EXIT_JOB_FAILED, EXIT_OK, parse_age, parse_duration, parse_size
from models.states import ENDED
from tui.widgets.fmt import (
    WARNED,
    accuracy_text,
    duration,
    gpus_text,
    in_line,
    one_line,
    progress_of,
    shown_status,
    sweep_kinds,
    value_of,
    what,
)

# -- settings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientSettings:
    """What a client command reads from its environment and options: never a server variable, so a bad
    GPUDECK_RETENTION (say) in a user's shell cannot break `gpudeck ls`."""

    api_url: str = DEFAULT_API
    token: str | None = None
    source_max_bytes_raw: str = "100M"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, api: str | None = None, token: str | None = None):
        """GPUDECK_API, GPUDECK_TOKEN and GPUDECK_SOURCE_MAX_BYTES, with --api/--token first."""
        env = os.environ if environ is None else environ
        return cls(
            api_url=(api or env.get("GPUDECK_API") or DEFAULT_API).rstrip("/"),
            token=token or env.get("GPUDECK_TOKEN") or None,
            source_max_bytes_raw=env.get("GPUDECK_SOURCE_MAX_BYTES") or "100M",
        )

    @property
    def source_max_bytes(self) -> int:
        """The largest source folder `gpudeck run` sends (GPUDECK_SOURCE_MAX_BYTES); ValueError naming it."""
        try:
            return parse_size(self.source_max_bytes_raw)
        except ValueError:
            raise ValueError(
                f"GPUDECK_SOURCE_MAX_BYTES must be a size like 100M or 2G, got {self.source_max_bytes_raw!r}"
            ) from None


def settings() -> ClientSettings:
    """This command's settings: the environment, with the --api/--token given anywhere on the command line."""
    meta = click.get_current_context().meta
    return ClientSettings.from_env(api=meta.get("gpudeck.api"), token=meta.get("gpudeck.token"))


def client(where: ClientSettings | None = None):
    """An HTTP client of the API this command talks to (`where`: settings read before, e.g. in another thread)."""
    from tui.client import Client

    s = where or settings()
    return Client(s.api_url, s.token)


# -- options declared once ---------------------------------------------------------------------


def _remember(key: str):
    def store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.meta[key] = value

    return store


def connection_options(f: Callable) -> Callable:
    """`--api URL` and `--token T`, on the `gpudeck` group and on every client command (either place works)."""
    f = click.option(
        "--token",
        metavar="T",
        expose_value=False,
        is_eager=True,
        callback=_remember("gpudeck.token"),
        help="bearer token (default $GPUDECK_TOKEN)",
    )(f)
    return click.option(
        "--api",
        metavar="URL",
        expose_value=False,
        is_eager=True,
        callback=_remember("gpudeck.api"),
        help=f"API URL (default $GPUDECK_API or {DEFAULT_API})",
    )(f)


json_option = click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")

job_id_argument = click.argument("job_id", metavar="ID", type=int)
"""The job a command acts on (`gpudeck show ID`, `logs ID`, `files ID`, …)."""

min_accuracy_option = click.option(
    "--min-accuracy",
    type=float,
    metavar="X",
    help="exit 1 unless the final test accuracy is at least X (a CI gate; implies waiting)",
)


class Natural(click.ParamType):
    """A whole number, 0 or more."""

    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        if not str(value).isdigit():
            self.fail(f"must be a whole number of 0 or more, got {value!r}", param, ctx)
        return int(value)


class Duration(click.ParamType):
    """Seconds as a number (3600) or as people write them (90m, 12h, 2d)."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration(str(value))
        except ValueError:
            self.fail(f"write seconds (3600) or a duration such as 90m, 1h30m or 12h, got {value!r}", param, ctx)


class Age(click.ParamType):
    """A duration as people write it: 30d, 12h, 2w, 90m, 45s; as seconds."""

    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_age(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Pair(click.ParamType):
    """`KEY=VALUE`; with `as_json`, the value is read as JSON where it is JSON (`lr=0.1` is a number)."""

    def __init__(self, what: str, as_json: bool = False):
        self.name, self.as_json = what, as_json

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, Any]:
        if isinstance(value, tuple):
            return value
        key, sep, raw = str(value).partition("=")
        if not sep or not key:
            self.fail(f"takes {self.name}, got {value!r}", param, ctx)
        if not self.as_json:
            return key, raw
        try:
            return key, json.loads(raw)
        except ValueError:
            return key, raw


class CountOrAge(click.ParamType):
    """A number of steps (200) or a duration as people write it (90s, 5m)."""

    name = "N|AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        try:
            parse_age(text)
        except ValueError:
            self.fail(f"write a number of steps (200) or a duration such as 90s or 5m, got {value!r}", param, ctx)
        return text


def _spec_option(name: str, field: Any, cli: specfields.Cli) -> Callable[[Callable], Callable]:
    """The option of one spec field, as its declaration (models/jobspec.py) says."""
    help_text = cli.help or field.description or ""
    if (default := specfields.shown_default(field)) is not None and cli.flag_value is None:
        help_text += f" (default {default})"  # (the default its declaration states: Field(1))
    kw: dict[str, Any] = {"help": help_text, "metavar": cli.metavar, "multiple": cli.multiple}
    if cli.flag_value is not None:
        return click.option(cli.flag, name, is_flag=True, help=kw["help"])
    choices = [a for t in typing.get_args(field.annotation) for a in typing.get_args(t)] or typing.get_args(
        field.annotation
    )
    if cli.reads:
        kw["type"] = {"duration": Duration(), "natural": Natural(), "count_or_age": CountOrAge()}[cli.reads]
    elif typing.get_origin(field.annotation) in (typing.Union, types.UnionType) and int in choices:
        kw["type"] = int
    elif choices and all(isinstance(c, str) for c in choices):
        kw["type"] = click.Choice(choices)
    return click.option(cli.flag, name, **{k: v for k, v in kw.items() if v is not None})


def _cli_fields(kind: str, only: Iterable[str] | None) -> list[tuple[str, Any, specfields.Cli]]:
    cls = jobspec.KINDS[kind]
    found = [(n, f, specfields.marker(cls, n, specfields.Cli)) for n, f in cls.model_fields.items()]
    return [(n, f, c) for n, f, c in found if c is not None and (only is None or n in only)]


def spec_options(kind: str, only: Iterable[str] | None = None) -> Callable[[Callable], Callable]:
    """The options of a `kind` of job (model, command, session) that mirror spec fields, made from their
    declarations (models/jobspec.py): one declaration per field, here as in the API and its document."""

    def decorate(f: Callable) -> Callable:
        for name, field, cli in reversed(_cli_fields(kind, only)):
            f = _spec_option(name, field, cli)(f)
        return f

    return decorate


def spec_fields(spec: dict[str, Any], options: dict[str, Any], kind: str) -> dict[str, Any]:
    """`spec` with what the command line gave for the fields its options mirror (spec_options)."""
    for name, _, cli in _cli_fields(kind, None):
        value = options.get(name)
        if cli.flag_value is not None:
            if value:
                spec[name] = cli.flag_value
        elif cli.multiple:
            if value:
                spec[name] = list(value)
        elif value is not None:
            spec[name] = value
    return spec


# -- output ------------------------------------------------------------------------------------


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2))


def table_lines(head: Sequence[str], rows: Iterable[Sequence[Any]], right: Iterable[int] = ()) -> list[str]:
    """A table as lines of text: columns two spaces apart, as wide as their widest cell, `right` (column indices)
    right-aligned, nothing cut and no trailing spaces, whatever the terminal's width (scripts read these lines)."""
    rows = [["" if c is None else str(c) for c in row] for row in rows]
    table = Table(box=None, show_header=bool(head), header_style="", pad_edge=False, padding=(0, 2, 0, 0))
    right = set(right)
    for i, name in enumerate(head or [""] * max((len(r) for r in rows), default=0)):
        table.add_column(name, justify="right" if i in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    out = io.StringIO()
    console = Console(file=out, width=100_000, no_color=True, highlight=False, markup=False, emoji=False)
    console.print(table, soft_wrap=True)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def print_table(head: Sequence[str], rows: Iterable[Sequence[Any]], right: Iterable[int] = (), err: bool = False):
    for line in table_lines(head, rows, right):
        click.echo(line, err=err)


def fmt(value: Any) -> str:
    """A value in a text table: - for none, 4 significant digits for floats, JSON for objects."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


JOB_HEAD = ("ID", "STATUS", "NAME", "MODEL", "GPUS", "PROGRESS", "LOSS", "ACC (test/val/batch)")
OWNER_AT = 2
"""Where the OWNER column goes when jobs have owners (named tokens): after the status."""


def job_row(
    job: dict[str, Any], owners: bool = False, kind: str | None = None, name_w: int = 20, model_w: int = 14
) -> list[str]:
    p = job.get("progress") or {}
    cells = [
        str(job["id"]),
        shown_status(job) + (WARNED if job.get("warning") else ""),
        one_line(job.get("name"), name_w),
        one_line(what(job["spec"]), model_w),
        gpus_text(job),
        progress_of(p) if p.get("total_steps") else in_line(job) or "-",
        value_of(job.get("metrics"), "loss") or "-",
        accuracy_text(job, kind) or "-",
    ]
    if owners:
        who = job.get("owner") or "-"  # (and its project: alice/vision)
        cells.insert(OWNER_AT, one_line(f"{who}/{job['project']}" if job.get("project") else who, 24))
    return cells


NARROWER = ((20, 14, JOB_HEAD[-1]), (14, 10, "ACC"), (10, 8, "ACC"), (8, 6, "ACC"))
"""(NAME's width, MODEL's, ACC's header) from the widest table to the narrowest, tried in turn on a terminal."""


def job_lines(jobs: Sequence[dict[str, Any]], owners: bool = False, width: int | None = None) -> list[str]:
    """`gpudeck ls`'s table: a header, then a row a job (an OWNER column where `owners`); `width`: a terminal's,
    into which NAME and MODEL are narrowed (an ellipsis where cut) so that no row wraps (issue 67 #7: every row
    wrapped at 80 columns), as far as they go; None (a pipe, a script): every cell whole."""
    right = {0, 5, 6} if not owners else {0, 6, 7}
    kinds = sweep_kinds(jobs)  # (the trials of one search by the same kind of accuracy)
    lines: list[str] = []
    for name_w, model_w, acc in NARROWER if width is not None else NARROWER[:1]:
        head = [*JOB_HEAD[:-1], acc]
        if owners:
            head.insert(OWNER_AT, "OWNER")
        rows = [job_row(j, owners, kinds.get(j["id"]), name_w, model_w) for j in jobs]
        lines = table_lines(head, rows, right)
        if width is None or max(map(len, lines), default=0) <= width:
            break
    return lines


def terminal_width(err: bool = False) -> int | None:
    """The width a table must fit: COLUMNS where set, the terminal's where the output is one, else None."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    stream = sys.stderr if err else sys.stdout
    return shutil.get_terminal_size().columns if stream.isatty() else None


def print_jobs(jobs: Sequence[dict[str, Any]], owners: bool = False, err: bool = False) -> None:
    for line in job_lines(jobs, owners, terminal_width(err)):
        click.echo(line, err=err)


# -- waiting for a job -------------------------------------------------------------------------


def status_line(job: dict[str, Any]) -> str:
    """`job 7 running  step 120/200  loss 0.5310  eta 1m02s`: what `--wait` shows on a terminal."""
    p = job.get("progress") or {}
    parts = [f"job {job['id']} {job['status']}"]
    if p.get("step") is not None:
        parts.append(f"step {p['step']}/{p.get('total_steps') or '?'}")
    if loss := value_of(job.get("metrics"), "loss"):
        parts.append(f"loss {loss}")
    if job.get("eta_s") is not None and job["status"] == "running":
        parts.append(f"eta {duration(job['eta_s'])}")
    return "  ".join(parts)


class LiveLines:
    """A log followed on a terminal: its lines, and below them what is live — the line the job is drawing (a
    progress bar before its newline) and, in LiveStatus, the job's status line — redrawn in place."""

    def __init__(self) -> None:
        self.text = ""
        self.drawn = ""
        """The line the job is drawing (shown above the status line), or ''."""
        self.rows = 0
        """How many rows of the terminal the live part takes now."""
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def _clear(self) -> None:
        sys.stderr.write("\r\033[K" + "\033[1A\r\033[K" * max(0, self.rows - 1))
        self.rows = 0

    def _paint(self) -> None:
        if self.stopped.is_set():
            return
        width = shutil.get_terminal_size().columns - 1
        live = [t for t in (self.drawn[-width:], self.text[:width]) if t]
        sys.stderr.write("\n".join(live))
        self.rows = len(live)

    def _draw(self) -> None:
        with self.lock:
            self._clear()
            self._paint()
            sys.stderr.flush()

    def drawing(self, text: str) -> None:
        """The line the job is drawing now (its end, where a bar's figures are, when it is wider than us)."""
        self.drawn = text
        self._draw()

    def line(self, text: str) -> None:
        """A log line, above the live part (it ends the line being drawn)."""
        with self.lock:
            self._clear()
            sys.stderr.flush()
            self.drawn = ""
            click.echo(text)
            sys.stdout.flush()
            self._paint()
            sys.stderr.flush()

    def close(self) -> None:
        self.stopped.set()
        with self.lock:
            self._clear()
            sys.stderr.flush()


class LiveStatus(LiveLines):
    """The status line under a log followed on a terminal (`gpudeck run`): the job's state, step, loss and ETA,
    read every 2 s by a thread with a client of its own, and drawn again below each new log line."""

    def __init__(self, make_client: Callable[[], Any], job_id: int):
        super().__init__()
        self.job_id = job_id
        self.thread = threading.Thread(target=self._poll, args=(make_client,), daemon=True)
        self.thread.start()

    def _poll(self, make_client: Callable[[], Any]) -> None:
        api = make_client()
        while not self.stopped.is_set():
            try:
                self.text = status_line(api.job(self.job_id))
            except Exception:  # noqa: BLE001 (the API away for a moment: the line stays as it was)
                pass
            self._draw()
            self.stopped.wait(2.0)


def wait_for(api, job_id: int, timeout: float | None = None, live: bool = False) -> dict[str, Any]:
    """The job once it has ended, or as it is when `timeout` seconds have passed. `live`: a one-line status on
    stderr, redrawn every 2 s (a terminal; scripts and CI logs get nothing)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            left = 60.0 if deadline is None else deadline - time.monotonic()
            job = api.wait(job_id, timeout=max(1, int(min(left, 2 if live else 60))))
            if live:
                sys.stderr.write("\r\033[K" + status_line(job))
                sys.stderr.flush()
            if job["status"] in ENDED or (deadline is not None and time.monotonic() >= deadline):
                return job
    finally:
        if live:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


ACCURACY_KEYS = ("test_accuracy", "val_accuracy", "accuracy")
"""What --min-accuracy compares, the first a job's result has."""


def verdict(job: dict[str, Any], min_accuracy: float | None) -> int:
    """Exit status for an ended job: 1 unless it succeeded with test accuracy >= min_accuracy (when given)."""
    if job["status"] != "succeeded":
        why = ": ".join(str(x) for x in (job.get("reason"), job.get("message")) if x)
        click.echo(f"gpudeck: job {job['id']} {job['status']}" + (f" ({why})" if why else ""), err=True)
        return EXIT_JOB_FAILED
    if job.get("warning"):  # (it succeeded, as it was asked to; what it learned is the gate's to judge)
        click.echo(f"gpudeck: job {job['id']} succeeded with a warning: {job['warning']}", err=True)
    if min_accuracy is not None:
        result = job.get("result") or {}
        # A zoo job reports test_accuracy; a command job may report only what it logged.
        name = next((k for k in ACCURACY_KEYS if isinstance(result.get(k), (int, float))), "test_accuracy")
        acc = result.get(name)
        if acc is None or acc < min_accuracy:
            click.echo(f"gpudeck: job {job['id']} {name} {acc} is below --min-accuracy {min_accuracy}", err=True)
            return EXIT_JOB_FAILED
    return EXIT_OK
