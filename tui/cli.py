"""`gpudeck`: the client commands that talk to the API over HTTP (`submit`, `ls`, `tui`, ...), and the dispatch
to the server commands (`up`, `worker` in jobs.cli; `api` in api.serve)."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from api.serve import add_command as add_api_command
from jobs.cli import EXIT_JOB_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, settings_from_env
from jobs.cli import add_commands as add_server_commands
from jobs.keys import PRIORITIES
from jobs.settings import DEFAULT_API, parse_age, parse_size
from models.sourcetree import human
from tui.logtext import Folder
from tui.widgets.fmt import accuracy_text, duration, one_line, usage_text, value_of, what

ENDED = ("succeeded", "failed", "canceled")


def cmd_drain(name: str) -> int:
    """`gpudeck worker --drain NAME`: POST /api/v1/workers/NAME/drain."""
    print(json.dumps(_client().drain(name)))
    return EXIT_OK


# -- client commands ---------------------------------------------------------------------------
RM_THREADS = 4
"""DELETE requests `gpudeck rm` has in flight at once."""


def _client():
    from tui.client import Client

    s = settings_from_env()
    return Client(s.api_url, s.token)


def _natural(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number of 0 or more, got {text!r}")
    return int(text)


def _param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param takes key=value, got {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def _row(job: dict[str, Any], owners: bool = False) -> str:
    p = job.get("progress") or {}
    prog = f"{p['step']}/{p['total_steps']}" if p.get("total_steps") else "-"
    owner = f"{one_line(job.get('owner') or '-', 10):<10} " if owners else ""
    return (
        f"{job['id']:>5}  {job['status']:<10} {owner}{one_line(job.get('name'), 20):<20} "
        f"{one_line(what(job['spec']), 14):<14} "
        f"{prog:>11}  {value_of(job.get('metrics'), 'loss') or '-':>8}  {accuracy_text(job) or '-':<12}"
    ).rstrip()


HEADER = f"{'ID':>5}  {'STATUS':<10} {'NAME':<20} {'MODEL':<14} {'PROGRESS':>11}  {'LOSS':>8}  ACC (test/val/batch)"
OWNERS_HEADER = HEADER.replace("STATUS     ", f"STATUS     {'OWNER':<10} ")
"""`ls`'s header where jobs have owners (named tokens): an OWNER column after the status."""


EXIT_WAIT_TIMEOUT = 4
"""`wait --timeout` ran out before the job ended."""


def _wait(client, job_id: int, timeout: float | None = None, live: bool = False) -> dict[str, Any]:
    """The job once it has ended, or as it is when `timeout` seconds have passed. `live`: a one-line status on
    stderr, redrawn every 2 s (a terminal; scripts and CI logs get nothing)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            left = 60.0 if deadline is None else deadline - time.monotonic()
            job = client.wait(job_id, timeout=max(1, int(min(left, 2 if live else 60))))
            if live:
                sys.stderr.write("\r\033[K" + _status_line(job))
                sys.stderr.flush()
            if job["status"] in ENDED or (deadline is not None and time.monotonic() >= deadline):
                return job
    finally:
        if live:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _status_line(job: dict[str, Any]) -> str:
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


def _verdict(job: dict[str, Any], min_accuracy: float | None) -> int:
    """Exit status for an ended job: 1 unless it succeeded with test accuracy >= min_accuracy (when given)."""
    if job["status"] != "succeeded":
        why = ": ".join(str(x) for x in (job.get("reason"), job.get("message")) if x)
        print(f"gpudeck: job {job['id']} {job['status']}" + (f" ({why})" if why else ""), file=sys.stderr)
        return EXIT_JOB_FAILED
    if min_accuracy is not None:
        result = job.get("result") or {}
        # A zoo job reports test_accuracy; a command job may report only what it logged.
        name = next((k for k in ACCURACY_KEYS if isinstance(result.get(k), (int, float))), "test_accuracy")
        acc = result.get(name)
        if acc is None or acc < min_accuracy:
            print(f"gpudeck: job {job['id']} {name} {acc} is below --min-accuracy {min_accuracy}", file=sys.stderr)
            return EXIT_JOB_FAILED
    return EXIT_OK


ACCURACY_KEYS = ("test_accuracy", "val_accuracy", "accuracy")
"""What --min-accuracy compares, the first a job's result has."""


def _options(spec: dict[str, Any], args: argparse.Namespace, keys: tuple[str, ...]) -> dict[str, Any]:
    """`spec` with the options given on the command line: `keys` as they are, --chief, --tag."""
    spec.update({k: getattr(args, k) for k in keys if getattr(args, k) is not None})
    if args.chief:
        spec["chief"] = True
    if args.tag:
        spec["tags"] = args.tag
    return spec


