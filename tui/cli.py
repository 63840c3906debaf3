"""`gpudeck`: start the stack (`up`, `api`, `worker`) or talk to it over HTTP (`submit`, `ls`, ...)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
ENDED = ("succeeded", "failed", "canceled")


def _settings(home: Path | None = None):
    from jobs.settings import Settings

    env = dict(os.environ)
    if home is not None:
        env["GPUDECK_HOME"] = str(home)
    return Settings.from_env(env)


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


# -- server commands ---------------------------------------------------------------------------
def cmd_up(args: argparse.Namespace) -> int:
    from jobs.supervisor import up

    _setup_logging()
    gpus = None if args.gpus is None else [g for g in args.gpus.split(",") if g != ""]
    return up(_settings(args.home), host=args.host, port=args.port, gpus=gpus, cpu_workers=args.cpu_workers)


def cmd_api(args: argparse.Namespace) -> int:
    from api.serve import serve

    _setup_logging()
    serve(_settings(), host=args.host, port=args.port, workers=args.workers)
    return EXIT_OK


def _bytes(text: str) -> int:
    from jobs.settings import parse_size

    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size like 8G or 512M, got {text!r}") from None


def cmd_worker(args: argparse.Namespace) -> int:
    if args.drain:
        print(json.dumps(_client().drain(args.drain)))
        return EXIT_OK
    if not args.cpu and not args.gpus:
        print("gpudeck worker: give --gpus LIST or --cpu (or --drain NAME)", file=sys.stderr)
        return EXIT_USAGE
    from jobs import worker

    _setup_logging()
    gpus = [] if args.cpu else [g.strip() for g in args.gpus.split(",") if g.strip()]
    worker.run(
        _settings(), gpus, name=args.name, burst=args.burst, stop_grace_s=args.stop_grace, max_memory=args.max_memory
    )
    return EXIT_OK


# -- client commands ---------------------------------------------------------------------------
def _client():
    from tui.client import Client

    s = _settings()
    return Client(s.api_url, s.token)


def _param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param takes key=value, got {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def _row(job: dict[str, Any]) -> str:
    p = job.get("progress") or {}
    prog = f"{p['step']}/{p['total_steps']}" if p.get("total_steps") else "-"
    loss = (job.get("metrics") or {}).get("loss")
    acc = (job.get("result") or {}).get("test_accuracy")
    return (
        f"{job['id']:>5}  {job['status']:<10} {str(job.get('name'))[:20]:<20} {job['spec']['model']:<14} "
        f"{prog:>11}  {'-' if loss is None else f'{loss:.4f}':>8}  {'-' if acc is None else f'{acc:.4f}':>8}"
    )


HEADER = f"{'ID':>5}  {'STATUS':<10} {'NAME':<20} {'MODEL':<14} {'PROGRESS':>11}  {'LOSS':>8}  {'TEST ACC':>8}"


def _wait(client, job_id: int) -> dict[str, Any]:
    while True:
        job = client.wait(job_id, timeout=60)
        if job["status"] in ENDED:
            return job


def cmd_submit(args: argparse.Namespace) -> int:
    spec: dict[str, Any] = {"model": args.model, "dataset": args.dataset, "params": dict(args.param or [])}
    for key in ("gpus", "priority", "name"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    client = _client()
    job = client.submit(spec)
    if not args.wait:
        print(json.dumps(job, indent=2) if args.json else f"submitted job {job['id']} ({job['status']})")
        return EXIT_OK
    job = _wait(client, job["id"])
    print(json.dumps(job, indent=2) if args.json else _row(job))
    return EXIT_OK if job["status"] == "succeeded" else EXIT_JOB_FAILED


def cmd_ls(args: argparse.Namespace) -> int:
    page = _client().jobs(limit=args.limit)
    if args.json:
        print(json.dumps(page, indent=2))
    else:
        print(HEADER)
        for job in page["jobs"]:
            print(_row(job))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    print(json.dumps(_client().job(args.id), indent=2))
    return EXIT_OK


def cmd_wait(args: argparse.Namespace) -> int:
    job = _wait(_client(), args.id)
    print(json.dumps(job, indent=2) if args.json else _row(job))
    return EXIT_OK if job["status"] == "succeeded" else EXIT_JOB_FAILED


def cmd_cancel(args: argparse.Namespace) -> int:
    job = _client().cancel(args.id)
    print(f"job {job['id']}: {job['status']}" + (" (stopping)" if job["status"] in ("starting", "running") else ""))
    return EXIT_OK


def cmd_retry(args: argparse.Namespace) -> int:
    job = _client().retry(args.id)
    print(f"job {args.id} resubmitted as job {job['id']}")
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    try:
        body = json.loads(Path(args.file).read_text())
    except (OSError, ValueError) as exc:
        print(f"gpudeck sweep: cannot read {args.file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sweep = _client().sweep(body)
    print(
        json.dumps(sweep, indent=2)
        if args.json
        else f"sweep {sweep['id']}: jobs {', '.join(str(i) for i in sweep['job_ids'])}"
    )
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    client = _client()
    offset = 0
    while True:
        text, offset = client.logs(args.id, offset)
        sys.stdout.write(text)
        sys.stdout.flush()
        if not args.follow:
            return EXIT_OK
        if not text:
            if client.job(args.id)["status"] in ENDED:
                text, offset = client.logs(args.id, offset)
                sys.stdout.write(text)
                return EXIT_OK
            time.sleep(1.0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpudeck", description="Self-hosted training jobs on GPU machines.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("up", help="start Redis, the API and one worker per GPU; Ctrl-C stops all")
    p.add_argument("--host", default="127.0.0.1", help="address the API binds (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8686, help="API port (default 8686)")
    p.add_argument("--home", type=Path, help="data root (default $GPUDECK_HOME or ~/.local/share/gpudeck)")
    p.add_argument("--gpus", help="GPU indices to start workers for, e.g. 0,1 (default: nvidia-smi -L)")
    p.add_argument("--cpu-workers", type=int, help="CPU workers (default: 1 when there is no GPU)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("api", help="serve the REST API (gunicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8686)
    p.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    p.set_defaults(func=cmd_api)

    p = sub.add_parser("worker", help="run one worker pinned to GPUs (or the CPU), or drain one")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpus", help="GPU indices this worker owns, e.g. 0 or 2,3")
    g.add_argument("--cpu", action="store_true", help="a CPU-only worker")
    g.add_argument(
        "--drain", metavar="NAME", help="ask worker NAME (see GET /api/v1/workers) to finish its job and exit"
    )
    p.add_argument("--name", help="worker name (default host.gpuN.pid)")
    p.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    p.add_argument("--stop-grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL on cancel (30)")
    p.add_argument("--max-memory", type=_bytes, help="cap each trainer's memory (RLIMIT_DATA), e.g. 16G")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("submit", help="submit a training job")
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--param", action="append", type=_param, metavar="KEY=VALUE", help="a training param")
    p.add_argument("--gpus", type=int)
    p.add_argument("--priority", choices=("high", "normal", "low"))
    p.add_argument("--name")
    p.add_argument("--wait", action="store_true", help="wait for the job; exit 1 unless it succeeded")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("ls", help="list jobs, newest first")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ls)

    # Commands that act on one job by id: name, help, handler, whether --json applies.
    for name, text, func, has_json in (
        ("show", "one job as JSON", cmd_show, False),
        ("wait", "wait for a job to end; exit 1 unless it succeeded", cmd_wait, True),
        ("cancel", "cancel a queued or running job", cmd_cancel, False),
        ("retry", "submit an ended job again as a new job", cmd_retry, False),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("id", type=int)
        if has_json:
            p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)

    p = sub.add_parser("sweep", help='submit a sweep: a JSON file {"base": spec, "grid": {field: [values]}}')
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("logs", help="a job's training log")
    p.add_argument("id", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.set_defaults(func=cmd_logs)
    return parser


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
