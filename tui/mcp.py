"""`gpudeck mcp`: gpudeck for agents, over the Model Context Protocol (the official `mcp` SDK's MCPServer).

It is a client of the REST API, as `gpudeck` is (tui.client, with the --api and --token the CLI uses): every tool
is one or a few API requests, so the token's owner, admin rights, command rights, quotas and `max_priority` hold
exactly as over HTTP (the API decides; its messages come back as the tool's error), and secrets stay masked as
the API masks them. It never reaches Redis or the engine.

Tools read unless the server was started with `--allow-writes`: then it also offers submit (a job, a sweep or
search), cancel, priority, move and delete, each with `dry_run` (a job's: the API's `?dry_run=true`, what the job
would be, when it would start, its GPU-hours; the others: what would change, read from the job as it is now).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import types as mcp_types
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ResourceUpdated

from tui.client import ApiError, Client, Unreachable

INSTRUCTIONS = (
    "gpudeck runs training jobs on GPU machines. Read jobs with list_jobs and show_job, their logs with job_logs and "
    "their curves with job_metrics; triage_job says why a job failed and what to try. Writes (submit_job, "
    "submit_sweep, cancel_job, set_priority, move_job, delete_job) exist only when the server allows them; use "
    "dry_run=true first."
)
ERROR_LINE = re.compile(
    r"(Traceback|Error|error:|ERROR|Exception|Killed|No space left|out of memory|OOM|\bnan\b|Xid)", re.IGNORECASE
)
READ_ONLY = {"readOnlyHint": True, "openWorldHint": False}
WRITE = {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": False}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False}
WATCH_EVERY_S = 1.0
"""How often the server looks at the running jobs' logs and curves for the agents that subscribed to them."""
WATCHED = 20
"""At most this many running jobs (the newest) are watched for subscribers."""


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """An API call; its refusal as the tool's error, in the API's words."""
    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        details = f" {json.dumps(exc.details)}" if exc.details else ""
        raise ToolError(f"{exc}{details}") from None
    except Unreachable as exc:
        raise ToolError(f"the gpudeck API is unreachable: {exc}") from None


def summary(job: dict[str, Any]) -> dict[str, Any]:
    """A job as a list shows it: what an agent scans."""
    spec = job.get("spec") or {}
    return {
        "id": job["id"],
        "name": job.get("name"),
        "owner": job.get("owner"),
        "status": job["status"],
        "reason": job.get("reason"),
        "what": spec.get("model") or spec.get("command") or spec.get("kind"),
        "gpus": spec.get("gpus"),
        "progress": (job.get("progress") or {}).get("fraction"),
        "test_accuracy": (job.get("result") or {}).get("test_accuracy"),
        "warning": job.get("warning"),
        "created_at": job.get("created_at"),
    }


def metric_summary(metrics: dict[str, Any]) -> dict[str, Any]:
    """Each series (train, validation) and each of its values: how many points, first, last, min, max, at which
    steps."""
    out: dict[str, Any] = {}
    for series, points in metrics.items():
        if not isinstance(points, list) or not points:
            continue
        names = sorted({k for p in points for k, v in p.items() if isinstance(v, (int, float)) and k != "step"})
        out[series] = {"points": len(points), "steps": [points[0].get("step"), points[-1].get("step")]}
        for name in names:
            values = [(p.get("step"), p[name]) for p in points if isinstance(p.get(name), (int, float))]
            if name in ("time", "epoch") or not values:
                continue
            low, high = min(values, key=lambda sv: sv[1]), max(values, key=lambda sv: sv[1])
            out[series][name] = {
                "first": values[0][1],
                "last": values[-1][1],
                "min": low[1],
                "min_step": low[0],
                "max": high[1],
                "max_step": high[0],
            }
    return out


