"""Issue 69 #2: the README's "Accounts" commands, run as written against a real API process, over jobs whose GPU
time the GPU sampler booked (tests.support.workers.booked): the table, the CSV and curl agree with the records,
and a deleted job still counts."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from datetime import datetime, timezone

import pytest
import requests

from tests.support.live import start_api
from tests.support.readme import run_block
from tests.support.workers import booked

pytestmark = pytest.mark.slow  # (a real API process: make test runs it, make check does not)

NOV = datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp()
DAY = 86400.0


def test_the_readme_reads_the_accounts(spawn, child_env, redis, tmp_path):
    url = start_api(spawn, child_env)
    booked(redis, "alice", NOV + 2 * DAY, 60, 3)  # 3 GPU-hours, ended Nov 3
    booked(redis, "alice", NOV + 10 * DAY, 600, 4, part=0.25)  # a quarter of a GPU for 4 h: 1
    gone = booked(redis, "bob", NOV + 10 * DAY, 0, 2, gpus=2, idle=True, status="failed")  # 4, idle
    assert requests.delete(f"{url}/api/v1/jobs/{gone}", timeout=10).status_code == 200  # (it still counts)
    env = {**child_env, "GPUDECK_API": url, "PATH": f"{os.path.dirname(sys.executable)}:{child_env['PATH']}"}
    table, weekly, curl = run_block("accounts", int(url.rsplit(":", 1)[1]), tmp_path, env)
    rows = {r.split()[1]: r.split() for r in table.splitlines()[1:]}
    assert table.split()[:4] == ["PERIOD", "OWNER", "JOBS", "SUCCEEDED"]
    assert rows["alice"][2:8] == ["2", "2", "0", "0", "4.00", "0.00"], table
    assert rows["bob"][2:8] == ["1", "0", "1", "0", "4.00", "4.00"], table
    assert rows["-"][0] == "total" and rows["-"][6] == "8.00"
    weeks = list(csv.DictReader(io.StringIO(weekly)))
    assert [(w["period"], w["gpu_h"]) for w in weeks] == [("2026-11-02", "3.00"), ("2026-11-09", "5.00")]
    [month] = json.loads(curl)["rows"][:1]
    assert month["period"] == "2026-11-01" and month["owner"] == "alice" and month["wait_p95_s"] == 600.0
