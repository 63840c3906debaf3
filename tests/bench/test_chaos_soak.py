"""The chaos soak (issue 17): the real stack (`gpudeck up --cpu-workers 2`, embedded Redis, command jobs on) for
GPUDECK_SOAK_S seconds (default 600) under a steady stream of small jobs — single and two-worker command jobs,
command jobs that fail by design, zoo jobs (lenet), command jobs that try to escape their sandbox and leave
strays that drop every mark — some of which it cancels, while at random moments it `kill -9`s a worker, a
work-horse, a trainer, the API master, the Redis or `gpudeck up` itself (started again at once, as a service
manager would), now and then two of them at once; midway, where it may mount a small filesystem for the home
(root), it fills the disk for FULL_HOLD_S seconds. Then it lets everything settle and judges:

- every acknowledged job exists exactly once (submissions carry an Idempotency-Key and are retried through
  outages) and has ended as what was done to it says: canceled when a cancel was accepted; failed
  `exit_nonzero` when its trainer was killed or it failed by design; failed `disk_full` only when it ran while
  the disk was full; otherwise succeeded, retried no more often than its worker, work-horse or `up` was killed
  (failed `worker_lost` only once more kills hit it than it may retry);
- a command job that succeeded ran its script to the end exactly once per task (its ledger's `end` events
  after work done), one that failed or was canceled never;
- no escaping script reached another process's environment, the Redis, another job's dir or wrote outside
  its own, and none of the strays it left outlived its job;
- no thread of the soak itself failed (a submitter's error is a problem, not a silence);
- no job ran twice at the same time (each command task holds an flock on `$JOB_DIR/soak-lock-TASK` while it
  runs and writes `double` to its job's ledger when it finds it taken; no two live processes carry different
  runs (mark and token) of one job's task at any scan of the machine's processes);
- steps never go backwards: a command job's metric stream only climbs, the progress the API shows never
  falls, and a resumed zoo job starts no more than an epoch before where it had been seen;
- no process is left behind, while the stack runs (nothing of an ended job) and after it stops (nothing at all);
- `/healthz` answered within 1 s at every probe outside the outages the soak caused (from each kill of the
  Redis or the API to the first good answer after it).

    make bench PYTEST_ARGS="-k chaos_soak"                      # 10 minutes
    GPUDECK_SOAK_S=120 make bench PYTEST_ARGS="-k chaos_soak"   # a short one
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from jobs.redis_server import EmbeddedRedis
from tests.support.live import cmdline, descendants, environ, parent
from tests.support.stack import Up

SOAK_S = float(os.environ.get("GPUDECK_SOAK_S", "600"))
SEED = int(os.environ.get("GPUDECK_SOAK_SEED", str(random.randrange(10**6))))
KILL_EVERY_S = (12.0, 30.0)
"""Seconds between two kills (uniform)."""
KINDS = ("worker", "horse", "trainer", "api", "redis", "up")
PAIR_P = 0.25
"""How often a kill is two kills at once (two kinds from the deck, `up` last)."""
LOST = ("worker", "horse", "up")
"""Kills that stop a job's worker: retried as worker_lost."""
FULL_AT, FULL_HOLD_S = 0.45, 20.0
"""When (a fraction of SOAK_S) the disk is filled, and for how long."""
HOME_SIZE = "3g"
MAX_RETRIES = 5
PROBE_EVERY_S, PROBE_LIMIT_S = 0.5, 1.0
OUTAGE_S = 30.0
"""Failed probes this long after a kill of the API or the Redis belong to the outage it caused."""
ZOO_STEPS = 80
QUEUE_DEPTH = 3
"""The submitter keeps this many of its jobs queued: a steady stream, not a backlog that grows."""

