"""What a Python job sees of how it was started (tests/jobs/test_warm_python.py runs it cold and warm): one line
`probe {json}`, then the exit status its first argument names; `raise` raises, `interrupt` raises KeyboardInterrupt."""

import atexit
import json
import os
import signal
import sys

import numpy  # noqa: F401  (a library of its environment's, imported as a job's would be)

parent = dict(line.split(":\t", 1) for line in open(f"/proc/{os.getppid()}/status").read().splitlines())
seen = {
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "cwd": os.getcwd(),
    "path0": sys.path[0],
    "file": __file__,
    "name": __name__,
    "main": sys.modules["__main__"].__dict__ is globals(),
    "executable": sys.executable,
    "env": dict(os.environ),
    "fds": sorted(os.listdir("/proc/self/fd")),
    "sigterm": str(signal.getsignal(signal.SIGTERM)),
    "sigint": str(signal.getsignal(signal.SIGINT)),
    "uid": os.getuid(),
    "parent": {"uid": parent["Uid"].split()[0], "caps": [parent[k].strip() for k in ("CapEff", "CapPrm", "CapBnd")]},
    "job_dir": sorted(os.listdir(os.environ["JOB_DIR"])),
}
print("probe " + json.dumps(seen, sort_keys=True), flush=True)
atexit.register(print, "atexit ran")
if sys.argv[1] == "raise":
    raise ValueError("as asked")
if sys.argv[1] == "interrupt":
    raise KeyboardInterrupt
sys.exit(int(sys.argv[1]))
