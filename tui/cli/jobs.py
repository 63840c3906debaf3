"""Client commands about jobs: submit, run, ls, wait, cancel, retry, priority, move, logs, rm (and `show`, in
tui.cli.show, re-exported here)."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from models.common import EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_OK, EXIT_USAGE, EXIT_WAIT_TIMEOUT
from models.sourcetree import human
from models.states import ENDED, PRIORITIES
from tui.cli.base import (
    Age,
    Duration,
    LiveLines,
    LiveStatus,
    Natural,
    Pair,
    client,
    connection_options,
    echo_json,
    job_id_argument,
    json_option,
    min_accuracy_option,
    print_jobs,
    settings,
    spec_fields,
    spec_options,
    verdict,
    wait_for,
)
from tui.cli.show import show  # noqa: F401 (its old home: the command list below and importers)
from tui.client import ApiError
from tui.logtext import Folder
from tui.widgets.fmt import in_line

RM_THREADS = 4
"""DELETE requests `gpudeck rm` has in flight at once."""


def fail(command: str, message: str) -> int:
    """A usage error of `command`, one line on stderr: exit 2."""
    click.echo(f"gpudeck {command}: {message}", err=True)
    return EXIT_USAGE


@click.command()
@connection_options
@click.option("--model", required=True, help="a model of the zoo (GET /api/v1/models lists them)")
@click.option("--dataset", required=True, help="synthetic, a dataset name[:version] or a server folder")
@click.option("--param", "params", multiple=True, type=Pair("KEY=VALUE", as_json=True), help="a training param")
@spec_options("model")
@click.option("--idempotency-key", help="submitting again with the same key returns the first job (CI)")
@click.option("--wait", is_flag=True, help="wait for the job; exit 1 unless it succeeded")
@min_accuracy_option
@json_option
def submit(model, dataset, params, idempotency_key, wait, min_accuracy, as_json, **options) -> int:
    """Submit a training job of the zoo."""
    spec = spec_fields({"model": model, "dataset": dataset, "params": dict(params)}, options, "model")
    api = client()
    job = api.submit(spec, idempotency_key=idempotency_key)
    if not (wait or min_accuracy is not None):
        echo_json(job) if as_json else click.echo(f"submitted job {job['id']} ({job['status']})")
        return EXIT_OK
    if not as_json:
        click.echo(f"submitted job {job['id']}; waiting for it to end", err=True)
    job = wait_for(api, job["id"], live=not as_json and sys.stderr.isatty())
    echo_json(job) if as_json else print_jobs([job])
    return verdict(job, min_accuracy)


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog="Exit status: 0 succeeded, 1 failed/canceled/below --min-accuracy, 2 bad input, 3 API unreachable.",
)
@connection_options
@click.option("--source", default=".", metavar="DIR", help="the folder to send (default: .)")
@click.option("--no-source", is_flag=True, help="send no folder (the command needs no files)")
@click.option("--dataset", help="an uploaded NAME[:VERSION] or a server folder: the job's $DATA_DIR")
@spec_options("command")
@click.option("--env", "env", multiple=True, type=Pair("NAME=VALUE"), help="a variable (repeatable)")
@click.option(
    "--secret-env",
    "secret_env",
    multiple=True,
    type=Pair("NAME=VALUE"),
    help="a variable whose value is never shown nor written to the job dir (repeatable)",
)
@min_accuracy_option
@click.option("--detach", is_flag=True, help="print the job id and return")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(source, no_source, env, secret_env, min_accuracy, detach, command, **options) -> int:
    """Run your own command as a job: pack a folder, upload it, follow the log.

    Packs --source (default .) without what .gitignore/.gpudeckignore leave out, uploads it unless the server
    holds the same tree, submits the command (the words after --, joined by spaces and run by /bin/sh on the
    worker, so quote '$DATA_DIR' to have it expanded there) and follows its log."""

    words = list(command[1:] if command[:1] == ("--",) else command)
    if not words:
        return fail("run", "give the command after --, e.g. gpudeck run -- python train.py")
    spec: dict[str, Any] = {"command": words[0] if len(words) == 1 else " ".join(words)}
    api = client()
    if not no_source:
        ref = send_source(api, "run", source)
        if isinstance(ref, int):
            return ref
        spec["source"] = ref
    spec_fields(spec, options, "command")
    if options.get("dataset"):
        spec["dataset"] = options["dataset"]
    if env:
        spec["env"] = dict(env)
    if secret_env:
        spec["secret_env"] = dict(secret_env)
    job = api.submit(spec)
    if detach:
        click.echo(job["id"])
        return EXIT_OK
    click.echo(f"job {job['id']} {job['status']}: following its log (Ctrl-C stops following, not the job)", err=True)
    # on a terminal, the job's status, step, loss and ETA on a line under the log, as `wait` shows them
    where = settings()  # (read here: the status thread has no click context)
    status = LiveStatus(lambda: client(where), job["id"]) if sys.stdout.isatty() and sys.stderr.isatty() else None
    try:
        for line in api.follow_logs(job["id"], on_live=status.drawing if status is not None else None):
            if status is not None:
                status.line(line)
            else:
                click.echo(line)
                sys.stdout.flush()
        job = wait_for(api, job["id"])
    except KeyboardInterrupt:
        if status is not None:
            status.close()
        click.echo(
            f"\nstopped following job {job['id']}; it goes on. Follow it again: gpudeck logs {job['id']} -f; "
            f"stop it: gpudeck cancel {job['id']}",
            err=True,
        )
        return EXIT_INTERRUPTED
    if status is not None:
        status.close()
    print_jobs([job], err=True)
    return verdict(job, min_accuracy)


def send_source(api, command: str, source: str) -> str | int:  # noqa: ANN001
    """Pack the folder `source` (without what .gitignore/.gpudeckignore leave out) and upload it unless the server
    holds the same tree: its `src:` reference, or the exit code after a one-line refusal."""
    from tui import pack

    folder = Path(source)
    if not folder.is_dir():
        return fail(command, f"--source {folder}: not a folder")
    try:
        packed = pack.collect(folder)
        click.echo(
            f"source {packed.root}: {len(packed.names)} files, {human(packed.size_bytes)}"
            + (f" (largest: {', '.join(f'{n} {human(b)}' for n, b in packed.largest())})" if packed.names else "")
            + (f", git {packed.git['git_commit'][:12]}" if packed.git else "")
            + (" with uncommitted changes" if packed.git.get("git_dirty") == "true" else ""),
            err=True,
        )
        pack.check_size(packed, settings().source_max_bytes)
    except (pack.PackError, OSError, ValueError) as exc:
        return fail(command, str(exc))
    if api.source(packed.ref) is None:
        with tempfile.TemporaryDirectory(prefix="gpudeck-run-") as tmp:
            stored = api.upload_source(str(pack.archive(packed, Path(tmp) / "source.tar.gz")), packed.git)
        click.echo(f"uploaded {stored['ref'][:16]}… ({stored['files']} files)", err=True)
    else:
        click.echo(f"the server already holds this tree ({packed.ref[:16]}…): nothing to upload", err=True)
    return packed.ref


@click.command(name="ls")
@connection_options
@click.option("--status", help="only these statuses, e.g. running,queued")
@click.option("--model", help="only this model")
@click.option("--tag", help="only jobs with this tag")
@click.option("--mine", is_flag=True, help="only your jobs (those of your named token)")
@click.option("--owner", help="only the jobs of this user (a token's name)")
@click.option("--limit", type=int, default=20, show_default=True, help="the newest this many (a page: at most 500)")
@click.option("--cursor", type=Natural(), help="the page after this one: the `next_cursor` a page ended with")
@click.option("--all", "every", is_flag=True, help="every job that matches, page after page (500 a page)")
@json_option
def ls(status, model, tag, mine, owner, limit, cursor, every, as_json) -> int:
    """List jobs, newest first."""
    if mine and owner:
        return fail("ls", "--mine and --owner choose the same thing: give one")
    api, who = client(), "me" if mine else owner
    page = api.jobs(limit=500 if every else limit, cursor=cursor, status=status, model=model, tag=tag, owner=who)
    jobs = list(page["jobs"])
    while every and page.get("next_cursor") is not None:
        page = api.jobs(limit=500, cursor=page["next_cursor"], status=status, model=model, tag=tag, owner=who)
        jobs += page["jobs"]
    if as_json:
        echo_json({**page, "jobs": jobs})
        return EXIT_OK
    print_jobs(jobs, owners=any(job.get("owner") or job.get("project") for job in jobs))
    if page.get("next_cursor") is not None:  # on stderr: a script reading the table gets only the table
        click.echo(
            f"gpudeck: {len(jobs)} of {page.get('total', '?')} jobs shown; the next page: --cursor "
            f"{page['next_cursor']} (or --all for every one)",
            err=True,
        )
    return EXIT_OK


@click.command()
@connection_options
@job_id_argument
@min_accuracy_option
@click.option(
    "--timeout", type=Duration(), metavar="S|AGE", help=f"give up after this long: 600, 10m (exit {EXIT_WAIT_TIMEOUT})"
)
@json_option
def wait(job_id, min_accuracy, timeout, as_json) -> int:
    """Wait for a job to end; exit 1 unless it succeeded."""
    job = wait_for(client(), job_id, timeout=timeout, live=not as_json and sys.stderr.isatty())
    echo_json(job) if as_json else print_jobs([job])
    if job["status"] not in ENDED:
        click.echo(f"gpudeck: job {job['id']} is still {job['status']} after {timeout:g}s", err=True)
        return EXIT_WAIT_TIMEOUT
    return verdict(job, min_accuracy)


def named(job_id: int, message: str) -> str:
    """`job N: why`, the job named once (the API's message may name it already: "job 9999 does not exist")."""
    return message if message.startswith(f"job {job_id} ") else f"job {job_id}: {message}"


def each(command: str, ids: list[int], act, said, as_json: bool, chosen: bool = False) -> int:  # noqa: ANN001
    """`act(id)` for every id, each outcome reported (a refused or unknown one on stderr, and the others still
    done): exit 0 when all went, 1 when some did not, 2 when none did. `chosen`: the ids are what a selection
    (--status, --tag) listed a moment ago, and one that ended since (a 409 naming its end) is no failure (issue
    67 #7: `cancel --status queued` exited 1 for jobs that ended meanwhile)."""
    done, failed = [], 0
    for job_id in ids:
        try:
            result = act(job_id)
        except ApiError as exc:
            if exc.status not in (403, 404, 409):
                raise
            ended = (exc.details or {}).get("status")
            if chosen and exc.status == 409 and ended in ("succeeded", "failed", "canceled"):
                click.echo(f"job {job_id}: {ended} meanwhile", err=True)
                continue
            # (the API's message names the job already: "job 9999 does not exist", not "job 9999: job 9999 …")
            click.echo(f"gpudeck {command}: {named(job_id, exc.message)}", err=True)
            failed += 1
            continue
        done.append(result)
        if not as_json:
            click.echo(said(job_id, result))
    if as_json and done:
        echo_json(done if len(ids) != 1 else done[0])
    return EXIT_OK if not failed else (EXIT_JOB_FAILED if done else EXIT_USAGE)


def selected(api, ids: tuple[int, ...], status: str | None, tag: str | None, allowed: tuple[str, ...]) -> list[int]:  # noqa: ANN001
    """The ids given, or every job of `status` (some of `allowed`) and `tag`, newest first."""
    if ids:
        return list(ids)
    wanted = {x.strip() for x in (status or ",".join(allowed)).split(",") if x.strip()}
    if not wanted <= set(allowed):
        raise click.UsageError(f"--status takes {', '.join(allowed)}")
    out, cursor = [], None
    while True:
        page = api.jobs(limit=500, cursor=cursor, status=",".join(sorted(wanted)), tag=tag)
        out += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return out


@click.command()
@connection_options
@click.argument("ids", nargs=-1, type=int, metavar="[ID]...")
@click.option("--status", metavar="S,…", help="every job of these statuses (queued, starting, running)")
@click.option("--tag", help="every unended job with this tag (with --status: of those statuses)")
@json_option
def cancel(ids, status, tag, as_json) -> int:
    """Cancel queued or running jobs: the ids given, or those --status/--tag choose."""
    if ids and (status or tag):
        raise click.UsageError("name jobs, or choose them with --status/--tag, not both")
    if not ids and not (status or tag):
        raise click.UsageError("name the jobs (gpudeck cancel 3 4), or --status queued, or --tag nightly")
    api = client()
    chosen = selected(api, ids, status, tag, ("queued", "starting", "running"))

    def said(job_id: int, job: dict) -> str:
        return f"job {job['id']}: {job['status']}" + (" (stopping)" if job["status"] in ("starting", "running") else "")

    return each("cancel", chosen, api.cancel, said, as_json, chosen=not ids)


@click.command()
@connection_options
@job_id_argument
@click.argument("level", type=click.Choice(PRIORITIES), metavar="{high|normal|low}")
@json_option
def priority(job_id, level, as_json) -> int:
    """Give a queued job another priority (a high job may preempt lower ones that run)."""
    job = client().set_priority(job_id, level)
    echo_json(job) if as_json else click.echo(f"job {job['id']}: {level}, {in_line(job) or job['status']}")
    return EXIT_OK


@click.command()
@connection_options
@job_id_argument
@click.option("--before", type=Natural(), metavar="ID", help="just before queued job ID of the same line")
@click.option("--after", type=Natural(), metavar="ID", help="just after queued job ID of the same line")
@click.option("--top", is_flag=True, help="first of its line")
@json_option
def move(job_id, before, after, top, as_json) -> int:
    """Move a queued job within its line (your jobs of its priority; between people, fair share decides)."""
    given = [w for w, v in (("before", before), ("after", after), ("top", top or None)) if v is not None]
    if len(given) != 1:
        raise click.UsageError("give one of --before ID, --after ID, --top")
    where = {"top": True} if top else {given[0]: before if before is not None else after}
    job = client().move(job_id, **where)
    echo_json(job) if as_json else click.echo(f"job {job['id']}: {in_line(job) or job['status']}")
    return EXIT_OK


@click.command()
@connection_options
@click.argument("ids", nargs=-1, type=int, required=True, metavar="ID...")
@click.option("--fresh", is_flag=True, help="train from the start, not from its last checkpoint")
@json_option
def retry(ids, fresh, as_json) -> int:
    """Submit ended jobs again, each as a new job."""
    api = client()

    def said(job_id: int, job: dict) -> str:
        resumes = f", from job {job_id}'s last checkpoint" if job.get("resumes") else ""
        return f"job {job_id} resubmitted as job {job['id']}{resumes}"

    return each("retry", list(ids), lambda i: api.retry(i, resume=not fresh), said, as_json)


@click.command()
@connection_options
@job_id_argument
@click.option("-f", "--follow", is_flag=True, help="keep printing until the job ends")
@click.option("--offset", type=Natural(), default=0, help="skip this many lines of the log as written (before folding)")
@click.option("--tail", type=Natural(), metavar="N", help="only the last N lines (with -f: then follow)")
@click.option("--raw", is_flag=True, help="every line as written (TensorFlow's start-up lines unfolded)")
def logs(job_id, follow, offset, tail, raw) -> int:
    """A job's training log."""
    api = client()
    folder = None if raw else Folder()  # TensorFlow's start-up lines folded into one, unless --raw
    lines: list[str] = []
    if tail is not None or not follow:  # what is there now (pages of 10,000 lines)
        while True:
            text, nxt = api.logs(job_id, offset)
            if nxt == offset:
                break
            lines += folder.feed(text.splitlines()) if folder else text.splitlines()
            if tail is not None:
                lines = lines[-tail:] if tail else []
            offset = nxt
    for line in lines:
        click.echo(line)
    if follow:
        live = LiveLines() if sys.stdout.isatty() and sys.stderr.isatty() else None  # a bar drawn in place
        try:
            for line in api.follow_logs(job_id, offset, on_live=live.drawing if live else None):
                for shown in folder.feed([line]) if folder else [line]:
                    if live is not None:
                        live.line(shown)
                    else:
                        click.echo(shown)
                        sys.stdout.flush()
        finally:
            if live is not None:
                live.close()
    for line in folder.flush() if folder else []:
        click.echo(line)
    return EXIT_OK


@click.command()
@connection_options
@click.argument("ids", nargs=-1, type=int, metavar="[ID]...")
@click.option("--status", metavar="S,…", help="every job of these ended statuses, e.g. failed,canceled")
@click.option("--older-than", type=Age(), metavar="AGE", help="only those that ended before: 30d, 12h, 2w")
@click.option("--dry-run", is_flag=True, help="say which jobs, delete nothing")
def rm(ids, status, older_than, dry_run) -> int:
    """Delete ended jobs for good (record, log, metrics, job dir); each refused id is named, the others go."""
    api = client()
    if ids and (status or older_than is not None):
        return fail("rm", "name jobs, or choose them with --status/--older-than, not both")
    if not ids and not status:
        return fail("rm", "name the jobs (gpudeck rm 3 4), or --status failed,canceled [--older-than 30d]")
    chosen = list(ids)
    if not chosen:
        wanted = {s.strip() for s in status.split(",") if s.strip()}
        if not wanted <= set(ENDED):
            return fail("rm", f"--status takes ended statuses ({', '.join(sorted(ENDED))})")
        cutoff = time.time() - (older_than or 0)
        cursor = None
        while True:
            page = api.jobs(limit=500, cursor=cursor, status=",".join(sorted(wanted)))
            for job in page["jobs"]:
                ended_at = datetime.fromisoformat(job["ended_at"].replace("Z", "+00:00")).timestamp()
                if ended_at <= cutoff:
                    chosen.append(job["id"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
    if dry_run:  # one id a line: a script reads them, a person counts them on the last line
        for job_id in chosen:
            click.echo(job_id)
        click.echo(f"would delete {len(chosen)} job{'s' if len(chosen) != 1 else ''}", err=True)
        return EXIT_OK
    local, where = threading.local(), settings()

    def delete(job_id: int) -> dict[str, Any] | str:  # a client (a requests session) per thread; why, when refused
        if not hasattr(local, "client"):
            local.client = client(where)
        try:
            return local.client.delete(job_id)
        except ApiError as exc:
            if exc.status not in (403, 404, 409):
                raise
            return exc.message

    with ThreadPoolExecutor(RM_THREADS) as pool:  # the API deletes several at once (the jobs' dirs, Redis)
        outcomes = list(pool.map(delete, chosen))
    for job_id, outcome in zip(chosen, outcomes):
        if isinstance(outcome, str):
            click.echo(f"gpudeck rm: {named(job_id, outcome)}", err=True)
        elif outcome.get("store_error"):
            click.echo(f"gpudeck rm: job {job_id}: deleted, but not its objects: {outcome['store_error']}", err=True)
    done = [o for o in outcomes if not isinstance(o, str)]
    gone = [o["id"] for o in done]
    freed = sum(o["bytes_freed"] for o in done)
    objects = sum(o.get("objects_deleted", 0) for o in done)
    if gone or not chosen:
        which = f": {_ranges(gone)}" if gone else ""
        stored = f", {objects} object{'s' if objects != 1 else ''} deleted from the store" if objects else ""
        click.echo(f"deleted {len(gone)} job{'s' if len(gone) != 1 else ''}{which} ({human(freed)} freed{stored})")
    if len(gone) == len(chosen):
        return EXIT_OK
    return EXIT_JOB_FAILED if gone else EXIT_USAGE


def _ranges(ids: list[int]) -> str:
    """`3-7 9 12-13`: ids as runs."""
    out, run = [], []
    for i in sorted(ids):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return " ".join(out)


COMMANDS = (submit, run, ls, show, wait, cancel, retry, priority, move, logs, rm)