SCRIPT = r"""
import fcntl, json, os, sys, time
soak, job, task = os.environ["JOB_DIR"], os.environ["GPUDECK_JOB_ID"], os.environ.get("GPUDECK_TASK_INDEX", "0")
steps, pause, fail_at = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
def ledger(**event):
    attempt = int(os.environ["GPUDECK_ATTEMPT"])
    event.update(job=int(job), task=int(task), attempt=attempt, pid=os.getpid(), t=time.time())
    with open(os.path.join(soak, "soak-ledger.jsonl"), "a") as f:
        f.write(json.dumps(event) + "\n")
lock = open(os.path.join(soak, "soak-lock-" + task), "a")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    ledger(event="double")
    sys.exit(4)
state = os.path.join(os.environ["JOB_DIR"], "soak-state-" + task)
start = int(open(state).read()) if os.path.exists(state) else 0
ledger(event="start", step=start)
if len(sys.argv) > 4:  # an escape: what it reaches goes in its ledger; strays that drop every mark outlive it?
    import socket
    reached = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            continue
        if b"REDIS_URL=" in env or b"GPUDECK_TOKENS=" in env:
            reached.append(f"the environment of pid {pid}")
    home = os.environ["SOAK_HOME"]
    for path in {os.environ["SOAK_SOCKET"], os.path.join(home, "redis", "redis.sock")}:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(2)
            s.connect(path)
            s.sendall(b"PING\r\n")
            if s.recv(16).startswith(b"+PONG"):
                reached.append("the Redis at " + path)
        except OSError:
            pass
    try:
        others = [d for d in os.listdir(os.path.join(home, "jobs")) if d != job]
    except OSError:
        others = []
    reached += [f"job dirs {others[:3]}"] if others else []
    for target in (os.path.join(home, "pwned-" + job), os.path.join(os.environ["SOAK_DIR"], "pwned-" + job)):
        try:
            with open(target, "w") as f:
                f.write("x")
        except OSError:
            pass
    ledger(event="escape", reached=reached)
    os.system(f"setsid env -i SOAK_STRAY={job} sleep 900 >/dev/null 2>&1 </dev/null &")
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            os.execve("/bin/sleep", ["sleep", "900"], {"SOAK_STRAY": job})
        os._exit(0)
for s in range(start + 1, steps + 1):
    time.sleep(pause)
    if s == fail_at:
        ledger(event="fail", step=s)
        print("failing on purpose at step", s, flush=True)
        sys.exit(3)
    with open(state + ".tmp", "w") as f:
        f.write(str(s))
    os.replace(state + ".tmp", state)  # the checkpoint comes before the point: a resumed run never repeats one
    if task == "0":
        with open(os.path.join(os.environ["JOB_DIR"], "metrics.jsonl"), "a") as f:
            f.write(json.dumps({"step": s, "loss": 1 / s}) + "\n")
    print("step", s, flush=True)
ledger(event="end", step=steps, did=steps - start)
"""
"""A command job of `steps` steps of `pause` s; checkpoints every step; exits 3 at `fail_at` (0: never); with a
fifth argument, tries to escape first."""


