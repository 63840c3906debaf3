"""What a Python job sees of how it was started (tests/jobs/test_warm_python.py runs it cold and warm): one line
`probe {json}`, then the exit status its first argument names; `raise` raises, `interrupt` raises
KeyboardInterrupt, `wait` waits to be stopped."""

import atexit
import json
import os
import signal
import sys
import time

import numpy  # noqa: F401  (a library of its environment's, imported as a job's would be)

first = dict(line.split(":\t", 1) for line in open("/proc/2/status").read().splitlines())  # (the sandbox's: the shim)


def tried(what):
    """What a hostile job would try: the answer, or the error's name."""
    try:
        return what()
    except OSError as exc:
        return type(exc).__name__


me = os.environ["GPUDECK_JOB_ID"]
seen = {
    "argv": sys.argv,
    "hash": hash("gpudeck") if os.environ.get("PYTHONHASHSEED") else None,
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
    "first": {"uid": first["Uid"].split()[0], "caps": [first[k].strip() for k in ("CapEff", "CapPrm", "CapBnd")]},
    "job_dir": sorted(os.listdir(os.environ["JOB_DIR"])),
    "other_jobs": tried(lambda: [n == me or n for n in os.listdir(f"{os.environ['JOB_DIR']}/..")]),
    "first_environ": tried(lambda: len(open("/proc/2/environ", "rb").read())),
    "first_mem": tried(lambda: len(open("/proc/2/mem", "rb").read(1))),
}
print("probe " + json.dumps(seen, sort_keys=True), flush=True)
atexit.register(print, "atexit ran")
if sys.argv[1] == "raise":
    raise ValueError("as asked")
if sys.argv[1] == "wait":
    time.sleep(120)
if sys.argv[1] == "interrupt":
    raise KeyboardInterrupt
sys.exit(int(sys.argv[1]))
