"""A word when a job ends (issue 30 #3), with a real API, worker and local HTTP receivers: signed deliveries for
succeeded and failed jobs, Slack's shape, every change of status, a receiver that is down getting the delivery once
it is back, the job's end never waiting for any of it, and an endpoint nobody configured refused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import requests

from jobs import notify
from jobs.redis_server import free_port
from jobs.run.proc import python_module
from tests.support.live import start_api, submit_job, until, wait_ended
from tests.support.readme import run_block
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.slow

SECRET = "s3cret-lab"


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_signed_notifications_reach_the_operators_endpoints_and_never_delay_a_job(spawn, child_env, tmp_path):
    lab, slack, late = Receiver(free_port()).start(), Receiver(free_port()).start(), Receiver(free_port())
    hooks = (
        f"lab=http://127.0.0.1:{lab.port}/hook;team:slack=http://127.0.0.1:{slack.port}/slack;"
        f"late=http://127.0.0.1:{late.port}/late"
    )
    env = {
        **child_env,
        "GPUDECK_COMMAND_JOBS": "1",
        "GPUDECK_WEBHOOKS": hooks,
        "GPUDECK_WEBHOOK_SECRETS": f"lab={SECRET};late=other",
        "GPUDECK_PUBLIC_URL": "https://gpudeck.example",
        "GPUDECK_WEBHOOK_RETRY": "1s",
    }
    api = start_api(spawn, env)
    spawn("worker", "--cpu", env=env)
    try:
        # The README's commands, as written: job 1 tells lab it succeeded (team only hears of failures).
        cli_env = {**child_env, "GPUDECK_API": api, "PATH": f"{Path(sys.executable).parent}:{child_env['PATH']}"}
        ran = run_block("notify", int(api.rsplit(":", 1)[1]), tmp_path, cli_env)
        assert "trained" in ran[0] and " 1  succeeded" in ran[1] and "notified  " in ran[2], ran
        until(lambda: lab.events(1) == ["succeeded"], 30, "job 1's notification")
        shown = subprocess.run(
            python_module("tui.cli", "show", "1"), env=cli_env, capture_output=True, text=True, timeout=60
        ).stdout
        assert " notified  lab succeeded: delivered (200), attempt 1" in shown, shown

        # An endpoint the operator did not name is refused, naming the field.
        bad = requests.post(f"{api}/api/v1/jobs", json={"command": "true", "notify": ["nope"]}, timeout=10)
        assert bad.status_code == 400 and "no endpoint 'nope'" in bad.json()["details"]["fields"]["notify"], bad.text
        bad = requests.post(f"{api}/api/v1/jobs", json={"command": "true", "notify": ["lab:done"]}, timeout=10)
        assert bad.status_code == 400 and "unknown events" in bad.json()["details"]["fields"]["notify"], bad.text

        ok = submit_job(api, {"command": "echo hi", "name": "fine", "notify": ["lab", "team"], "gpus": 0})
        failed = submit_job(api, {"command": "exit 3", "notify": ["lab"], "gpus": 0})
        every = submit_job(api, {"command": "true", "notify": ["lab:any"], "gpus": 0})
        assert wait_ended(api, ok)["status"] == "succeeded" and wait_ended(api, failed)["status"] == "failed"
        assert wait_ended(api, every)["status"] == "succeeded"
        until(lambda: lab.events(ok) and lab.events(failed) and len(lab.events(every)) >= 2 and slack.got, 30)
        assert lab.events(ok) == ["succeeded"] and lab.events(failed) == ["failed"]
        assert lab.events(every) == ["running", "succeeded"]
        sent = next(r for r in lab.got if json.loads(r["body"])["job"]["id"] == failed)
        told = json.loads(sent["body"])["job"]
        assert (told["status"], told["reason"], told["url"]) == (
            "failed",
            "exit_nonzero",
            f"https://gpudeck.example/api/v1/jobs/{failed}",
        )
        stamp = sent["headers"]["X-Gpudeck-Timestamp"]
        assert abs(int(stamp) - time.time()) < 60
        assert sent["headers"]["X-Gpudeck-Signature"] == notify.sign(SECRET, stamp, sent["body"])
        assert sent["headers"]["X-Gpudeck-Signature"] != notify.sign("wrong", stamp, sent["body"])
        text = json.loads(slack.got[0]["body"])["text"]
        assert f"job {ok} (fine) succeeded" in text and "X-Gpudeck-Signature" not in slack.got[0]["headers"]

        # A receiver that is down: the job ends all the same; the delivery arrives once the receiver is back.
        down = submit_job(api, {"command": "true", "notify": ["late"], "gpus": 0})
        done = wait_ended(api, down)
        assert done["status"] == "succeeded"
        until(lambda: requests.get(f"{api}/api/v1/jobs/{down}/notifications", timeout=10).json()["attempts"], 30)
        first = requests.get(f"{api}/api/v1/jobs/{down}/notifications", timeout=10).json()["attempts"][0]
        assert not first["delivered"] and "Connection" in first["answer"] and first["at"] >= seconds(done["ended_at"])
        assert "/late" not in first["answer"] and str(late.port) not in first["answer"], first  # never the URL
        late.start()
        until(lambda: late.got, 30, "the delivery after the receiver came back")
        recorded = lambda: requests.get(f"{api}/api/v1/jobs/{down}/notifications", timeout=10).json()["attempts"]  # noqa: E731
        attempts = until(lambda: (a := recorded()) and a[-1]["delivered"] and a, 30, "the delivery recorded")
        assert [a["delivered"] for a in attempts] == [False] * (len(attempts) - 1) + [True] and len(attempts) >= 2
        assert late.got[0]["headers"]["X-Gpudeck-Signature"] == notify.sign(
            "other", late.got[0]["headers"]["X-Gpudeck-Timestamp"], late.got[0]["body"]
        )
        shown = subprocess.run(
            python_module("tui.cli", "show", str(down)),
            env={**child_env, "GPUDECK_API": api},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f" notified  late succeeded: delivered (200), attempt {len(attempts)}" in shown.stdout, shown.stdout
    finally:
        for receiver in (lab, slack, late):
            receiver.stop()
