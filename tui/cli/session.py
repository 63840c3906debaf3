"""`gpudeck session`: an interactive shell (or a notebook) on a worker's GPUs, queued like a job; `gpudeck session
attach ID` reattaches."""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any

import click

from models.common import EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_OK
from models.states import ENDED
from tui.cli.base import Pair, client, connection_options, job_id_argument, spec_fields, spec_options
from tui.cli.jobs import fail, send_source
from tui.cli.show import expected_start
from tui.widgets.fmt import as_me, duration, in_line

POLL_S = 0.1
"""How often the CLI looks whether its session has started (a prompt within 2 s of an idle worker's start)."""


def _waiting_line(job: dict[str, Any]) -> str:
    """`session 12 queued: #1 in line, ~3m; expected 14:05 (in 3m10s); waiting for 1 GPU …`."""
    starts = expected_start(job)
    why = job.get("message") or ""
    return (
        f"session {job['id']} {job['status']}: {in_line(job) or 'waiting'}"
        + (f"; expected {starts}" if starts else "")
        + (f"; {why}" if why else "")
    )


def wait_started(api, job_id: int, cancel_on_interrupt: bool) -> dict[str, Any] | int:  # noqa: ANN001
    """The session's record once it runs (its `attach` or `url` known), or an exit code: it ended first, or Ctrl-C
    (which cancels a session still waiting, when `cancel_on_interrupt`)."""
    shown, on_tty = "", sys.stderr.isatty()
    try:
        while True:
            job = api.job(job_id)
            if job["status"] in ENDED:
                if on_tty and shown:
                    click.echo("", err=True)
                click.echo(_ended(job), err=True)
                return EXIT_JOB_FAILED
            if job.get("attach") or job.get("url"):
                if on_tty and shown:
                    click.echo("\r\x1b[K", nl=False, err=True)
                return job
            line = _waiting_line(job) if job["status"] == "queued" else f"session {job_id} {job['status']}…"
            if line != shown:  # (on a terminal: one line, rewritten in place, cut to its width)
                width = shutil.get_terminal_size().columns - 1
                click.echo(f"\r\x1b[K{line[:width]}" if on_tty else line, nl=not on_tty, err=True)
                shown = line
            time.sleep(POLL_S if job["status"] != "queued" else 0.5)
    except KeyboardInterrupt:
        if not cancel_on_interrupt:
            click.echo(f"\nstopped waiting; session {job_id} goes on: gpudeck session attach {job_id}", err=True)
            return EXIT_INTERRUPTED
        api.cancel(job_id)
        click.echo(f"\ncanceled session {job_id} (it had not started)", err=True)
        return EXIT_INTERRUPTED


def reach(api, job: dict[str, Any]) -> int:  # noqa: ANN001
    """Attach to a running session: its terminal directly on this host, else `ssh -t HOST gpudeck session attach
    ID` (printed when ssh cannot be used); a notebook's URL and tunnel line."""
    from tui.attach import AttachError, attach, local_host

    job_id = job["id"]
    if job.get("url"):
        click.echo(f"session {job_id}: Jupyter at {job['url']}")
        click.echo(f"from your machine: {as_me(job['tunnel'])}")
        click.echo(
            f"it ends after {duration(job['spec'].get('idle') or 0)} with no client and its GPUs idle; now: "
            f"gpudeck cancel {job_id}"
        )
        return EXIT_OK
    where = job["attach"]
    if not local_host(where["host"]):
        ssh = shutil.which("ssh")
        if ssh is None or not sys.stdin.isatty():
            click.echo(f"session {job_id} runs on {where['host']}; attach there: {where['ssh']}")
            return EXIT_OK
        click.echo(f"session {job_id} runs on {where['host']}: {where['ssh']}", err=True)
        os.execv(ssh, ["ssh", "-t", where["host"], "gpudeck", "session", "attach", str(job_id)])
    if not where.get("secret"):
        return fail("session attach", f"session {job_id} is not yours: only its owner (or an admin) may attach")
    click.echo(f"attached to session {job_id} on {where['host']} (Ctrl-] detaches; exit ends it)", err=True)
    try:
        ended = attach(where["port"], where["secret"])
    except AttachError as exc:
        return fail("session attach", str(exc))
    if ended.detached:
        idle = duration(job["spec"].get("idle") or 0)
        click.echo(
            f"\ndetached from session {job_id}; it goes on (released after {idle} with nobody attached and its GPUs "
            f"idle): gpudeck session attach {job_id}",
            err=True,
        )
        return EXIT_OK
    deadline = time.monotonic() + 10
    final = api.job(job_id)
    while final["status"] not in ENDED and time.monotonic() < deadline:
        time.sleep(0.2)
        final = api.job(job_id)
    click.echo(_ended(final), err=True)
    return EXIT_OK