COMMON_OPTIONS = ("gpus", "priority", "name", "timeout", "max_retries", "workers")
"""Spec fields that submit and run take from options of the same name."""


def cmd_submit(args: argparse.Namespace) -> int:
    spec = _options(
        {"model": args.model, "dataset": args.dataset, "params": dict(args.param or [])}, args, COMMON_OPTIONS
    )
    client = _client()
    job = client.submit(spec, idempotency_key=args.idempotency_key)
    if not (args.wait or args.min_accuracy is not None):
        print(json.dumps(job, indent=2) if args.json else f"submitted job {job['id']} ({job['status']})")
        return EXIT_OK
    if not args.json:
        print(f"submitted job {job['id']}; waiting for it to end", file=sys.stderr)
    job = _wait(client, job["id"], live=not args.json and sys.stderr.isatty())
    print(json.dumps(job, indent=2) if args.json else HEADER + "\n" + _row(job))
    return _verdict(job, args.min_accuracy)


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--env takes NAME=VALUE, got {text!r}")
    return key, value


def cmd_run(args: argparse.Namespace) -> int:
    """Pack a folder, upload it unless the server holds the same tree, submit the command, follow its log."""
    from tui import pack

    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not words:
        print("gpudeck run: give the command after --, e.g. gpudeck run -- python train.py", file=sys.stderr)
        return EXIT_USAGE
    spec: dict[str, Any] = {"command": words[0] if len(words) == 1 else " ".join(words)}
    client = _client()
    if not args.no_source:
        folder = Path(args.source)
        if not folder.is_dir():
            print(f"gpudeck run: --source {folder}: not a folder", file=sys.stderr)
            return EXIT_USAGE
        try:
            packed = pack.collect(folder)
            print(
                f"source {packed.root}: {len(packed.names)} files, {human(packed.size_bytes)}"
                + (f" (largest: {', '.join(f'{n} {human(b)}' for n, b in packed.largest())})" if packed.names else "")
                + (f", git {packed.git['git_commit'][:12]}" if packed.git else "")
                + (" with uncommitted changes" if packed.git.get("git_dirty") == "true" else ""),
                file=sys.stderr,
            )
            pack.check_size(packed, parse_size(os.environ.get("GPUDECK_SOURCE_MAX_BYTES") or "100M"))
        except (pack.PackError, OSError, ValueError) as exc:
            print(f"gpudeck run: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if client.source(packed.ref) is None:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="gpudeck-run-") as tmp:
                stored = client.upload_source(str(pack.archive(packed, Path(tmp) / "source.tar.gz")), packed.git)
            print(f"uploaded {stored['ref'][:16]}… ({stored['files']} files)", file=sys.stderr)
        else:
            print(f"the server already holds this tree ({packed.ref[:16]}…): nothing to upload", file=sys.stderr)
        spec["source"] = packed.ref
    _options(spec, args, (*COMMON_OPTIONS, "dataset", "total_steps", "env_name"))
    if args.env:
        spec["env"] = dict(args.env)
    job = client.submit(spec)
    if args.detach:
        print(job["id"])
        return EXIT_OK
    print(f"job {job['id']} {job['status']}: following its log (Ctrl-C stops following, not the job)", file=sys.stderr)
    try:
        for line in client.follow_logs(job["id"]):
            print(line, flush=True)
        job = _wait(client, job["id"])
    except KeyboardInterrupt:
        print(
            f"\nstopped following job {job['id']}; it goes on. Follow it again: gpudeck logs {job['id']} -f; "
            f"stop it: gpudeck cancel {job['id']}",
            file=sys.stderr,
        )
        return 130
    print(HEADER + "\n" + _row(job), file=sys.stderr)
    return _verdict(job, args.min_accuracy)


def cmd_ls(args: argparse.Namespace) -> int:
    owner = "me" if args.mine else args.owner
    page = _client().jobs(limit=args.limit, status=args.status, model=args.model, tag=args.tag, owner=owner)
    if args.json:
        print(json.dumps(page, indent=2))
    else:
        owners = any(job.get("owner") for job in page["jobs"])
        print(OWNERS_HEADER if owners else HEADER)
        for job in page["jobs"]:
            print(_row(job, owners))
        if page.get("next_cursor") is not None:  # on stderr: a script reading the table gets only the table
            print(
                f"gpudeck: the newest {len(page['jobs'])} jobs shown; more with --limit (up to 500) or --json's "
                "next_cursor",
                file=sys.stderr,
            )
    return EXIT_OK


def cmd_whoami(args: argparse.Namespace) -> int:
    me = _client().whoami()
    if args.json:
        print(json.dumps(me, indent=2))
    elif me["auth"] == "none":
        print("nobody: this gpudeck asks for no token (anyone who reaches it may do anything)")
    else:
        name = me["name"] or "a GPUDECK_TOKENS token (no name)"
        n = me.get("max_gpus")
        limits = [f"at most {n} GPU{'' if n == 1 else 's'} at once" if n is not None else None]
        limits.append("no command jobs" if me.get("commands") is False else None)
        print(f"{name}, {me['role']}" + "".join(f"; {x}" for x in limits if x))
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    entries = _client().audit(user=args.user, since=args.since, limit=args.limit)["entries"]
    if args.json:
        print(json.dumps(entries, indent=2))
        return EXIT_OK
    print(f"{'TIME':<20} {'USER':<14} {'ADDRESS':<15} {'STATUS':>6}  REQUEST")
    for e in entries:
        when = e["time"][:19].replace("T", " ")
        what = f"{e['method']} {e['path']}" + (f" ({e['detail']})" if e.get("detail") else "")
        print(f"{when:<20} {one_line(e['user'], 14):<14} {e.get('address', ''):<15} {e['status'] or '-':>6}  {what}")
    return EXIT_OK


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def cmd_show(args: argparse.Namespace) -> int:
    job = _client().job(args.id)
    if args.json:
        print(json.dumps(job, indent=2))
        return EXIT_OK
    spec, p = job["spec"], job.get("progress") or {}
    rows = [
        ("job", f"{job['id']}  {job['name']}"),
        ("owner", job.get("owner")),
        ("status", job["status"] + (f" ({job['reason']})" if job.get("reason") else "")),
        ("message", job.get("message")),
        *_what_rows(job),
        ("gpus", f"{spec['gpus']} on {job.get('worker') or '-'} {job.get('gpu_ids') or ''}".rstrip()),
        ("in line", f"#{job['queue_position']} in {job['queue']}" if job.get("queue_position") else None),
        ("uses", usage_text(job.get("usage")) or None),
        ("progress", f"step {p.get('step')}/{p.get('total_steps')}" if p.get("total_steps") else None),
        ("elapsed", duration(job["elapsed_s"]) if job.get("elapsed_s") is not None else None),
        ("eta", duration(job["eta_s"]) if job.get("eta_s") is not None and job["status"] == "running" else None),
        ("metrics", _pairs(job.get("metrics"))),
        ("tags", ", ".join(spec.get("tags") or []) or None),
        ("disk", human(job["disk_bytes"]) if job.get("disk_bytes") is not None else None),
        ("resumes", f"job {job['resumes']}'s last checkpoint" if job.get("resumes") else None),
    ]
    for key, value in rows:
        print(f"{key:>9}  {_fmt(value)}")
    result = job.get("result") or {}
    names = _ordered(result)
    for i, name in enumerate(names):  # one line a value, aligned: a table, not a JSON object
        print(f"{'result' if i == 0 else '':>9}  {name:<{max(map(len, names))}}  {value_of(result, name) or '-'}")
    for t in job.get("tasks") or []:
        where = f"{t['worker'] or '-'} {t['address'] or ''}".rstrip()
        print(f"{'task':>9}  {t['type']}:{t['task_index']}  {t['status']}  {where}  {t.get('message') or ''}".rstrip())
    for line in job.get("log_tail") or []:
        print(f"{'log':>9}  {line}")
    return EXIT_OK


FIRST = ("step", "epoch", "loss", "accuracy", "val_loss", "val_accuracy", "test_accuracy", "test_loss")
"""Fields shown first, in this order, in `show`'s metrics and result (the rest follow by name)."""


def _ordered(obj: dict[str, Any]) -> list[str]:
    names = [k for k in obj if k not in ("time", "nonfinite")] + [k for k in obj.get("nonfinite") or {} if k not in obj]
    return sorted(names, key=lambda k: (FIRST.index(k) if k in FIRST else len(FIRST), k))


def _pairs(point: dict[str, Any] | None) -> str | None:
    """The newest metric point as `step 120  epoch 3.2  loss 0.5310  accuracy 0.8750 …` (nan where not finite)."""
    if not point:
        return None
    return "  ".join(f"{k} {value_of(point, k) or '-'}" for k in _ordered(point))


def _what_rows(job: dict[str, Any]) -> list[tuple[str, Any]]:
    spec = job["spec"]
    if spec.get("command") is None:
        return [("model", spec["model"]), ("dataset", spec["dataset"]), ("params", spec.get("params"))]
    src = job.get("source") or {}
    where = " ".join(
        x
        for x in (
            src.get("ref"),
            f"{src.get('files')} files, {human(src['size_bytes'])}" if src else None,
            f"git {src['git_commit'][:12]}" if src.get("git_commit") else None,
            "(dirty)" if src.get("git_dirty") else None,
            f"from {src['path']}" if src.get("path") else None,
        )
        if x
    )
    return [
        ("command", spec["command"]),
        ("source", where or None),
        ("dataset", spec.get("dataset")),
        ("env", " ".join(f"{k}={v}" for k, v in (spec.get("env") or {}).items()) or None),
        ("env_name", spec.get("env_name")),
        ("injected", " ".join(f"{k}={v}" for k, v in (job.get("environment") or {}).items()) or None),
    ]


def cmd_wait(args: argparse.Namespace) -> int:
    job = _wait(_client(), args.id, timeout=args.timeout, live=not args.json and sys.stderr.isatty())
    print(json.dumps(job, indent=2) if args.json else HEADER + "\n" + _row(job))
    if job["status"] not in ENDED:
        print(f"gpudeck: job {job['id']} is still {job['status']} after {args.timeout:g}s", file=sys.stderr)
        return EXIT_WAIT_TIMEOUT
    return _verdict(job, args.min_accuracy)


def cmd_cancel(args: argparse.Namespace) -> int:
    job = _client().cancel(args.id)
    stopping = " (stopping)" if job["status"] in ("starting", "running") else ""
    print(json.dumps(job, indent=2) if args.json else f"job {job['id']}: {job['status']}{stopping}")
    return EXIT_OK


def cmd_retry(args: argparse.Namespace) -> int:
    job = _client().retry(args.id, resume=not args.fresh)
    resumes = f", from job {args.id}'s last checkpoint" if job.get("resumes") else ""
    print(json.dumps(job, indent=2) if args.json else f"job {args.id} resubmitted as job {job['id']}{resumes}")
    return EXIT_OK


def _age(text: str) -> float:
    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_rm(args: argparse.Namespace) -> int:
    """Delete ended jobs for good: the ones named, or every one of --status that ended before --older-than."""
    client = _client()
    if args.ids and (args.status or args.older_than is not None):
        print("gpudeck rm: name jobs, or choose them with --status/--older-than, not both", file=sys.stderr)
        return EXIT_USAGE
    if not args.ids and not args.status:
        print(
            "gpudeck rm: name the jobs (gpudeck rm 3 4), or --status failed,canceled [--older-than 30d]",
            file=sys.stderr,
        )
        return EXIT_USAGE
    ids = list(args.ids)
    if not ids:
        ended = {"succeeded", "failed", "canceled"}
        wanted = {s.strip() for s in args.status.split(",") if s.strip()}
        if not wanted <= ended:
            print(f"gpudeck rm: --status takes ended statuses ({', '.join(sorted(ended))})", file=sys.stderr)
            return EXIT_USAGE
        cutoff = time.time() - (args.older_than or 0)
        cursor = None
        while True:
            page = client.jobs(limit=500, cursor=cursor, status=",".join(sorted(wanted)))
            for job in page["jobs"]:
                ended_at = datetime.fromisoformat(job["ended_at"].replace("Z", "+00:00")).timestamp()
                if ended_at <= cutoff:
                    ids.append(job["id"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
    if args.dry_run:
        print(f"would delete {len(ids)} job{'s' if len(ids) != 1 else ''}: {' '.join(map(str, ids)) or '-'}")
        return EXIT_OK
    local = threading.local()

    def delete(job_id: int) -> int:  # a client (a requests session) per thread
        if not hasattr(local, "client"):
            local.client = _client()
        return local.client.delete(job_id)["bytes_freed"]

    with ThreadPoolExecutor(RM_THREADS) as pool:  # the API deletes several at once (the jobs' dirs, Redis)
        freed = sum(pool.map(delete, ids))
    print(f"deleted {len(ids)} job{'s' if len(ids) != 1 else ''} ({human(freed)} freed)")
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.file == "show":
        return _sweep_show(args)
    if args.id is not None:
        print(f"gpudeck sweep: unexpected {args.id!r} after the file (sweep FILE, or sweep show ID)", file=sys.stderr)
        return EXIT_USAGE
    try:
        body = json.loads(Path(args.file).read_text())
    except (OSError, ValueError) as exc:
        print(f"gpudeck sweep: cannot read {args.file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sweep = _client().sweep(body)
    print(
        json.dumps(sweep, indent=2)
        if args.json
        else f"sweep {sweep['id']}: jobs {', '.join(str(i) for i in sweep['job_ids'])} "
        f"(gpudeck sweep show {sweep['id']} ranks them)"
    )
    return EXIT_OK


def _sweep_show(args: argparse.Namespace) -> int:
    """`gpudeck sweep show ID`: the sweep's jobs best first, a column per swept field."""
    if args.id is None or not args.id.isdigit():
        print("gpudeck sweep show: give the sweep's id, e.g. gpudeck sweep show 3", file=sys.stderr)
        return EXIT_USAGE
    sweep = _client().request("GET", f"/api/v1/sweeps/{args.id}").json()
    if args.json:
        print(json.dumps(sweep, indent=2))
        return EXIT_OK
    grid = list(sweep["grid"])
    head = ["RANK", "JOB", *(k.rpartition(".")[2].upper() for k in grid), "STATUS"]
    head += ["TEST_ACC", "TEST_LOSS", "LAST_LOSS"]
    rows = [
        [
            str(r["rank"] or "-"),
            str(r["job_id"]),
            *(_fmt(r.get(k)) for k in grid),
            r["status"] + (f" ({r['reason']})" if r.get("reason") else ""),
            *(_fmt(r.get(k)) for k in ("test_accuracy", "test_loss", "last_loss")),
        ]
        for r in sweep["jobs"]
    ]
    widths = [max(len(c) for c in col) for col in zip(head, *rows)]
    print(f"sweep {sweep['id']}: {sweep['ended']} of {sweep['total']} ended")
    for line in (head, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    best = sweep.get("best")
    if best:
        swept = " ".join(f"{k}={_fmt(best.get(k))}" for k in grid)
        print(f"best: job {best['job_id']} ({swept}) test accuracy {_fmt(best['test_accuracy'])}")
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    client = _client()
    folder = None if args.raw else Folder()  # TensorFlow's start-up lines folded into one, unless --raw
    offset, lines = args.offset, []
    if args.tail is not None or not args.follow:  # what is there now (pages of 10,000 lines)
        while True:
            text, nxt = client.logs(args.id, offset)
            if nxt == offset:
                break
            lines += folder.feed(text.splitlines()) if folder else text.splitlines()
            if args.tail is not None:
                lines = lines[-args.tail :] if args.tail else []
            offset = nxt
    for line in lines:
        print(line)
    if args.follow:
        for line in client.follow_logs(args.id, offset):
            for shown in folder.feed([line]) if folder else [line]:
                print(shown, flush=True)
    for line in folder.flush() if folder else []:
        print(line, flush=True)
    return EXIT_OK


def cmd_files(args: argparse.Namespace) -> int:
    listing = _client().files(args.id, args.path or "")
    if args.json:
        print(json.dumps(listing, indent=2))
        return EXIT_OK
    for f in listing["files"]:
        print(f"{human(f['size']):>10}  {f['modified'][:19].replace('T', ' ')}  {f['path']}")
    print(
        f"{len(listing['files'])} files, {human(listing['total_bytes'])}"
        + (" (truncated)" if listing["truncated"] else "")
    )
    return EXIT_OK


def cmd_download(args: argparse.Namespace) -> int:
    """A file of the job dir (default: the exported model.keras), or a folder as NAME.tar.gz; a broken download
    resumes (the bytes so far wait in DEST.part)."""
    client = _client()
    path = (args.path or "model.keras").strip("/")
    files = client.files(args.id, path)["files"]
    folder = not any(f["path"] == path for f in files)
    if folder and not any(f["path"].startswith(path + "/") for f in files):
        print(
            f"gpudeck: job {args.id} has no file or folder {path!r} (gpudeck files {args.id} lists them)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    dest = args.output or (f"{os.path.basename(path)}.tar.gz" if folder else os.path.basename(path))
    live = sys.stderr.isatty()

    def progress(done: int, total: int | None) -> None:
        if live:
            of = f" of {human(total)} ({done * 100 // total}%)" if total else ""
            print(f"\r{dest}: {human(done)}{of}", end="", file=sys.stderr, flush=True)

    size = client.download(args.id, path, dest, archive=folder, progress=progress)
    if live:
        print(file=sys.stderr)
    print(f"{dest}: {human(size)}" + (f" (the folder {path}/ as a .tar.gz)" if folder else ""))
    return EXIT_OK


def cmd_datasets(args: argparse.Namespace) -> int:
    client = _client()
    if args.action == "rm":
        name, sep, version = (args.ref or "").partition(":")
        if not sep or not name or not version or args.file:
            print("gpudeck datasets rm NAME:VERSION (one version; jobs that use it must have ended)", file=sys.stderr)
            return EXIT_USAGE
        gone = client.delete_dataset(name, version)
        print(
            json.dumps(gone, indent=2)
            if args.json
            else f"deleted {name}:{version} ({human(gone['bytes_freed'])} freed)"
        )
        return EXIT_OK
    if args.action == "upload":
        name, sep, version = (args.ref or "").partition(":")
        if not sep or not args.file:
            print("gpudeck datasets upload NAME:VERSION FILE (a tar, tar.gz, tgz or zip archive)", file=sys.stderr)
            return EXIT_USAGE
        if not os.path.isfile(args.file):
            print(f"gpudeck: {args.file}: no such file", file=sys.stderr)
            return EXIT_USAGE
        meta = client.upload_dataset(name, version, args.file)
        print(
            json.dumps(meta, indent=2)
            if args.json
            else f"uploaded {meta['ref']}: {meta['format']}, {meta['files']} files, {human(meta['size_bytes'])}"
        )
        return EXIT_OK
    sets = [client.dataset(args.ref)] if args.ref else client.datasets()["datasets"]
    if args.json:
        print(json.dumps(sets, indent=2))
        return EXIT_OK
    print(f"{'NAME':<20} {'VERSION':<12} {'FORMAT':<20} {'FILES':>7} {'SIZE':>10}  CREATED")
    for ds in sets:
        for v in ds["versions"]:
            latest = " (latest)" if v["version"] == ds["latest"] else ""
            print(
                f"{v['name']:<20} {v['version']:<12} {v['format']:<20} {v['files']:>7} {human(v['size_bytes']):>10}  "
                f"{v['created_at']}{latest}"
            )
    return EXIT_OK


def cmd_tensorboard(args: argparse.Namespace) -> int:
    client = _client()
    if args.stop is not None:
        client.stop_tensorboard(args.stop)
        print(f"stopped the TensorBoard on port {args.stop}")
        return EXIT_OK
    if not args.ids:
        boards = client.tensorboards()["tensorboards"]
        if args.json:
            print(json.dumps(boards, indent=2))
        for b in [] if args.json else boards:
            print(f"{b['url']}  jobs {', '.join(map(str, b['jobs']))}  last used {b['last_used_at']}")
        return EXIT_OK
    board = client.tensorboard(args.ids)
    if args.json:
        print(json.dumps(board, indent=2))
        return EXIT_OK
    print(f"TensorBoard for jobs {', '.join(map(str, board['jobs']))}: {board['url']}")
    print(f"from your machine: {board['ssh_tunnel'].replace(board['host'], f'{getpass.getuser()}@' + board['host'])}")
    print(f"then open http://localhost:{board['port']}/")
    return EXIT_OK


def cmd_tf_config(args: argparse.Namespace) -> int:
    from jobs import tfconfig

    try:
        spec = tfconfig.cluster(
            tfconfig.parse_addresses(args.worker, "worker"),
            chief=tfconfig.parse_addresses(args.chief, "chief")[0] if args.chief else None,
            ps=tfconfig.parse_addresses(args.ps, "ps") if args.ps else None,
            evaluator=tfconfig.parse_addresses(args.evaluator, "evaluator")[0] if args.evaluator else None,
        )
        if args.task:
            kind, _, index = args.task.partition(":")
            if not index.isdigit():
                raise ValueError(f"--task: expected TYPE:INDEX such as worker:0, got {args.task!r}")
            config = json.dumps(tfconfig.tf_config(spec, kind, int(index)), separators=(",", ":"))
            print(f"export TF_CONFIG='{config}'" if args.export else config)
            return EXIT_OK
    except ValueError as exc:
        print(f"gpudeck tf-config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for kind, index, config in tfconfig.every_task(spec):
        print(f"# {kind} {index}\nexport TF_CONFIG='{config}'" if args.export else f"{kind}:{index} {config}")
    return EXIT_OK


def cmd_tui(args: argparse.Namespace) -> int:
    from tui.app import GpudeckApp

    s = settings_from_env()
    GpudeckApp(args.api or s.api_url, args.token or s.token, job=args.job).run()
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpudeck", description="Self-hosted training jobs on GPU machines.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_server_commands(sub, drain_over_api=cmd_drain)  # up, worker: jobs.cli
    add_api_command(sub)  # api: api.serve

    p = sub.add_parser("submit", help="submit a training job")
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--param", action="append", type=_param, metavar="KEY=VALUE", help="a training param")
    p.add_argument("--gpus", type=int, help="GPUs per task (default: 1 when a GPU worker is live, else 0)")
    p.add_argument("--workers", type=int, help="tasks of a multi-worker (TF_CONFIG) job, each on its own worker")
    p.add_argument("--chief", action="store_true", help="task 0 of a multi-worker job runs as a `chief` task")
    p.add_argument("--priority", choices=PRIORITIES)
    p.add_argument("--name")
    p.add_argument("--tag", action="append", help="a tag (repeatable)")
    p.add_argument("--timeout", type=int, help="seconds before the job is stopped")
    p.add_argument("--max-retries", type=int, help="automatic retries after worker_lost (1)")
    p.add_argument("--idempotency-key", help="submitting again with the same key returns the first job (CI)")
    p.add_argument("--wait", action="store_true", help="wait for the job; exit 1 unless it succeeded")
    _min_accuracy(p)
    p.add_argument("--json", action="store_true", help="print the job as JSON")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser(
        "run",
        help="run your own command as a job: pack a folder, upload it, follow the log",
        description="Packs --source (default .) without what .gitignore/.gpudeckignore leave out, uploads it unless "
        "the server holds the same tree, submits the command (the words after --, joined by spaces and run by "
        "/bin/sh on the worker, so quote '$DATA_DIR' to have it expanded there) and follows its log. Exit status: "
        "0 succeeded, 1 failed/canceled/below --min-accuracy, 2 bad input, 3 API unreachable.",
    )
    p.add_argument("--source", default=".", metavar="DIR", help="the folder to send (default: .)")
    p.add_argument("--no-source", action="store_true", help="send no folder (the command needs no files)")
    p.add_argument("--dataset", help="an uploaded NAME[:VERSION] or a server folder: the job's $DATA_DIR")
    p.add_argument("--gpus", type=int, help="GPUs per task (default: 1 when a GPU worker is live, else 0)")
    p.add_argument("--workers", type=int, help="tasks, each with its own TF_CONFIG, on as many workers")
    p.add_argument("--chief", action="store_true", help="task 0 of a multi-worker job runs as a `chief` task")
    p.add_argument("--env", action="append", type=_env_pair, metavar="NAME=VALUE", help="a variable (repeatable)")
    p.add_argument("--env-name", help="a Python environment the operator registered (GPUDECK_ENVS)")
    p.add_argument("--name")
    p.add_argument("--tag", action="append", help="a tag (repeatable)")
    p.add_argument("--timeout", type=int, help="seconds before the job is stopped")
    p.add_argument("--priority", choices=PRIORITIES)
    p.add_argument("--max-retries", type=int, help="automatic retries after worker_lost (1)")
    p.add_argument("--total-steps", type=int, help="the steps your script will log, for progress and ETA")
    _min_accuracy(p)
    p.add_argument("--detach", action="store_true", help="print the job id and return")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("ls", help="list jobs, newest first")
    p.add_argument("--status", help="only these statuses, e.g. running,queued")
    p.add_argument("--model", help="only this model")
    p.add_argument("--tag", help="only jobs with this tag")
    mine = p.add_mutually_exclusive_group()
    mine.add_argument("--mine", action="store_true", help="only your jobs (those of your named token)")
    mine.add_argument("--owner", help="only the jobs of this user (a token's name)")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("whoami", help="who your token says you are: name, role, GPU quota")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_whoami)

    p = sub.add_parser("audit", help="state-changing requests, newest first (admins)")
    p.add_argument("--user", help="only this user's (a token's name)")
    p.add_argument("--since", help="only the last 30m, 12h, 7d, …")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit)

    # Commands that act on one job by id: name, help, handler.
    for name, text, func in (
        ("show", "one job: status, progress, metrics, result", cmd_show),
        ("wait", "wait for a job to end; exit 1 unless it succeeded", cmd_wait),
        ("cancel", "cancel a queued or running job", cmd_cancel),
        ("retry", "submit an ended job again as a new job", cmd_retry),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("id", type=int)
        p.add_argument("--json", action="store_true")
        if name == "retry":
            p.add_argument("--fresh", action="store_true", help="train from the start, not from its last checkpoint")
        if name == "wait":
            _min_accuracy(p)
            p.add_argument(
                "--timeout", type=_natural, metavar="S", help=f"give up after S seconds (exit {EXIT_WAIT_TIMEOUT})"
            )
        p.set_defaults(func=func)

    p = sub.add_parser(
        "sweep",
        help='submit a sweep: a JSON file {"base": spec, "grid": {field: [values]}}; `sweep show ID` ranks one',
    )
    p.add_argument("file", metavar="FILE|show")
    p.add_argument("id", nargs="?", metavar="ID", help="with show: the sweep to rank")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("logs", help="a job's training log")
    p.add_argument("id", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--offset", type=int, default=0, help="skip this many lines")
    p.add_argument("--tail", type=_natural, metavar="N", help="only the last N lines (with -f: then follow)")
    p.add_argument("--raw", action="store_true", help="every line as written (TensorFlow's start-up lines unfolded)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("rm", help="delete ended jobs for good (record, log, metrics, job dir)")
    p.add_argument("ids", nargs="*", type=int, metavar="ID")
    p.add_argument("--status", metavar="S,…", help="every job of these ended statuses, e.g. failed,canceled")
    p.add_argument("--older-than", type=_age, metavar="AGE", help="only those that ended before: 30d, 12h, 2w")
    p.add_argument("--dry-run", action="store_true", help="say which jobs, delete nothing")
    p.set_defaults(func=cmd_rm)

    p = sub.add_parser("files", help="the files of a job's dir: size, time, path")
    p.add_argument("id", type=int)
    p.add_argument("path", nargs="?", help="only paths starting with this, e.g. checkpoints/")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_files)

    p = sub.add_parser("download", help="a file of a job's dir (default: model.keras), or a folder as a .tar.gz")
    p.add_argument("id", type=int)
    p.add_argument("path", nargs="?", help="relative to the job dir (default: model.keras)")
    p.add_argument("-o", "--output", metavar="DEST", help="where to write it (default: its name here)")
    p.set_defaults(func=cmd_download)

    p = sub.add_parser(
        "datasets",
        help="list uploaded datasets, upload one (datasets upload NAME:VERSION FILE), delete one (datasets rm "
        "NAME:VERSION)",
    )
    p.add_argument("action", nargs="?", choices=("ls", "upload", "rm"), default="ls")
    p.add_argument("ref", nargs="?", help="NAME (ls) or NAME:VERSION (upload, rm)")
    p.add_argument("file", nargs="?", help="archive to upload: tar, tar.gz, tgz or zip")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("tensorboard", help="start (or reuse) a TensorBoard over jobs and print how to open it")
    p.add_argument("ids", type=int, nargs="*", metavar="ID", help="job ids (none: list running TensorBoards)")
    p.add_argument("--stop", type=int, metavar="PORT", help="stop the TensorBoard on PORT")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_tensorboard)

    p = sub.add_parser("tf-config", help="print TF_CONFIG for a cluster, for tasks started by hand")
    p.add_argument("--worker", required=True, metavar="H:P,…", help="worker addresses, in task order")
    p.add_argument("--chief", metavar="H:P", help="a separate chief task (Kibernetika's tf_conf --chief_name)")
    p.add_argument("--ps", metavar="H:P,…", help="parameter-server addresses")
    p.add_argument("--evaluator", metavar="H:P", help="an evaluator task")
    p.add_argument("--task", metavar="TYPE:INDEX", help="print only this task's TF_CONFIG, e.g. worker:1")
    p.add_argument("--export", action="store_true", help="as shell `export TF_CONFIG=...` lines")
    p.set_defaults(func=cmd_tf_config)

    p = sub.add_parser("tui", help="the terminal UI: jobs, logs, curves, GPUs, TensorBoard")
    p.add_argument("job", nargs="?", type=int, metavar="JOB", help="open this job's screen first (esc: the jobs)")
    p.add_argument("--api", help=f"API URL (default $GPUDECK_API or {DEFAULT_API})")
    p.add_argument("--token", help="bearer token (default $GPUDECK_TOKEN)")
    p.set_defaults(func=cmd_tui)
    return parser


def _min_accuracy(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--min-accuracy",
        type=float,
        metavar="X",
        help="exit 1 unless the final test accuracy is at least X (a CI gate; implies --wait)",
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gpudeck` console script."""
    from jobs.errors import GpudeckError
    from tui.client import ApiError, Unreachable

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ApiError as exc:
        print(f"gpudeck: {exc.message}", file=sys.stderr)
        for field, problem in (exc.details.get("fields") or {}).items():
            if f"{field}: {problem}" not in exc.message:  # each problem once
                print(f"  {field}: {problem}", file=sys.stderr)
        return EXIT_USAGE if exc.status < 500 else EXIT_JOB_FAILED
    except Unreachable as exc:
        print(f"gpudeck: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except GpudeckError as exc:
        print(f"gpudeck: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
