"""A job that leaves processes behind in every way issue 23 found (each marked by the argument of its sleep, so
the test can look for them): one that drops GPUDECK_RUN_ID and leaves the session, a double fork with an empty
environment, and a loop that starts one every 2 ms. With `hold`, the strays keep the job's output open. Then it
prints `started` and either exits (`end`) or waits to be canceled (`wait`)."""

import subprocess
import sys
import time

tag, how = sys.argv[1], sys.argv[2]
keep = None if "hold" in sys.argv else subprocess.DEVNULL
subprocess.Popen(f"setsid env -u GPUDECK_RUN_ID sleep 3{tag}1 &", shell=True, stdout=keep, stderr=keep)
subprocess.Popen(["env", "-i", "/bin/sh", "-c", f"(sleep 3{tag}2 &) &"], stdout=keep, stderr=keep)
subprocess.Popen(
    ["/bin/sh", "-c", f"while true; do sleep 3{tag}3 & sleep 0.002; done"],
    stdout=keep,
    stderr=keep,
    start_new_session=True,
)
time.sleep(0.5)
print("started", flush=True)
if how == "wait":
    time.sleep(600)