def advice(job: dict[str, Any]) -> list[str]:
    """What to try next, from the job's own facts (its reason, its spec, its record)."""
    spec, reason = job.get("spec") or {}, job.get("reason")
    params = spec.get("params") or {}
    out = []
    if reason == "oom":
        batch = params.get("batch_size")
        out.append(
            f"it ran out of memory: halve params.batch_size ({batch} -> {batch // 2})"
            if isinstance(batch, int) and batch > 1
            else "it ran out of memory: a smaller batch or model, or a worker with more memory (--max-memory)"
        )
    elif reason == "gpu_memory_exceeded":
        peak = (job.get("gpu_memory_exceeded") or {}).get("peak")
        out.append(f"it used more GPU memory than its gpu_memory ({spec.get('gpu_memory')}): raise it above {peak}")
    elif reason == "diverged" or (job.get("warning") and "lr" in str(job.get("warning"))):
        lr = params.get("lr")
        out.append(
            f"the loss diverged: lower params.lr ({lr} -> {lr / 10:g}) and retry from its last good checkpoint"
            if isinstance(lr, (int, float))
            else "the loss diverged: lower the learning rate"
        )
    elif reason == "timeout":
        out.append(f"it ran past its timeout ({spec.get('timeout')} s): raise timeout, or retry: it resumes")
    elif reason in ("worker_lost", "gpu_error"):
        out.append("an infrastructure failure, not the job's: retry it (a zoo job resumes from its checkpoint)")
    elif reason == "exit_nonzero":
        out.append("its process failed: read the error lines below, fix the code or its input, then resubmit")
    elif reason == "bad_input":
        out.append(f"its input was refused: {job.get('message')}")
    elif reason == "disk_full":
        out.append("the disk under the job dir is full: delete old jobs (delete_job) or free space, then retry")
    elif reason == "environment":
        out.append("its project environment could not be built: fix its requirements (see the log)")
    elif reason == "dependency_failed":
        out.append(f"a job it depends on did not succeed: {job.get('message')}")
    if job.get("status") == "queued":
        out.append(
            f"it is waiting: {job.get('message') or 'for free GPUs'}; expected start {job.get('expected_start')}"
        )
    return out


def triage(api: Client, job_id: int, lines: int = 200) -> dict[str, Any]:
    """Why a job is where it is: state, reason, message, the log lines around its error, the GPU it held, advice."""
    job = _call(api.job, job_id)
    text, _ = _call(api.logs, job_id)
    tail = text.splitlines()[-lines:]
    hits = [i for i, line in enumerate(tail) if ERROR_LINE.search(line)]
    around: list[str] = []
    if hits:
        first = hits[-1]
        around = tail[max(0, first - 5) : first + 6]
    return {
        "id": job["id"],
        "status": job["status"],
        "reason": job.get("reason"),
        "message": job.get("message"),
        "warning": job.get("warning"),
        "worker": job.get("worker"),
        "gpu_ids": job.get("gpu_ids"),
        "attempt": job.get("attempt"),
        "error_lines": around,
        "log_tail": tail[-10:],
        "next": advice(job),
    }


class Watch:
    """What subscribers of `gpudeck://jobs/ID/log` and `…/metrics` are told: every WATCH_EVERY_S, each running job's
    log length and last metric step (its own API client, on a thread), a ResourceUpdated for each that changed, and
    for both once more when the job ends."""

    def __init__(self, api: Client, bus: InMemorySubscriptionBus, legacy: dict[str, set[Any]] | None = None) -> None:
        self.api = Client(api.base_url, timeout=api.timeout)
        self.api.session.headers.update(api.session.headers)
        self.bus = bus
        self.legacy = legacy if legacy is not None else {}
        """uri -> the sessions of clients of the 2025 protocol that asked `resources/subscribe` for it."""
        self.seen: dict[int, tuple[int, Any]] = {}

    def look(self) -> list[str]:
        """The URIs that changed since the last look."""
        page = self.api.jobs(limit=WATCHED, status="starting,running")
        changed, now = [], {}
        for job in page["jobs"]:
            _, offset = self.api.logs(job["id"], self.seen.get(job["id"], (0, None))[0])
            step = (job.get("metrics") or {}).get("step")
            now[job["id"]] = (offset, step)
        for job_id in set(now) | set(self.seen):
            before, after = self.seen.get(job_id), now.get(job_id)
            if after is None or before is None or before[0] != after[0]:
                changed.append(f"gpudeck://jobs/{job_id}/log")
            if after is None or before is None or before[1] != after[1]:
                changed.append(f"gpudeck://jobs/{job_id}/metrics")
        self.seen = now
        return changed

    async def run(self) -> None:
        while True:
            try:
                for uri in await anyio.to_thread.run_sync(self.look):
                    await self.bus.publish(ResourceUpdated(uri=uri))
                    for session in list(self.legacy.get(uri, ())):
                        try:  # (a 2025 client: told on its own session, as that protocol says)
                            await session.send_resource_updated(uri)
                        except Exception:  # noqa: BLE001 (gone: forgotten)
                            self.legacy[uri].discard(session)
            except (ApiError, Unreachable):
                pass  # (the next look tries again)
            await anyio.sleep(WATCH_EVERY_S)