@dataclass
class Planned:
    name: str
    kind: str  # command, multi, fails, zoo
    spec: dict
    cancel_after: float | None
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    id: int | None = None
    acked_at: float = 0.0
    cancel: str | None = None  # accepted | ended
    cancel_answered: float = 0.0  # time.time() of the cancel's answer
    kills: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, stack: Up, soak_dir: Path, rng: random.Random):
        self.stack, self.dir, self.rng = stack, soak_dir, rng
        self.url = stack.url
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.local = threading.local()
        self.jobs: list[Planned] = []
        self.by_id: dict[int, Planned] = {}
        self.kills: list[dict] = []
        self.probes: list[tuple[float, bool, float, int | None]] = []  # t, good, latency, status
        self.seen: dict[int, list[tuple[float, int, int | None]]] = collections.defaultdict(list)  # t, attempt, step
        self.doubles: list[dict] = []
        self.n = 0
        sock = EmbeddedRedis.running_socket(stack.home / "redis")
        self.socket = str(sock) if sock else ""
        self.errors: list[str] = []  # what failed in the soak's own threads
        self.full = threading.Event()  # set while the disk is (about to be) full: no kills then
        self.full_windows: list[tuple[float, float, float, float]] = []  # monotonic from, to; epoch from, to
        self.full_skipped: str | None = None
        self.kill_lock = threading.Lock()
        self.respawns: list[float] = []  # how long each `up` took to come back
        self.pairs = 0

    def guarded(self, fn, *args) -> None:
        """fn(*args); what it raises is kept as a problem (a thread that dies must not pass in silence)."""
        try:
            fn(*args)
        except Exception:
            self.errors.append(f"{fn.__name__}: {traceback.format_exc()}")

    # -- HTTP, through outages ------------------------------------------------------------------------------------
    def session(self) -> requests.Session:
        if not hasattr(self.local, "s"):
            self.local.s = requests.Session()
        return self.local.s

    def call(self, method: str, path: str, limit_s: float = 180.0, **kw) -> requests.Response:
        """One request, repeated through connection errors and 502–504 until `limit_s` (and, for a submission
        under an Idempotency-Key, through the 409 of a first try still being processed, as its message says)."""
        deadline = time.monotonic() + limit_s
        while True:
            try:
                resp = self.session().request(method, f"{self.url}{path}", timeout=10, **kw)
                pending = resp.status_code == 409 and "still being processed" in resp.text
                if resp.status_code not in (502, 503, 504) and not pending:
                    return resp
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"{method} {path}: no answer in {limit_s}s"
            time.sleep(0.5)

    # -- the stream of jobs ---------------------------------------------------------------------------------------
    def plan(self) -> Planned:
        self.n += 1
        name = f"soak-{self.n}"
        kind = self.rng.choices(("command", "multi", "fails", "zoo", "escape"), weights=(6, 2, 1, 1, 1))[0]
        cancel_after = self.rng.uniform(0, 8) if self.rng.random() < 0.12 else None
        if kind == "zoo":
            spec = {"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": ZOO_STEPS, "batch_size": 128}}
        else:
            steps = self.rng.randint(15, 45)
            fail_at = steps // 2 if kind == "fails" else 0
            argv = [sys.executable, "-c", SCRIPT, str(steps), str(self.rng.choice((0.1, 0.2))), str(fail_at)]
            argv += ["escape"] if kind == "escape" else []
            env = {"SOAK_DIR": str(self.dir), "SOAK_HOME": str(self.stack.home), "SOAK_SOCKET": self.socket}
            spec = {"command": argv, "env": env}
            if kind == "multi":
                spec["workers"] = 2
        return Planned(name, kind, {**spec, "name": name, "max_retries": MAX_RETRIES}, cancel_after)

    def submitter(self) -> None:
        while not self.stopping.is_set():
            queued = self.call("GET", "/api/v1/jobs?status=queued&limit=500").json()["jobs"]
            if len(queued) < QUEUE_DEPTH:
                job = self.plan()
                resp = self.call("POST", "/api/v1/jobs", json=job.spec, headers={"Idempotency-Key": job.key})
                assert resp.status_code in (200, 201), resp.text
                job.id, job.acked_at = resp.json()["id"], time.monotonic()
                with self.lock:
                    self.jobs.append(job)
                    self.by_id[job.id] = job
                if job.cancel_after is not None:
                    threading.Timer(job.cancel_after, self.guarded, (self.cancel, job)).start()
            self.stopping.wait(0.5)

    def cancel(self, job: Planned) -> None:
        resp = self.call("POST", f"/api/v1/jobs/{job.id}/cancel")
        assert resp.status_code in (200, 202, 409), resp.text
        job.cancel = "accepted" if resp.status_code in (200, 202) else "ended"
        job.cancel_answered = time.time()

    # -- watching -------------------------------------------------------------------------------------------------
    def prober(self) -> None:
        while not self.stopping.is_set():
            t0 = time.monotonic()
            try:
                resp = self.session().get(f"{self.url}/healthz", timeout=PROBE_LIMIT_S)
                took = time.monotonic() - t0
                self.probes.append((t0, resp.status_code == 200 and took <= PROBE_LIMIT_S, took, resp.status_code))
            except requests.RequestException:
                self.probes.append((t0, False, time.monotonic() - t0, None))
            self.stopping.wait(max(0.0, PROBE_EVERY_S - (time.monotonic() - t0)))

    def watcher(self) -> None:
        """Progress as the API shows it, and the attempt marks of live processes, once a second."""
        while not self.stopping.is_set():
            try:
                resp = self.session().get(f"{self.url}/api/v1/jobs?status=starting,running&limit=500", timeout=5)
                if resp.status_code == 200:
                    now = time.monotonic()
                    for j in resp.json()["jobs"]:
                        self.seen[j["id"]].append((now, j["attempt"], j["progress"]["step"]))
            except requests.RequestException:
                pass
            runs: dict[tuple[int, str], set[str]] = collections.defaultdict(set)
            for pid in marked():  # the machine's, not only this `up`'s: a killed one's may linger
                env = environ(pid)
                if "GPUDECK_RUN_ID" not in env or "GPUDECK_JOB_ID" not in env:
                    continue  # (gone since the scan, its pid already another's)
                # gpudeck-J-A.TOKEN (an attempt) or gpudeck-J-gG-tK.TOKEN (task K of placement G): one run of a
                # task has one mark and token; two of them alive at once ran it twice
                task = re.search(r"-t(\d+)\.", env["GPUDECK_RUN_ID"])
                runs[(int(env["GPUDECK_JOB_ID"]), task.group(1) if task else "0")].add(env["GPUDECK_RUN_ID"])
            self.doubles += [{"job": j, "task": t, "runs": sorted(r)} for (j, t), r in runs.items() if len(r) > 1]
            self.stopping.wait(1.0)

    # -- chaos ----------------------------------------------------------------------------------------------------
    def killer(self) -> None:
        deck: list[str] = []
        self.stopping.wait(20)
        while not self.stopping.wait(self.rng.uniform(*KILL_EVERY_S)):
            kinds = []
            for _ in range(2 if self.rng.random() < PAIR_P else 1):
                if not deck:
                    deck = list(KINDS)
                    self.rng.shuffle(deck)
                kinds.append(deck.pop())
            kinds.sort(key=lambda k: k == "up")  # (what `up` leaves stops with it: the other first)
            self.pairs += len(set(kinds)) > 1
            if self.full.is_set():
                continue
            with self.kill_lock:
                for kind in dict.fromkeys(kinds):
                    deadline = time.monotonic() + 20
                    while not self.stopping.is_set() and not self.kill(kind):
                        if time.monotonic() > deadline:  # none to kill
                            self.kills.append({"t": time.monotonic(), "kind": kind, "pid": None, "jobs": []})
                            break
                        time.sleep(0.5)

    def kill(self, kind: str) -> bool:
        up = self.stack.proc.pid
        family = {p: (parent(p), cmdline(p)) for p in descendants(up)}
        workers = [p for p, (pp, cmd) in family.items() if pp == up and b"worker" in cmd]
        horses = [p for p, (pp, cmd) in family.items() if pp in workers and cmd == family[pp][1]]
        if kind == "up":
            victims = [up]
        elif kind == "worker":
            victims = workers
        elif kind == "horse":
            victims = horses
        elif kind == "trainer":
            victims = [p for p, (pp, _) in family.items() if pp in horses and "GPUDECK_RUN_ID" in environ(p)]
        elif kind == "api":
            victims = [p for p, (pp, cmd) in family.items() if pp == up and b"api.serve" in cmd]
        else:  # (one a killed `up` left is adopted by the next: not its child)
            data = str(self.stack.home / "redis")
            victims = [p for p in all_pids() if b"redis-server" in cmdline(p) and cwd(p) == data]
        if not victims:
            return False
        victim = self.rng.choice(victims)
        jobs = set()
        for p in {victim} | descendants(victim):
            if "GPUDECK_JOB_ID" in (env := environ(p)):
                jobs.add(int(env["GPUDECK_JOB_ID"]))
        if kind in LOST:  # a job placed on the worker, or between placement and its trainer, has no process yet
            worker_pids = set(workers) if kind == "up" else {victim if kind == "worker" else family[victim][0]}
            try:
                listed = self.session().get(f"{self.url}/api/v1/workers", timeout=2).json()["workers"]
                names = {w["name"] for w in listed if w["pid"] in worker_pids}
                jobs |= {w["job_id"] for w in listed if w["pid"] in worker_pids and w["job_id"] is not None}
                active = self.session().get(f"{self.url}/api/v1/jobs?status=starting,running&limit=500", timeout=2)
                jobs |= {j["id"] for j in active.json()["jobs"] if j.get("worker") in names}
            except (requests.RequestException, ValueError, KeyError):  # (an answer of an outage: 503)
                pass
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.kills.append({"t": time.monotonic(), "at": time.time(), "kind": kind, "pid": victim, "jobs": sorted(jobs)})
        if kind == "up":  # its API and workers stop with it (SIGTERM); a service manager starts it again
            self.stack.proc.wait()
            self.respawns.append(self.stack.respawn())
        with self.lock:
            for job_id in jobs:
                if job_id in self.by_id:
                    self.by_id[job_id].kills.append(kind)
        return True

    def filler(self) -> None:
        """Midway, fill the disk under the home (a small filesystem of its own) for FULL_HOLD_S, then free it."""
        if self.stopping.wait(SOAK_S * FULL_AT):
            return
        self.full.set()
        with self.kill_lock:  # no kill under way
            filler = self.stack.home / "soak-filler.bin"
            with open(filler, "wb") as f:
                try:
                    os.posix_fallocate(f.fileno(), 0, max(1, shutil.disk_usage(self.stack.home).free - 4096))
                except OSError:
                    pass
            t0, e0 = time.monotonic(), time.time()
            self.stopping.wait(FULL_HOLD_S)
            filler.unlink()
            self.full_windows.append((t0, time.monotonic(), e0, time.time()))
        self.stopping.wait(10)  # Redis writes again, the jobs it held up are recorded: then kills again
        self.full.clear()

    def run(self) -> None:
        targets = [self.submitter, self.prober, self.watcher]
        threads = [threading.Thread(target=self.guarded, args=(t,), daemon=True) for t in targets]
        chaos = [self.killer] + ([self.filler] if self.full_skipped is None else [])
        killer = [threading.Thread(target=self.guarded, args=(t,), daemon=True) for t in chaos]
        for t in [*threads, *killer]:
            t.start()
        self.started = time.monotonic()
        time.sleep(SOAK_S)
        self.stopping.set()
        for t in killer:
            t.join(150)
        threads[0].join(60)  # no more submissions; cancels already timed may still come
        self.stopping.clear()
        watch = [threading.Thread(target=self.guarded, args=(t,), daemon=True) for t in (self.prober, self.watcher)]
        for t in watch:
            t.start()
        self.settle()
        self.stopping.set()
        for t in watch:
            t.join(10)

    def settle(self, limit_s: float = 600.0) -> None:
        """Until every acknowledged job has ended (and every timed cancel has been sent)."""
        deadline = time.monotonic() + limit_s
        for job in self.jobs:
            remaining = max(1, int(deadline - time.monotonic()))
            resp = self.call("GET", f"/api/v1/jobs/{job.id}/wait?timeout={min(remaining, 600)}", limit_s=remaining)
            assert resp.json()["status"] in ENDED, f"job {job.id} has not ended: {resp.json()}"
        while any(j.cancel_after is not None and j.cancel is None for j in self.jobs):
            assert time.monotonic() < deadline, "a timed cancel was never sent"
            time.sleep(0.5)


