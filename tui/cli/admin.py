"""Client commands about who and where: whoami, audit, tf-config, tui."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from models.common import EXIT_OK, EXIT_USAGE
from models.sourcetree import human
from tui.cli.base import client, connection_options, echo_json, json_option, print_table, settings
from tui.widgets.fmt import (
    PROJECT_COLUMNS,
    SHARE_COLUMNS,
    cordon_cause,
    duration,
    gpu_amount,
    one_line,
    project_rows,
    share_rows,
    share_rule,
)


@click.command()
@connection_options
@json_option
def whoami(as_json) -> int:
    """Who your token says you are: name, role, GPU quota."""
    me = client().whoami()
    if as_json:
        echo_json(me)
    elif me["auth"] == "none":
        click.echo("nobody: this gpudeck asks for no token (anyone who reaches it may do anything)")
    else:
        name = me["name"] or "a GPUDECK_TOKENS token (no name)"
        n = me.get("max_gpus")
        limits = [f"at most {n} GPU{'' if n == 1 else 's'} at once" if n is not None else None]
        limits.append("no command jobs" if me.get("commands") is False else None)
        click.echo(f"{name}, {me['role']}" + "".join(f"; {x}" for x in limits if x))
    return EXIT_OK


@click.command()
@connection_options
@click.option("--user", help="only this user's (a token's name)")
@click.option("--since", help="only the last 30m, 12h, 7d, …")
@click.option("--limit", type=int, default=50, show_default=True, help="the newest this many")
@json_option
def audit(user, since, limit, as_json) -> int:
    """State-changing requests, newest first (admins)."""
    entries = client().audit(user=user, since=since, limit=limit)["entries"]
    if as_json:
        echo_json(entries)
        return EXIT_OK
    rows = [
        (
            e["time"][:19].replace("T", " "),
            one_line(e["user"], 14),
            e.get("address", ""),
            e["status"] or "-",
            f"{e['method']} {e['path']}" + (f" ({e['detail']})" if e.get("detail") else ""),
        )
        for e in entries
    ]
    print_table(("TIME", "USER", "ADDRESS", "STATUS", "REQUEST"), rows, right=[3])
    return EXIT_OK


@click.command(name="tf-config")
@click.option("--worker", required=True, metavar="H:P,…", help="worker addresses, in task order")
@click.option("--chief", metavar="H:P", help="a separate chief task (Kibernetika's tf_conf --chief_name)")
@click.option("--ps", metavar="H:P,…", help="parameter-server addresses")
@click.option("--evaluator", metavar="H:P", help="an evaluator task")
@click.option("--task", metavar="TYPE:INDEX", help="print only this task's TF_CONFIG, e.g. worker:1")
@click.option("--export", is_flag=True, help="as shell `export TF_CONFIG=...` lines")
def tf_config(worker, chief, ps, evaluator, task, export) -> int:
    """Print TF_CONFIG for a cluster, for tasks started by hand."""
    from models import tfconfig

    try:
        spec = tfconfig.cluster(
            tfconfig.parse_addresses(worker, "worker"),
            chief=tfconfig.parse_addresses(chief, "chief")[0] if chief else None,
            ps=tfconfig.parse_addresses(ps, "ps") if ps else None,
            evaluator=tfconfig.parse_addresses(evaluator, "evaluator")[0] if evaluator else None,
        )
        if task:
            kind, _, index = task.partition(":")
            if not index.isdigit():
                raise ValueError(f"--task: expected TYPE:INDEX such as worker:0, got {task!r}")
            config = json.dumps(tfconfig.tf_config(spec, kind, int(index)), separators=(",", ":"))
            click.echo(f"export TF_CONFIG='{config}'" if export else config)
            return EXIT_OK
    except ValueError as exc:
        click.echo(f"gpudeck tf-config: {exc}", err=True)
        return EXIT_USAGE
    for kind, index, config in tfconfig.every_task(spec):
        click.echo(f"# {kind} {index}\nexport TF_CONFIG='{config}'" if export else f"{kind}:{index} {config}")
    return EXIT_OK


@click.command()
@connection_options
@click.argument("job", type=int, required=False, metavar="[JOB]")
def tui(job) -> int:
    """The terminal UI: jobs, logs, curves, GPUs, TensorBoard.

    JOB: open this job's screen first (esc: the jobs)."""
    from tui.app import GpudeckApp

    s = settings()
    GpudeckApp(s.api_url, s.token, job=job).run()
    return EXIT_OK