def server(api: Client, allow_writes: bool = False) -> MCPServer:
    """The MCP server over `api` (writes only where `allow_writes`)."""
    bus = InMemorySubscriptionBus()
    legacy: dict[str, set[Any]] = {}

    @asynccontextmanager
    async def watching(_: Any) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(Watch(api, bus, legacy).run)
            yield {}
            tasks.cancel_scope.cancel()

    from tui.cli import version

    mcp = MCPServer(  # (its version gpudeck's: issue 67 #5 found "")
        "gpudeck", version=version(), instructions=INSTRUCTIONS, subscriptions=bus, lifespan=watching
    )

    # The 2025-11-25 protocol's resources/subscribe (and unsubscribe), beside 2026's subscriptions/listen: a client of
    # that protocol is told on its session as the resource changes (issue 67 #5: `Method not found`)
    async def subscribe(ctx: Any, params: mcp_types.SubscribeRequestParams) -> mcp_types.EmptyResult:
        legacy.setdefault(str(params.uri), set()).add(ctx.session)
        return mcp_types.EmptyResult()

    async def unsubscribe(ctx: Any, params: mcp_types.UnsubscribeRequestParams) -> mcp_types.EmptyResult:
        legacy.get(str(params.uri), set()).discard(ctx.session)
        return mcp_types.EmptyResult()

    mcp._lowlevel_server.add_request_handler("resources/subscribe", mcp_types.SubscribeRequestParams, subscribe)
    mcp._lowlevel_server.add_request_handler("resources/unsubscribe", mcp_types.UnsubscribeRequestParams, unsubscribe)

    @mcp.tool(annotations=READ_ONLY)
    def list_jobs(
        status: str | None = None, owner: str | None = None, model: str | None = None, limit: int = 50
    ) -> dict[str, Any]:
        """Jobs, newest first: status (comma-separated: queued,running,failed…), owner (`me`), model; each with
        its state, reason, progress and accuracy."""
        page = _call(api.jobs, limit=max(1, min(limit, 500)), status=status, owner=owner, model=model)
        return {"jobs": [summary(j) for j in page["jobs"]], "total": page.get("total")}

    @mcp.tool(annotations=READ_ONLY)
    def show_job(job_id: int) -> dict[str, Any]:
        """One job as the API shows it: spec, state, reason, message, progress, metrics, result, usage."""
        return _call(api.job, job_id)

    @mcp.tool(annotations=READ_ONLY)
    def wait_job(job_id: int, timeout: int = 60) -> dict[str, Any]:
        """Wait up to `timeout` seconds (at most 3600) for a job to end; the job as it is then."""
        return summary(_call(api.wait, job_id, max(1, min(timeout, 3600))))

    @mcp.tool(annotations=READ_ONLY)
    def job_logs(job_id: int, tail: int = 100, offset: int | None = None, search: str | None = None) -> dict[str, Any]:
        """A job's log: its last `tail` lines, or from line `offset`; `search`: only the lines holding that text."""
        text, next_offset = _call(api.logs, job_id, offset or 0)
        lines = text.splitlines()
        if search:
            lines = [line for line in lines if search.lower() in line.lower()]
        if offset is None:
            lines = lines[-max(1, tail) :]
        return {"lines": lines, "next_offset": next_offset}

    @mcp.tool(annotations=READ_ONLY)
    def job_metrics(job_id: int, raw: bool = False) -> dict[str, Any]:
        """A job's curves: per series (train, validation) each value's first, last, min and max and where; `raw`:
        every point."""
        metrics = _call(api.metrics, job_id)
        return metrics if raw else metric_summary(metrics)

    @mcp.tool(annotations=READ_ONLY)
    def compare_jobs(job_ids: list[int], metric: str | None = None, raw: bool = False) -> dict[str, Any]:
        """Two to 20 runs side by side: the configuration fields that differ (with each job's value), their results
        with each column's best job, the metrics they report, and `metric`'s curve of each (default loss): first,
        last and lowest value; `raw`: every point."""
        doc = _call(api.compare, job_ids, metric)
        if not raw:
            doc["curves"] = [
                {"job_id": c["job_id"], "run": c["run"], "points": len(c["points"]), "first": c["points"][0][1],
                 "last": c["points"][-1][1], "min": min(y for _, y in c["points"])}
                for c in doc["curves"]
            ]  # fmt: skip
        return doc

    @mcp.tool(annotations=READ_ONLY)
    def triage_job(job_id: int) -> dict[str, Any]:
        """Why a job failed (or waits): its state and reason, the log lines around its error, the GPU it held, and
        what to try next, from its own facts."""
        return triage(api, job_id)

    @mcp.tool(annotations=READ_ONLY)
    def list_gpus() -> dict[str, Any]:
        """Each host's GPUs: utilization, memory, who holds them, cordoned ones."""
        return _call(api.gpus)

    @mcp.tool(annotations=READ_ONLY)
    def list_workers() -> dict[str, Any]:
        """The workers: host, GPUs, state, current job."""
        return _call(lambda: api.request("GET", "/api/v1/workers").json())

    @mcp.tool(annotations=READ_ONLY)
    def share_table() -> dict[str, Any]:
        """Fair share: each owner's decayed GPU usage, what they hold and wait for."""
        return _call(api.share)

    @mcp.tool(annotations=READ_ONLY)
    def list_sweeps(limit: int = 50) -> dict[str, Any]:
        """Sweeps and searches, newest first."""
        return {"sweeps": _call(api.sweeps, max(1, min(limit, 500)))}

    @mcp.tool(annotations=READ_ONLY)
    def show_sweep(sweep_id: int) -> dict[str, Any]:
        """A sweep or search and its trials, ranked by its metric."""
        return _call(api.sweep_summary, sweep_id)

    @mcp.tool(annotations=READ_ONLY)
    def list_schedules() -> dict[str, Any]:
        """The schedules (jobs or sweeps made on a cron): each one's next firing, rules and last firings."""
        return {"schedules": _call(api.schedules)}

    @mcp.tool(annotations=READ_ONLY)
    def list_datasets() -> dict[str, Any]:
        """The uploaded datasets and their versions."""
        return _call(api.datasets)

    @mcp.tool(annotations=READ_ONLY)
    def list_environments() -> dict[str, Any]:
        """The Python environments command jobs may name (env_name), as the operator registered them."""
        return _call(lambda: api.request("GET", "/api/v1/envs").json())

    @mcp.tool(annotations=READ_ONLY)
    def list_models() -> dict[str, Any]:
        """The zoo's models and the params a job may set."""
        return _call(api.models)

    @mcp.resource("gpudeck://jobs/{job_id}/log", mime_type="text/plain")
    def job_log(job_id: str) -> str:
        """A job's log as it is now."""
        try:
            return api.logs(int(job_id))[0]
        except (ApiError, Unreachable, ValueError) as exc:
            raise ResourceError(str(exc)) from None

    @mcp.resource("gpudeck://jobs/{job_id}/metrics", mime_type="application/json")
    def job_curve(job_id: str) -> str:
        """A job's metric points (train and validation) as JSON."""
        try:
            return json.dumps(api.metrics(int(job_id)))
        except (ApiError, Unreachable, ValueError) as exc:
            raise ResourceError(str(exc)) from None

    @mcp.prompt()
    def diagnose_job(job_id: str) -> str:
        """Diagnose a gpudeck job: why it failed and what to change."""
        return (
            f"Diagnose gpudeck job {job_id}. Call triage_job({job_id}) first, then job_logs and job_metrics as "
            "needed. Say in a few sentences why it ended as it did, quoting the error line, and propose one concrete "
            "change to its spec (a field and its new value). Do not resubmit anything unless asked."
        )

    if allow_writes:
        _writes(mcp, api)
    return mcp