def _ended(job: dict[str, Any]) -> str:
    return f"session {job['id']} {job['status']}: {job.get('message') or job.get('reason') or ''}"


SESSION_KIND = "session"
SESSION_OPTIONS = ("gpus", "name", "tags", "priority", "env_name", "requirements", "idle", "max", "jupyter")
"""The session's fields `gpudeck session` mirrors (its other fields are a job's that a session keeps at their
defaults)."""


@click.group(
    name="session",
    invoke_without_command=True,
    epilog="Exit status: 0 the session ran (or you detached), 1 it ended before it started, 130 Ctrl-C while "
    "waiting (which cancels it).",
)
@connection_options
@click.option("--source", metavar="DIR", help="a folder to send: the session's working directory (its copy)")
@click.option("--dataset", help="an uploaded NAME[:VERSION] or a server folder: the session's $DATA_DIR")
@click.option("--env", "env", multiple=True, type=Pair("NAME=VALUE"), help="a variable (repeatable)")
@spec_options(SESSION_KIND, SESSION_OPTIONS)
@click.option("--detach", is_flag=True, help="print the session's id once queued and return")
@click.pass_context
def session(ctx: click.Context, source, env, detach, **options) -> int:
    """Queue an interactive session and attach to it: a shell on a worker, with its GPUs pinned
    (CUDA_VISIBLE_DEVICES), GPUDECK_JOB_ID, JOB_DIR, the source copy as its working directory and the project's
    environment; or, with --jupyter, a notebook server with a token, its URL and ssh tunnel line printed.

    It waits in line like a job (Ctrl-C while waiting cancels it), is never preempted, and ends when its shell
    exits, after --idle with nobody attached and its GPUs under 5%, or at --max."""
    if ctx.invoked_subcommand is not None:
        return EXIT_OK
    api = client()
    spec: dict[str, Any] = {"kind": "session"}
    if source is not None:
        ref = send_source(api, "session", source)
        if isinstance(ref, int):
            return ref
        spec["source"] = ref
    spec_fields(spec, options, SESSION_KIND)
    spec.update({k: v for k, v in {"dataset": options.get("dataset"), "env": dict(env)}.items() if v})
    job = api.submit(spec)
    if detach:
        click.echo(job["id"])
        return EXIT_OK
    started = wait_started(api, job["id"], cancel_on_interrupt=True)
    return started if isinstance(started, int) else reach(api, started)


@session.command(name="attach")
@connection_options
@job_id_argument
def attach_command(job_id: int) -> int:
    """Attach to a running session (Ctrl-] detaches; exiting its shell ends it); a notebook's URL."""
    api = client()
    job = api.job(job_id)
    if job.get("kind") != "session":
        return fail("session attach", f"job {job_id} is not a session (it is a {job.get('kind')} job)")
    if job["status"] in ENDED:
        return fail("session attach", f"session {job_id} has ended ({job['status']}: {job.get('message') or ''})")
    started = wait_started(api, job_id, cancel_on_interrupt=False)
    return started if isinstance(started, int) else reach(api, started)


COMMANDS = (session,)
