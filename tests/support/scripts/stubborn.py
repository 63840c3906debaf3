"""A script that ignores SIGTERM, forks a child that does too, and a grandchild that leaves the process group;
it appends its curve to $JOB_DIR/metrics.jsonl. Cancel must still end all three."""

import json
import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()  # out of the job's process group
    while True:
        time.sleep(1)
step = 0
with open(os.path.join(os.environ["JOB_DIR"], "metrics.jsonl"), "a") as f:
    while True:
        step += 1
        f.write(json.dumps({"step": step, "loss": 1.0 / step}) + "\n")
        f.flush()
        print(f"step {step}", flush=True)
        time.sleep(0.2)