def _writes(mcp: MCPServer, api: Client) -> None:
    @mcp.tool(annotations=WRITE)
    def submit_job(spec: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Submit a job (a zoo model: model, dataset, params; or a command). dry_run: what it would be — the spec
        as queued, its expected start, its GPU-hours — with nothing stored."""
        if dry_run:
            return _call(lambda: api.request("POST", "/api/v1/jobs", params={"dry_run": "true"}, json=spec).json())
        return summary(_call(api.submit, spec))

    @mcp.tool(annotations=WRITE)
    def submit_sweep(body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Submit a sweep (a grid) or a search (space, search, stopping): the API validates every trial first.
        dry_run: what it would be (a grid's jobs, a search's rules), nothing stored."""
        if dry_run:
            return _call(lambda: api.request("POST", "/api/v1/sweeps", params={"dry_run": "true"}, json=body).json())
        sweep = _call(api.sweep, body)
        return {k: v for k, v in sweep.items() if k != "jobs"} | {"jobs": [summary(j) for j in sweep.get("jobs", [])]}

    @mcp.tool(annotations=WRITE)
    def create_schedule(body: dict[str, Any]) -> dict[str, Any]:
        """Make a schedule: {"name", "cron" ('0 2 * * *'), "tz" (Europe/Berlin), "overlap" (skip, queue,
        cancel-previous), "catch_up" (none, one), and "job" (a job spec) or "sweep"}: its job made at each firing."""
        return _call(api.create_schedule, body)

    @mcp.tool(annotations=WRITE)
    def pause_schedule(name: str, resume: bool = False) -> dict[str, Any]:
        """Pause a schedule (no firing until resumed), or resume it (resume=true: firing from its next time)."""
        return _call(api.schedule, name, "resume" if resume else "pause")

    @mcp.tool(annotations=DESTRUCTIVE)
    def delete_schedule(name: str) -> dict[str, Any]:
        """Delete a schedule (the jobs it made stay)."""
        _call(api.delete_schedule, name)
        return {"deleted": name}

    @mcp.tool(annotations=DESTRUCTIVE)
    def cancel_job(job_id: int, dry_run: bool = False) -> dict[str, Any]:
        """Cancel a queued or running job (a running one checkpoints and stops). dry_run: what would happen."""
        if dry_run:
            job = _call(api.job, job_id)
            ended = job["status"] in ("succeeded", "failed", "canceled")
            return {
                "dry_run": True,
                "job": summary(job),
                "would": "nothing: it has ended (409)" if ended else f"cancel it ({job['status']})",
            }
        return summary(_call(api.cancel, job_id))

    @mcp.tool(annotations=WRITE)
    def set_priority(job_id: int, priority: str, dry_run: bool = False) -> dict[str, Any]:
        """Change a queued job's priority (high, normal, low; the token's max_priority caps it)."""
        if dry_run:
            job = _call(api.job, job_id)
            was = (job.get("spec") or {}).get("priority")
            return {"dry_run": True, "job": summary(job), "would": f"priority {was} -> {priority}"}
        return summary(_call(api.set_priority, job_id, priority))

    @mcp.tool(annotations=WRITE)
    def move_job(job_id: int, first: bool = False, before: int | None = None, dry_run: bool = False) -> dict[str, Any]:
        """Move a queued job in its owner's line: first, or before another of the owner's queued jobs."""
        where: dict[str, Any] = {"first": True} if first else {"before": before}
        if dry_run:
            return {"dry_run": True, "job": summary(_call(api.job, job_id)), "would": f"move it {where}"}
        return summary(_call(api.move, job_id, **where))

    @mcp.tool(annotations=DESTRUCTIVE)
    def delete_job(job_id: int, dry_run: bool = False) -> dict[str, Any]:
        """Delete an ended job for good (record, log, metrics, job dir). dry_run: what would go."""
        if dry_run:
            job = _call(api.job, job_id)
            return {"dry_run": True, "job": summary(job), "would_free_bytes": job.get("disk_bytes")}
        return _call(api.delete, job_id)


def serve_http(app: MCPServer, host: str, port: int, secret: str) -> None:
    """MCP's Streamable HTTP transport on `host`:`port`, answering only requests that carry `secret` (`?token=` or
    `Authorization: Bearer`): jobs share the host's loopback, and the server acts with its token's rights (issue
    62 #5: a job found the port of an admin's server and read other users' jobs through it)."""
    import hmac

    import uvicorn

    inner = app.streamable_http_app(host=host)
    wanted = secret.encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization", b"").removeprefix(b"Bearer ").strip()
            query = dict(part.split(b"=", 1) for part in (scope.get("query_string") or b"").split(b"&") if b"=" in part)
            if not any(hmac.compare_digest(g, wanted) for g in (given, query.get(b"token", b""))):
                body = b'{"error": "this MCP server needs its token: ?token=... or Authorization: Bearer ..."}'
                head = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
                await send({"type": "http.response.start", "status": 401, "headers": head})
                await send({"type": "http.response.body", "body": body})
                return
        await inner(scope, receive, send)

    uvicorn.Server(uvicorn.Config(guarded, host=host, port=port, log_level="warning")).run()