ENDED = ("succeeded", "failed", "canceled")


def cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def all_pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def marked() -> list[int]:
    """Live processes of the machine that carry a gpudeck job's marks (a bench machine runs only this soak)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and cmdline(pid := int(entry.name)):
            env = environ(pid)
            if "GPUDECK_RUN_ID" in env and "GPUDECK_JOB_ID" in env:
                found.append(pid)
    return found


def strays() -> dict[int, str]:
    """Live strays of escaping jobs (they dropped every gpudeck mark): pid -> the job that left it."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and cmdline(pid := int(entry.name)) and "SOAK_STRAY" in (env := environ(pid)):
            found[pid] = env["SOAK_STRAY"]
    return found


def ours(home: Path, soak_dir: Path) -> list[int]:
    """Live processes of this soak anywhere on the machine: working in its home, or carrying its marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            pid = int(entry.name)
            if cmdline(pid) and (  # a zombie has none
                cwd(pid).startswith(str(home))
                or environ(pid).get("SOAK_DIR") == str(soak_dir)
                or "SOAK_STRAY" in environ(pid)
                or str(home).encode() in cmdline(pid)
            ):
                found.append(pid)
    return found


def epoch(iso: str | None) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp() if iso else 0.0


def rec_created(rec: dict) -> float:
    return epoch(rec["created_at"])


# -- the verdicts -------------------------------------------------------------------------------------------------
STOP_LANDS_S = 3.0
"""A work-horse reads a stop request within this long (it polls); work finished sooner than that after a cancel
was answered finished before the stop reached it."""


def expected(
    job: Planned, rec: dict, ended: dict[int, float], full: list[tuple[float, float]], kills: list[dict]
) -> str | None:
    """What is wrong with how `job` ended, given what was done to it (`ended`: when each command job's script
    wrote its last step, from the ledger; `full`: when the disk was full, epoch seconds; `kills`: every kill);
    None when nothing. A kill of a worker counts for the jobs it held, and for a job placed on it while it lay
    dead (the scheduler learns of a death when the worker's lease lapses): any kill of a worker between the
    job's submission and its last start."""
    status, reason, attempt = rec["status"], rec.get("reason"), rec["attempt"]
    last_start = epoch(rec.get("started_at")) or float("inf")
    around = sum(1 for k in kills if k["pid"] and k["kind"] in LOST and rec_created(rec) <= k["at"] <= last_start)
    lost = max(sum(job.kills.count(kind) for kind in LOST), around)
    ran = (epoch(rec.get("first_started_at") or rec["created_at"]), epoch(rec.get("ended_at")) or float("inf"))
    if status == "failed" and reason == "disk_full":
        hit = any(ran[0] <= b and a <= ran[1] for a, b in full)
        return None if hit else f"ended disk_full, but it never ran while the disk was full: {rec.get('message')}"
    if job.cancel == "accepted":
        if status == "canceled":
            return None
        # A cancel answered while the job's work was finishing: the table keeps the success (nothing was stopped).
        if job.kind == "zoo":  # a trainer that saw the SIGTERM exits 143 (canceled); this one trained every step
            finished = (rec.get("result") or {}).get("steps") == ZOO_STEPS
        else:
            finished = ended.get(job.id, float("inf")) <= job.cancel_answered + STOP_LANDS_S
        if status == "succeeded" and finished:
            return None
        return f"canceled, but ended {status}/{reason}"
    if "trainer" in job.kills:
        ok = status == "failed" and reason == "exit_nonzero"
        return None if ok else f"its trainer was killed, but it ended {status}/{reason}"
    if job.kind == "fails":
        ok = status == "failed" and reason == "exit_nonzero" and "status 3" in (rec.get("message") or "")
        return None if ok else f"failing by design, but it ended {status}/{reason}: {rec.get('message')}"
    if attempt - 1 > lost:
        return f"{attempt} attempts, but only {lost} kills of its worker, work-horse or up: {rec.get('message')}"
    if status == "failed" and reason == "worker_lost" and lost > MAX_RETRIES:
        return None
    return None if status == "succeeded" else f"ended {status}/{reason}: {rec.get('message')}"


def went_back(soak: Soak, job: Planned, rec: dict, points: list[dict], log: str) -> str | None:
    seen = [(a, s) for _, a, s in soak.seen.get(job.id, []) if s is not None]
    if job.kind != "zoo":
        steps = [p["step"] for p in points if "step" in p]
        if any(b <= a for a, b in zip(steps, steps[1:])):
            return f"metric steps repeat or fall: {steps}"
        shown = [s for _, s in seen]
        if any(b < a for a, b in zip(shown, shown[1:])):
            return f"the progress the API showed fell: {seen}"
        return None
    if rec["attempt"] == 1 or not seen:
        return None
    progress = rec["progress"]
    spe = round(progress["total_steps"] / progress["epochs"]) if progress.get("epochs") else None
    before = [s for a, s in seen if a < rec["attempt"]]
    resumed = [int(m) for m in re.findall(r"resumed from \S+ at step (\d+)", log)]
    if spe and before:
        floor = (max(before) // spe - 1) * spe
        if max(resumed, default=0) < floor:
            return f"seen at step {max(before)} ({spe} steps an epoch), resumed at {max(resumed, default=0)}"
    return None


@pytest.mark.timeout(SOAK_S + 1500)  # the soak, then up to 10 minutes to settle and the checks
def test_chaos_soak(tmp_path, child_env):
    rng = random.Random(SEED)
    soak_dir = tmp_path / "soak"
    (soak_dir / "locks").mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={HOME_SIZE}", "gpudeck-soak", str(home)], capture_output=True, text=True
    )
    # (a floor of 0: the full disk reaches Redis and the jobs, not only the API's refusals)
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1", "GPUDECK_MIN_FREE": "0"}
    stack = Up(home, env, tmp_path / "up.log", args=("--cpu-workers", "2"))
    soak = Soak(stack, soak_dir, rng)
    if mounted.returncode != 0:
        soak.full_skipped = f"no full-disk phase: cannot mount a filesystem for the home ({mounted.stderr.strip()})"
    problems: list[str] = []
    attempts: collections.Counter = collections.Counter()
    cut, escapes = 0, []
    records: dict[int, dict] = {}  # of the jobs a problem names, for whoever reads the report
    try:
        soak.run()
        # Nothing of an ended job may still run while the stack is up.
        left = [p for p in descendants(stack.proc.pid) if "GPUDECK_RUN_ID" in environ(p)]
        problems += [f"process {p} of an ended job still runs: {cmdline(p)[:120]!r}" for p in left]

        listed, cursor = [], ""
        while True:
            page = soak.call("GET", f"/api/v1/jobs?limit=500{cursor}").json()
            listed += page["jobs"]
            if page["next_cursor"] is None:
                break
            cursor = f"&cursor={page['next_cursor']}"
        names = collections.Counter(j["name"] for j in listed)
        problems += [f"{n} is listed {c} times" for n, c in names.items() if c > 1]
        problems += [f"{j.name} (job {j.id}) acknowledged, not listed" for j in soak.jobs if not names[j.name]]
        problems += [f"job {j['id']} ({j['name']}) was never acknowledged" for j in listed if j["id"] not in soak.by_id]

        outcomes: collections.Counter = collections.Counter()
        ledger, cut = [], 0  # each job's own (a job writes only inside its job dir: its sandbox)
        for path in sorted(home.glob("jobs/*/soak-ledger.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    ledger.append(json.loads(line))
                except ValueError:
                    cut += 1  # a line the full disk cut short
        ended = {e["job"]: e["t"] for e in ledger if e["event"] == "end" and e["task"] == 0}
        worked = collections.Counter((e["job"], e["task"]) for e in ledger if e["event"] == "end" and e["did"] > 0)
        full = [(a, b) for _, _, a, b in soak.full_windows]
        for job in soak.jobs:
            rec = soak.call("GET", f"/api/v1/jobs/{job.id}").json()
            outcomes[(job.kind, rec["status"], rec.get("reason"))] += 1
            attempts[rec["attempt"]] += 1
            if why := expected(job, rec, ended, full, soak.kills):
                problems.append(f"job {job.id} ({job.kind}, kills {job.kills}, cancel {job.cancel}): {why}")
                records[job.id] = {k: v for k, v in rec.items() if k not in ("spec", "environment")}
            if job.kind != "zoo":
                ends = [worked[(job.id, t)] for t in range(2 if job.kind == "multi" else 1)]
                if rec["status"] == "succeeded" and ends != [1] * len(ends):
                    problems.append(f"job {job.id} ({job.kind}) succeeded; its tasks ran to their end {ends} times")
                # (a full disk can fail a script after its last line: Python's flush at exit)
                late = "trainer" in job.kills or rec.get("reason") == "disk_full"
                if rec["status"] == "failed" and any(ends) and job.kind != "multi" and not late:
                    problems.append(f"job {job.id} ({job.kind}) failed, but its script ran to its end")
            points = soak.call("GET", f"/api/v1/jobs/{job.id}/metrics").json()["train"]
            log = soak.call("GET", f"/api/v1/jobs/{job.id}/logs").text
            if why := went_back(soak, job, rec, points, log):
                problems.append(f"job {job.id} ({job.kind}): {why}")

        problems += [f"ran twice at once: {e}" for e in ledger if e["event"] == "double"]
        escapes = [e for e in ledger if e["event"] == "escape"]
        problems += [f"job {e['job']} escaped its sandbox: {e['reached']}" for e in escapes if e["reached"]]
        problems += [f"an escaping job wrote outside its job dir: {p}" for p in [*home.glob("pwned-*")]]
        problems += [f"an escaping job wrote outside its job dir: {p}" for p in [*soak_dir.glob("pwned-*")]]
        problems += [f"a stray of job {j} (pid {p}) outlived it" for p, j in strays().items()]
        problems += [f"the soak's own thread failed: {e}" for e in soak.errors]
        problems += [f"two attempts' processes alive at once: {d}" for d in soak.doubles]
        starts = collections.defaultdict(list)
        for e in ledger:
            if e["event"] == "start":
                starts[(e["job"], e["task"])].append(e["step"])
        problems += [f"job {j} task {t} resumed further back: {s}" for (j, t), s in starts.items() if s != sorted(s)]

        windows = outage_windows(soak)
        outside = [
            (round(t - soak.started, 1), round(took, 2), code)
            for t, good, took, code in soak.probes
            if not good and not any(a <= t <= b for a, b, _ in windows)
        ]
        problems += [f"/healthz missed outside an outage at {t}s: {took}s, status {code}" for t, took, code in outside]
        unclosed = [(kind, round(a - soak.started, 1)) for a, b, kind in windows if b == float("inf")]
        problems += [f"the {kind} killed at {t}s never answered again" for kind, t in unclosed]
    finally:
        stop_code = None
        if stack.proc.poll() is None:
            stack.stop()
            stop_code = stack.proc.returncode
        stack.kill()
        keep = Path(os.environ.get("GPUDECK_SOAK_LOGS", tmp_path / "logs"))  # (the tmpfs goes)
        shutil.copytree(home / "logs", keep, dirs_exist_ok=True)
    time.sleep(1)
    problems += [f"left behind after the stop: {p} {cmdline(p)[:120]!r}" for p in ours(home, soak_dir)]
    if mounted.returncode == 0:
        subprocess.run(["umount", "-l", str(home)], check=False)
    if stop_code not in (0, None):
        problems.append(f"gpudeck up exited {stop_code} on SIGTERM")

    kinds = collections.Counter(k["kind"] for k in soak.kills if k["pid"])
    longest = {  # the longest run of failed probes
        kind: max((b - a for a, b, k in windows if k == kind and b != float("inf")), default=0.0)
        for kind in ("api", "redis", "up", "full")
    }
    report = {
        "seed": SEED,
        "seconds": SOAK_S,
        "jobs": len(soak.jobs),
        "by_kind": dict(collections.Counter(j.kind for j in soak.jobs)),
        "cancels": dict(collections.Counter(j.cancel for j in soak.jobs if j.cancel)),
        "kills": dict(kinds),
        "kills_with_nothing_to_kill": sum(1 for k in soak.kills if not k["pid"]),
        "two_kills_at_once": soak.pairs,
        "up_back_after_s": [round(t, 1) for t in soak.respawns],
        "full_disk": soak.full_skipped
        or {"held_s": [round(b - a, 1) for a, b, _, _ in soak.full_windows], "ledger_lines_cut": cut},
        "escapes_tried": len(escapes),
        "jobs_hit_by_kills": sum(1 for j in soak.jobs if j.kills),
        "jobs_by_attempts": dict(sorted(attempts.items())),
        "outcomes": {"/".join(str(x) for x in k): v for k, v in sorted(outcomes.items(), key=str)},
        "probes": len(soak.probes),
        "probes_missed_in_outages": sum(1 for _, good, _, _ in soak.probes if not good) - len(outside),
        "longest_unavailable_s": {k: round(v, 1) for k, v in longest.items()},
        "problems": problems,
        "problem_records": records,
    }
    print(json.dumps(report, indent=1))
    (Path(os.environ.get("GPUDECK_SOAK_REPORT", tmp_path / "soak.json"))).write_text(json.dumps(report, indent=1))
    assert not problems, "\n".join(problems[:40])
    assert kinds and len(soak.jobs) >= SOAK_S / 10  # it did what it says


def outage_windows(soak: Soak) -> list[tuple[float, float, str]]:
    """(from, to, kind) of each outage the soak caused: the failed probes within OUTAGE_S of a kill of the API or
    the Redis, each run of them up to the good probe after it. (A killed API master's workers may answer for a
    moment more before the new master listens: one kill can make two short runs.)"""
    out = []
    full = [{"t": a, "kind": "full", "pid": 0, "to": b} for a, b, _, _ in soak.full_windows]
    for k in [*soak.kills, *full]:
        if not (k["pid"] is not None and k["kind"] in ("api", "redis", "up", "full")):
            continue
        until = k.get("to", k["t"]) + OUTAGE_S
        probes = [p for p in soak.probes if k["t"] - PROBE_LIMIT_S <= p[0] <= until]
        run_from = None
        for t, good, _, _ in probes:
            if not good and run_from is None:
                run_from = t
            elif good and run_from is not None:
                out.append((run_from, t, k["kind"]))
                run_from = None
        if run_from is not None:
            back = next((t for t, good, _, _ in soak.probes if t > run_from and good), float("inf"))
            out.append((run_from, back, k["kind"]))
    return out
