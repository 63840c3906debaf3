"""The API as curl users and monitoring see it, over real HTTP against a gunicorn API process, a real worker and
Redis: log follow and resume, /healthz, /metrics, TensorBoard processes."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.live import TINY, start_api, submit_job, until, wait_succeeded


@pytest.mark.slow
def test_curl_follows_a_log_live_until_the_job_ends_and_resumes_by_offset(spawn, gpu_env):
    env = {**gpu_env, "GPUDECK_COMMAND_JOBS": "1"}
    api = start_api(spawn, env)
    spawn("worker", "--cpu", env=env)
    # A command that logs for about four seconds: what is checked is the streaming, not training.
    lines_slowly = "for i in $(seq 1 40); do echo train step $i; sleep 0.1; done"
    job_id = submit_job(api, {"command": lines_slowly, "gpus": 0})
    gpu_api = api
    url = f"{gpu_api}/api/v1/jobs/{job_id}/logs"
    curl = subprocess.Popen(["curl", "-sSN", "-D", "-", f"{url}?follow=1"], stdout=subprocess.PIPE, text=True)
    assert curl.stdout is not None
    head = []
    while (line := curl.stdout.readline()).strip():  # headers, up to the blank line
        head.append(line.strip())
    assert head[0].startswith("HTTP/1.1 200") and "X-Next-Offset: 0" in head
    first = curl.stdout.readline()
    first_at = time.time()
    rest = curl.stdout.read()
    curl.stdout.close()
    assert curl.wait(60) == 0  # the stream ended by itself when the job did
    job = requests.get(f"{gpu_api}/api/v1/jobs/{job_id}", timeout=10).json()
    assert job["status"] == "succeeded"
    # The first line arrived seconds before the job ended: it was streamed, not sent at the end.
    assert datetime.fromisoformat(job["ended_at"].replace("Z", "+00:00")).timestamp() - first_at > 1.0

    full = requests.get(url, timeout=10)
    lines = full.text.splitlines()
    assert first + rest == full.text and len(lines) > 10 and full.headers["X-Next-Offset"] == str(len(lines))
    assert any("train step" in line for line in lines)
    # Resume: no duplicate and no gap, plain or following (an ended job's stream ends at once).
    part = requests.get(f"{url}?offset=7", timeout=10)
    assert part.text.splitlines() == lines[7:] and part.headers["X-Next-Offset"] == str(len(lines))
    again = subprocess.run(["curl", "-sSN", f"{url}?offset=7&follow=1"], capture_output=True, text=True, timeout=30)
    assert again.stdout.splitlines() == lines[7:]
    assert requests.get(f"{url}?offset={len(lines)}", timeout=10).text == ""
    bad = requests.get(f"{url}?follow=maybe", timeout=10)
    assert bad.status_code == 400 and bad.json()["details"]["field"] == "follow"


@pytest.mark.slow
def test_healthz_and_prometheus_metrics(spawn, gpu_env):
    env = {**gpu_env, "GPUDECK_COMMAND_JOBS": "1"}  # (the job that ends is a command: what is counted is its end)
    gpu_api = start_api(spawn, env)
    health = requests.get(f"{gpu_api}/healthz", timeout=10).json()
    assert health == {**health, "status": "degraded", "redis": "ok", "workers": 0, "workers_alive": 0}
    spawn("worker", "--cpu", env=env)
    until(lambda: requests.get(f"{gpu_api}/healthz", timeout=10).json()["workers_alive"] == 1)
    wait_succeeded(gpu_api, submit_job(gpu_api, {"command": "true", "gpus": 0}))
    submit_job(gpu_api, {**TINY, "gpus": 2})  # no two-GPU worker: it stays queued

    def scrape() -> dict:
        resp = requests.get(f"{gpu_api}/metrics", timeout=10)
        assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"  # (issue 24 #8: once)
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(resp.text)
            for s in fam.samples
        }

    m = until(lambda: (m := scrape()) and any(k[0] == "gpudeck_gpu_utilization_ratio" for k in m) and m)
    assert m[("gpudeck_jobs", (("status", "succeeded"),))] == 1
    assert m[("gpudeck_jobs", (("status", "queued"),))] == 1
    assert m[("gpudeck_jobs", (("status", "failed"),))] == 0
    assert m[("gpudeck_queue_length", (("queue", "gpus-2"),))] == 1
    assert m[("gpudeck_queue_length", (("queue", "cpu"),))] == 0
    assert m[("gpudeck_workers", (("state", "idle"),))] == 1
    gpu0 = tuple(
        sorted({"host": _host(gpu_api), "gpu": "0", "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3"}.items())
    )
    assert m[("gpudeck_gpu_utilization_ratio", gpu0)] == pytest.approx(0.97)
    assert m[("gpudeck_gpu_memory_total_bytes", gpu0)] == 81559 * 2**20
    # GPU 1 reads [N/A] for utilization: absent, not zero.
    assert not any(k[0] == "gpudeck_gpu_utilization_ratio" and ("gpu", "1") in k[1] for k in m)


def _host(gpu_api: str) -> str:
    return requests.get(f"{gpu_api}/api/v1/gpus", timeout=10).json()["hosts"][0]["host"]


@pytest.mark.slow
def test_tensorboard_started_reused_limited_and_stopped_when_idle(gpu_api, spawn, gpu_env):
    spawn("worker", "--cpu", env=gpu_env)
    first, second = submit_job(gpu_api, TINY), submit_job(gpu_api, {**TINY, "name": "second run"})
    wait_succeeded(gpu_api, first), wait_succeeded(gpu_api, second)
    # issue 24 #1: a run folder where a tutorial's script writes one (./logs/fit/<time>, under the job's src)
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    fit = Path(gpu_env["GPUDECK_HOME"]) / "jobs" / str(first) / "src" / "logs" / "fit" / "20261124-120000"
    writer = EventFileWriter(str(fit))
    for step in (1, 2):
        value = summary_pb2.Summary.Value(tag="epoch_loss", simple_value=1.0 / step)
        writer.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[value])))
    writer.close()

    resp = requests.post(f"{gpu_api}/api/v1/tensorboard", json={"jobs": [first]}, timeout=120)
    assert resp.status_code == 201, resp.text
    board = resp.json()
    assert board["url"] == f"http://127.0.0.1:{board['port']}/" and board["runs"] == [f"{first}-lenet"]
    assert board["ssh_tunnel"] == f"ssh -N -L {board['port']}:127.0.0.1:{board['port']} {board['host']}"
    runs = until(
        lambda: (
            len(requests.get(f"{board['url']}data/runs", timeout=10).json()) >= 3
            and requests.get(f"{board['url']}data/runs", timeout=10).json()
        )
    )
    assert all(r.startswith(f"{first}-lenet/") for r in runs), runs
    assert f"{first}-lenet/src/logs/fit/20261124-120000" in runs and f"{first}-lenet/tensorboard/train" in runs, runs
    # the loss curve is served (TensorBoard runs on its TensorFlow stub: no TensorFlow in its process)
    tags = until(lambda: requests.get(f"{board['url']}data/plugin/scalars/tags", timeout=10).json())
    assert any("loss" in t for run_tags in tags.values() for t in run_tags), tags
    log = Path(gpu_env["GPUDECK_HOME"]) / "tensorboard" / f"{board['port']}.log"
    assert "TensorFlow installation not found" in log.read_text()

    same = requests.post(f"{gpu_api}/api/v1/tensorboard", json={"jobs": [first]}, timeout=120)
    assert same.status_code == 200 and same.json()["port"] == board["port"] and same.json()["reused"] is True

    both = requests.post(f"{gpu_api}/api/v1/tensorboard", json={"jobs": [second, first]}, timeout=120).json()
    assert both["port"] != board["port"] and both["runs"] == [f"{first}-lenet", f"{second}-second_run"]
    # GPUDECK_TENSORBOARD_MAX=1: the first one was stopped to make room.
    with pytest.raises(requests.ConnectionError):
        requests.get(board["url"], timeout=5)
    listed = requests.get(f"{gpu_api}/api/v1/tensorboard", timeout=10).json()["tensorboards"]
    assert [b["port"] for b in listed] == [both["port"]]

    # Idle (no connection, no request) for GPUDECK_TENSORBOARD_IDLE=4 s: stopped by the API's sweeper.
    until(lambda: requests.get(f"{gpu_api}/api/v1/tensorboard", timeout=10).json()["tensorboards"] == [], timeout=40)
    with pytest.raises(requests.ConnectionError):
        requests.get(both["url"], timeout=5)

    for body, status, field in (
        ({"jobs": []}, 400, "jobs"),
        ({"jobs": ["1"]}, 400, "jobs"),
        ({"jobs": [1], "port": 80}, 400, "port"),
        ({"jobs": [999]}, 404, None),
    ):
        bad = requests.post(f"{gpu_api}/api/v1/tensorboard", json=body, timeout=10)
        assert bad.status_code == status, bad.text
        if field:
            assert field in bad.json()["details"]["fields"]
    assert requests.delete(f"{gpu_api}/api/v1/tensorboard/1", timeout=10).status_code == 404


def test_with_tokens_every_documented_route_but_healthz_needs_a_bearer_token(spawn, child_env):
    from api.auth import AUTH_FAILURES_MAX
    from api.openapi import document

    url = start_api(spawn, {**child_env, "GPUDECK_TOKENS": "s3cret,other"})
    routes = [
        (m, p.replace("{id}", "1").replace("{name}", "x").replace("{port}", "1"))
        for p, ops in document()["paths"].items()
        for m in ops
    ]
    assert len(routes) >= 20
    guesses = 0
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            resp = requests.request(method, f"{url}{path}", headers=headers, timeout=10)
            if path == "/healthz":
                assert resp.status_code == 200
                continue
            guesses += headers == {"Authorization": "Bearer wrong"}
            if headers == {"Authorization": "Bearer wrong"} and guesses > AUTH_FAILURES_MAX:  # slowed down
                assert resp.status_code == 429 and 0 < int(resp.headers["Retry-After"]) <= 60, (method, path)
                continue
            assert resp.status_code == 401, (method, path, headers)
            assert resp.json()["error"] == "unauthorized" and resp.headers["WWW-Authenticate"].startswith("Bearer")
        ok = requests.request(method, f"{url}{path}", headers={"Authorization": "Bearer other"}, timeout=10)
        assert ok.status_code not in (401, 429), (method, path)  # a good token is never slowed down
    assert guesses > AUTH_FAILURES_MAX
    assert requests.get(f"{url}/api/v1/jobs", headers={"Authorization": "Bearer s3cret"}, timeout=10).status_code == 200