@click.command()
@connection_options
@click.argument("name")
@json_option
def drain(name, as_json) -> int:
    """Ask worker NAME (gpudeck workers, or GET /api/v1/workers) to finish its job, take no new one and exit
    (admins only, where there are tokens); `gpudeck up` does not restart it."""
    answer = client().drain(name)
    echo_json(answer) if as_json else click.echo(f"worker {answer['worker']}: draining")
    return EXIT_OK


@click.group()
def gpu() -> None:
    """GPUs: list them with who holds each, cordon one by hand, put one back in service."""


GPU_COLUMNS = ("HOST", "GPU", "NAME", "MEMORY", "UTIL", "HELD BY", "STATE")


def gpu_rows(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """`GET /api/v1/gpus` as rows of GPU_COLUMNS: every holder of a GPU (a job holding it whole, or each share
    with its part) and every process not gpudeck's, whatever the width (issue 64: HELD BY was cut)."""
    rows = []
    for host in doc["hosts"]:
        for g in host.get("gpus", []):
            used, total = g.get("memory_used_mib"), g.get("memory_total_mib")
            memory = f"{human((used or 0) * 2**20)}/{human(total * 2**20)}" if total else "-"
            util = g.get("utilization")
            holders = [
                f"job {h['job_id']}" + (f" ({h['owner']})" if h.get("owner") else "")
                + (f" {gpu_amount(h['part'])}" if h.get("part") not in (None, 1, 1.0) else "")
                for h in g.get("holders") or []
            ]  # fmt: skip
            foreign = [p for p in g.get("processes") or [] if p.get("job_id") is None and not p.get("left_by")]
            holders += [f"pid {p['pid']}" + (f" ({p['user']})" if p.get("user") else "") for p in foreign]
            cordon = g.get("cordoned")
            state = f"cordoned ({cordon_cause(cordon)})" if cordon else ("busy" if holders else "free")
            util_text = f"{util}%" if isinstance(util, (int, float)) else "-"
            rows.append(
                (
                    host["host"],
                    g.get("index"),
                    g.get("name") or "-",
                    memory,
                    util_text,
                    ", ".join(holders) or "-",
                    state,
                )
            )
    return rows


@gpu.command("ls")
@connection_options
@json_option
def gpu_ls(as_json) -> int:
    """Every GPU of the live hosts: memory, utilization, who holds it (jobs, their shares, processes not
    gpudeck's), and whether it is cordoned."""
    doc = client().gpus()
    if as_json:
        echo_json(doc)
    elif not any(h.get("gpus") for h in doc["hosts"]):
        click.echo("no GPU: no worker's host reports one (no nvidia-smi there)")
    else:
        print_table(GPU_COLUMNS, gpu_rows(doc), right=[1])
    return EXIT_OK


def _host_gpu(command: str, where: str) -> tuple[str, str] | None:
    host, sep, index = where.rpartition(":")
    if not sep or not host or not index:
        click.echo(
            f"gpudeck gpu {command}: HOST:GPU: write the host and the GPU index, e.g. node1:0; got {where!r}", err=True
        )
        return None
    return host, index


@gpu.command()
@connection_options
@click.argument("where", metavar="HOST:GPU")
@click.option("--reason", help="why, for the others (shown wherever the GPU is)")
@json_option
def cordon(where, reason, as_json) -> int:
    """Take GPU HOST:GPU out of service by hand (admins only, where there are tokens): no job is placed on it until
    `gpudeck gpu uncordon`; what runs there runs on."""
    found = _host_gpu("cordon", where)
    if found is None:
        return EXIT_USAGE
    answer = client().cordon(*found, reason)
    if as_json:
        echo_json(answer)
    else:
        click.echo(f"GPU {found[1]} of {found[0]}: cordoned ({cordon_cause(answer['cordoned'])})")
    return EXIT_OK


@gpu.command()
@connection_options
@click.argument("where", metavar="HOST:GPU")
@json_option
def uncordon(where, as_json) -> int:
    """Put GPU HOST:GPU (gpudeck's GPUs screen, or GET /api/v1/gpus) back in service after a hardware error cordoned
    it (admins only, where there are tokens)."""
    found = _host_gpu("uncordon", where)
    if found is None:
        return EXIT_USAGE
    host, index = found
    answer = client().uncordon(host, index)
    if as_json:
        echo_json(answer)
    else:
        was = answer.get("was") or {}
        click.echo(f"GPU {index} of {host}: back in service" + (f" (cordoned: {cordon_cause(was)})" if was else ""))
    return EXIT_OK


USAGE_COLUMNS = ("PERIOD", "WHO", "JOBS", "SUCCEEDED", "FAILED", "CANCELED", "GPU-H", "IDLE-GPU-H", "WAIT P50",
                 "WAIT P95")  # fmt: skip


def usage_rows(doc: dict[str, Any]) -> list[list[str]]:
    def wait(s: float | None) -> str:
        return "-" if s is None else duration(s)

    return [
        [r["period"], r.get("owner", r.get("project")) or "-", str(r["jobs"]), *(str(r["by_state"].get(s, 0)) for s in
         ("succeeded", "failed", "canceled")), f"{r['gpu_hours']:.2f}", f"{r['idle_gpu_hours']:.2f}",
         wait(r["wait_p50_s"]), wait(r["wait_p95_s"])]
        for r in [*doc["rows"], {**doc["total"], "period": "total"}]
    ]  # fmt: skip


@click.command()
@connection_options
@click.option("--since", help="from: a date (2026-11-01, UTC), a date-time with its zone, or an age (30d; default)")
@click.option("--until", help="to (not included): the same; default now")
@click.option(
    "--by", type=click.Choice(["user", "project", "none"]), default="user", show_default=True, help="a row per owner"
)
@click.option(
    "--period",
    type=click.Choice(["day", "week", "month", "all"]),
    default="all",
    show_default=True,
    help="a row per day, week or month (each named by its first day, UTC), or one for the range",
)
@click.option("--csv", "as_csv", is_flag=True, help="print CSV (a spreadsheet's)")
@json_option
def usage(since, until, by, period, as_csv, as_json) -> int:
    """The accounts, like Slurm's sreport: GPU-hours (a share counts its part), idle GPU-hours, jobs by end state
    and queue waits of the jobs that ended in the range — deleted ones too — per owner and period."""
    doc = client().usage(since=since, until=until, by=by, period=period)
    if as_json:
        echo_json(doc)
        return EXIT_OK
    rows = usage_rows(doc)
    if as_csv:
        import csv
        import sys

        out = csv.writer(sys.stdout, lineterminator="\n")
        who = {"user": "owner", "project": "project"}.get(doc["by"], "-")
        out.writerow([who if c == "WHO" else c.lower().replace(" ", "_").replace("-", "_") for c in USAGE_COLUMNS])
        out.writerows(rows[:-1])
        return EXIT_OK
    who = {"user": "OWNER", "project": "PROJECT"}.get(doc["by"], "-")
    print_table([who if c == "WHO" else c for c in USAGE_COLUMNS], rows, right=range(2, 10))
    said = f"(jobs that ended from {doc['since']} to {doc['until']}; a job's GPU time counts where it ended)"
    click.echo(said, err=True)
    return EXIT_OK


@click.command()
@connection_options
@json_option
def share(as_json) -> int:
    """Fair share per person, like Slurm's sshare: decayed GPU-hours used, share, GPUs held, running, queued."""
    doc = client().share()
    if as_json:
        echo_json(doc)
        return EXIT_OK
    if doc.get("projects"):  # (projects first, as the scheduler orders them: then the people)
        print_table(PROJECT_COLUMNS, project_rows(doc), right=[1, 2, 3, 4, 5, 6])
        click.echo("")
    print_table(SHARE_COLUMNS, share_rows(doc), right=[1, 2, 3, 4, 5, 6])
    click.echo(f"({share_rule(doc)})", err=True)
    return EXIT_OK


@click.command()
@connection_options
@json_option
def envs(as_json) -> int:
    """The projects' Python environments built on the API's host: size, when last used, by which jobs."""
    listed = client().request("GET", "/api/v1/envs").json()["envs"]
    if as_json:
        echo_json(listed)
        return EXIT_OK
    now = time.time()
    rows = [
        (
            e["digest"][:12],
            e["kind"],
            e["packages"],
            human(e["size_bytes"]),
            f"{duration(now - e['last_used'])} ago" if e.get("last_used") else "-",
            ", ".join(str(j) for j in e["jobs"][-5:]) or "-",
        )
        for e in listed
    ]
    print_table(("ENV", "FROM", "PACKAGES", "SIZE", "LAST USED", "JOBS"), rows, right=[2, 3])
    return EXIT_OK


COMMANDS = (drain, whoami, audit, tf_config, share, usage, tui, envs, gpu)
