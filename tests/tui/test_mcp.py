"""`gpudeck mcp` (issue 47): the MCP SDK's own client, over stdio and over HTTP, against a live stack with named
tokens: read-only unless --allow-writes, a dry run stores nothing, writes go through the API's rules (bob may not
run commands), triage names a failed job's error line, metrics and resources read back, the prompt."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import warnings
from typing import TYPE_CHECKING, Any

import anyio
import pytest
import requests

from jobs import tokens
from jobs.redis_server import free_port
from jobs.run.proc import python_module
from tests.support.live import start_api, until
from tests.support.readme import json_block

if TYPE_CHECKING:  # (the client is imported where it is made: every test process collects this module)
    from mcp import Client

pytestmark = pytest.mark.slow

FAILS = {
    "command": "python -c \"print('loading'); raise ValueError('bad shape 3x3')\"",
    "gpus": 0,
    "secret_env": {"API_KEY": "s3cret-value"},
}
TINY = {"model": "lenet", "dataset": "synthetic:16x16x3", "gpus": 0, "params": {"steps": 4, "batch_size": 8}}


def as_the_readme_says(url: str, token: str, env: dict[str, str]) -> Client:
    """The README's agent configuration ("For agents (MCP)"), as an agent client starts it: its command on PATH,
    its args (the API's address moved to this test's), its env (the token filled in)."""
    config = json_block("agent-config")["mcpServers"]["gpudeck"]  # type: ignore[index]
    args = [a.replace("http://localhost:8686", url) for a in config["args"]]
    told = {k: token if k == "GPUDECK_TOKEN" else v for k, v in config["env"].items()}
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    bin_dir = os.path.dirname(sys.executable)
    path = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return Client(StdioServerParameters(command=config["command"], args=args, env={**env, "PATH": path, **told}))


def over_stdio(url: str, token: str, env: dict[str, str], *flags: str) -> Client:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    argv = python_module("tui.cli", "mcp", "--api", url, "--token", token, *flags)
    return Client(StdioServerParameters(command=argv[0], args=argv[1:], env=env))


async def call(client: Client, tool: str, **args: Any) -> Any:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise AssertionError(f"{tool}: {result.content[0].text}")
    return result.structured_content


async def refused(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, (tool, result)
    return result.content[0].text


def test_an_agent_lists_submits_waits_triages_and_reads_metrics_within_the_apis_rules(
    spawn, child_env, redis, settings
):
    names = {"alice": tokens.create(redis, "alice", max_gpus=1), "bob": tokens.create(redis, "bob", commands=False)}
    url = start_api(spawn, child_env)
    spawn("worker", "--cpu", env=child_env)
    env = {k: v for k, v in child_env.items() if not k.startswith("GPUDECK_")}

    async def agent() -> None:
        from mcp import Client
        from mcp import types as mcp_types
        from mcp.shared.exceptions import MCPDeprecationWarning

        async with as_the_readme_says(url, names["alice"], env) as reader:
            tools = {t.name for t in (await reader.list_tools()).tools}
            assert {"list_jobs", "show_job", "job_logs", "job_metrics", "triage_job", "wait_job"} <= tools
            assert not tools & {"submit_job", "cancel_job", "delete_job", "set_priority"}  # (read-only by default)
            assert "submit_job" in await refused(reader, "submit_job", spec=TINY)
            assert (await call(reader, "list_jobs"))["jobs"] == []

        async with over_stdio(url, names["alice"], env, "--allow-writes") as writer:
            dry = await call(writer, "submit_job", spec={**TINY, "expected_duration": 3600}, dry_run=True)
            assert dry["dry_run"] is True and dry["spec"]["model"] == "lenet" and dry["gpu_hours"] == 0
            grid = {"base": TINY, "grid": {"params.lr": [0.1, 0.01, 0.001]}}
            sweep = await call(writer, "submit_sweep", body=grid, dry_run=True)
            assert sweep["dry_run"] is True and sweep["jobs"] == 3 and len(sweep["specs"]) == 3
            assert (await call(writer, "list_jobs"))["total"] == 0  # (a dry run stores nothing)
            assert (await call(writer, "list_sweeps"))["sweeps"] == []
            nightly = {"name": "nightly", "cron": "0 2 * * *", "tz": "Europe/Berlin", "job": TINY}
            assert (await call(writer, "create_schedule", body=nightly))["owner"] == "alice"
            assert [s["name"] for s in (await call(writer, "list_schedules"))["schedules"]] == ["nightly"]
            assert (await call(writer, "pause_schedule", name="nightly"))["paused"] is True
            assert (await call(writer, "pause_schedule", name="nightly", resume=True))["next_at"].endswith(":00.000Z")
            assert "cron" in await refused(writer, "create_schedule", body={**nightly, "cron": "61 * * * *"})
            await call(writer, "delete_schedule", name="nightly")
            assert (await call(writer, "list_schedules"))["schedules"] == []
            assert "envs" in await call(writer, "list_environments")
            bad = await refused(writer, "submit_job", spec={**TINY, "gpus": -1})
            assert "gpus" in bad and "HTTP 400" in bad  # (the API's own message)
            over = await refused(writer, "submit_job", spec={**TINY, "gpus": 5}, dry_run=True)
            assert "--max-gpus" in over and "HTTP 403" in over  # (alice's quota holds, in a dry run too)

            failed = (await call(writer, "submit_job", spec=FAILS))["id"]
            assert (await call(writer, "wait_job", job_id=failed, timeout=120))["status"] == "failed"
            why = await call(writer, "triage_job", job_id=failed)
            assert why["reason"] == "exit_nonzero"
            assert any("ValueError: bad shape 3x3" in line for line in why["error_lines"]), why
            assert any("its process failed" in step for step in why["next"])
            shown = await call(writer, "show_job", job_id=failed)
            assert shown["spec"]["secret_env"] == {"API_KEY": "***"} and "s3cret-value" not in str(shown)
            found = await call(writer, "job_logs", job_id=failed, search="loading")
            assert found["lines"] == ["loading"]

            trained = (await call(writer, "submit_job", spec=TINY))["id"]
            uri = f"gpudeck://jobs/{trained}/log"
            told = 0
            legacy_told: list[str] = []

            async def legacy_notes(message: Any) -> None:  # (a client of the 2025-11-25 protocol: issue 67 #5)
                root = getattr(message, "root", message)
                if isinstance(root, mcp_types.ResourceUpdatedNotification):
                    legacy_told.append(str(root.params.uri))

            from mcp.client.stdio import StdioServerParameters

            argv = python_module("tui.cli", "mcp", "--api", url, "--token", names["alice"])
            old = Client(StdioServerParameters(command=argv[0], args=argv[1:], env=env), mode="legacy",
                         message_handler=legacy_notes)  # fmt: skip
            async with old:
                assert old.server_capabilities.resources.subscribe is True
                with warnings.catch_warnings():  # (the 2025 protocol's method, deprecated by the SDK: what is tested)
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await old.subscribe_resource(uri)  # (was `Method not found`)
                async with writer.listen(resource_subscriptions=[uri]) as updates:  # (as it starts, grows, ends)
                    with anyio.fail_after(120):
                        async for event in updates:
                            told += event.uri == uri
                            if told == 2:
                                break
                with anyio.fail_after(30):
                    while uri not in legacy_told:
                        await anyio.sleep(0.2)
            assert (await call(writer, "wait_job", job_id=trained, timeout=180))["status"] == "succeeded"
            curve = await call(writer, "job_metrics", job_id=trained)
            assert curve["train"]["points"] >= 1 and curve["train"]["loss"]["last"] > 0
            raw = await call(writer, "job_metrics", job_id=trained, raw=True)
            assert len(raw["train"]) == curve["train"]["points"]
            log = await writer.read_resource(f"gpudeck://jobs/{trained}/log")
            assert "train step" in log.contents[0].text
            prompt = await writer.get_prompt("diagnose_job", {"job_id": str(failed)})
            assert f"triage_job({failed})" in prompt.messages[0].content.text

            side = await call(writer, "compare_jobs", job_ids=[failed, trained])
            assert {"kind", "model"} <= {d["field"] for d in side["differs"]}  # (a command beside a zoo job)
            assert [c["job_id"] for c in side["curves"]] == [trained] and side["curves"][0]["points"] >= 1
            assert "s3cret-value" not in str(side)

            assert (await call(writer, "delete_job", job_id=trained, dry_run=True))["would_free_bytes"] > 0
            assert (await call(writer, "show_job", job_id=trained))["status"] == "succeeded"  # (still there)

        async with over_stdio(url, names["bob"], env, "--allow-writes") as bob:
            said = await refused(bob, "submit_job", spec=FAILS)
            assert "HTTP 403" in said  # (bob may not run commands: MCP is no way around it)
            said = await refused(bob, "cancel_job", job_id=failed)
            assert "HTTP 403" in said or "HTTP 409" in said  # (not his job, and it ended)

    anyio.run(agent)


def test_the_http_transport_answers_on_127_0_0_1_only(spawn, child_env, redis):
    token = tokens.create(redis, "alice")
    url = start_api(spawn, child_env)
    wrong = subprocess.run(
        python_module("tui.cli", "mcp", "--http", "0.0.0.0:8765", "--api", url, "--token", token),
        capture_output=True,
        text=True,
        env=child_env,
        timeout=60,
    )
    assert wrong.returncode == 2 and "127.0.0.1 only" in wrong.stderr
    port = free_port()
    secret = "s3cret-for-this-test"
    served = spawn("mcp", "--http", f"127.0.0.1:{port}", "--api", url, "--token", token,
                   env={**child_env, "GPUDECK_MCP_SECRET": secret})  # fmt: skip

    def answers() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    until(answers, 60, lambda: f"gpudeck mcp on port {port}: {served.output()[-2000:]}")

    # jobs share 127.0.0.1: a request without the server's secret (or with another) gets nothing (issue 62 #5)
    init = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer guessed"}):
        refused = requests.post(f"http://127.0.0.1:{port}/mcp", json=init, headers={**accept, **headers}, timeout=10)
        assert refused.status_code == 401 and "token" in refused.text, refused.text
    assert f"token={secret}" in served.output()

    async def agent() -> None:
        from mcp import Client

        async with Client(f"http://127.0.0.1:{port}/mcp?token={secret}") as client:
            info = client.server_info
            assert info is not None and info.name == "gpudeck" and info.version.startswith("0."), info  # (#67: "")
            tools = {t.name for t in (await client.list_tools()).tools}
            assert "list_jobs" in tools and "submit_job" not in tools
            listed = await client.call_tool("list_jobs", {})
            assert not listed.is_error and listed.structured_content["jobs"] == []

    anyio.run(agent)
    others = {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} - {"127.0.0.1"}
    for address in others - {a for a in others if a.startswith("127.")}:
        with pytest.raises(OSError):
            socket.create_connection((address, port), timeout=1).close()
