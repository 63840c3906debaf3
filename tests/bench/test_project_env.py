"""Start-up of a script job whose requirements.txt names 10 packages from local wheels (issue 30's benchmark): the
first job (it builds the environment) vs the second (a cache hit) vs the same script with no requirements, on a
live API and worker with the sandbox on. Start-up: from submission to the script's first line (its process
writes its start time; the job's created_at is the submission). Target: the cache hit within 1 s of no
requirements. Several rounds, interleaved, each with its own set of wheels (a new environment every round).

Also: the time from a job's end to its notification's delivery to a local receiver, p50 and p95 over 50 jobs.

    make bench PYTEST_ARGS="-k 'project_env or notification_latency'"
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

from jobs.redis_server import free_port
from tests.support.live import start_api, until
from tests.support.wheels import wheel

ROUNDS = 5
SCRIPT = "import json, os, time\nprint('started', json.dumps(time.time()), flush=True)\n"


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def startup(api: str, spec: dict) -> float:
    made = requests.post(f"{api}/api/v1/jobs", json=spec, timeout=10)
    assert made.status_code == 201, made.text
    made = made.json()
    job = requests.get(f"{api}/api/v1/jobs/{made['id']}/wait", params={"timeout": 300}, timeout=310).json()
    assert job["status"] == "succeeded", job
    log = requests.get(f"{api}/api/v1/jobs/{made['id']}/logs", timeout=10).text
    started = float(next(line for line in log.splitlines() if line.startswith("started ")).split()[1])
    return started - seconds(job["created_at"])


def test_project_env_startup(tmp_path, spawn, child_env):
    wheels = Path("/var/tmp") / f"gpudeck-bench-wheels-{tmp_path.name}"
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1", "UV_FIND_LINKS": str(wheels), "UV_NO_INDEX": "1"}
    env["GPUDECK_DATA_ROOTS"] = str(tmp_path)  # (the projects are server folders)
    api = start_api(spawn, env)
    spawn("worker", "--cpu", env=env)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "train.py").write_text(SCRIPT)
    rows = []
    try:
        for r in range(ROUNDS):
            project = tmp_path / f"project{r}"
            project.mkdir()
            names = [f"benchpkg{r}x{i}" for i in range(10)]
            for name in names:
                wheel(wheels, name, "1.0")
            (project / "requirements.txt").write_text("".join(f"{n}==1.0\n" for n in names))
            (project / "train.py").write_text(SCRIPT)
            none = startup(api, {"command": "python train.py", "source": str(bare), "gpus": 0})
            first = startup(api, {"command": "python train.py", "source": str(project), "gpus": 0})
            hit = startup(api, {"command": "python train.py", "source": str(project), "gpus": 0})
            rows.append((none, first, hit))
            print(f"round {r}: no requirements {none:.2f} s, first (build) {first:.2f} s, cache hit {hit:.2f} s")
    finally:
        import shutil

        shutil.rmtree(wheels, ignore_errors=True)
    med = [statistics.median(c) for c in zip(*rows)]
    print(f"median start-up: no requirements {med[0]:.2f} s, first job {med[1]:.2f} s, cache hit {med[2]:.2f} s")
    print(f"cache hit - no requirements: median {statistics.median(h - n for n, _, h in rows):+.2f} s")


def test_notification_latency(tmp_path, spawn, child_env):
    got: dict[int, float] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got[body["job"]["id"]] = time.time()
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1", "GPUDECK_WEBHOOKS": f"lab=http://127.0.0.1:{port}/hook"}
    api = start_api(spawn, env)
    spawn("worker", "--cpu", env=env)
    ids = [requests.post(f"{api}/api/v1/jobs", json={"command": "true", "gpus": 0, "notify": ["lab"]}, timeout=10)
           .json()["id"] for _ in range(50)]  # fmt: skip
    until(lambda: len(got) == 50, 600, "50 deliveries")
    server.shutdown()
    server.server_close()
    lat = sorted(got[i] - seconds(requests.get(f"{api}/api/v1/jobs/{i}", timeout=10).json()["ended_at"]) for i in ids)
    p50, p95 = lat[len(lat) // 2], lat[int(len(lat) * 0.95) - 1]
    print(f"\nfrom a job's end to its delivery over {len(lat)} jobs: p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
          f"max {lat[-1] * 1000:.0f} ms")  # fmt: skip
