"""The chaos soak (issue 17): the real stack (`gpudeck up --cpu-workers 2`, embedded Redis, command jobs on) for
GPUDECK_SOAK_S seconds (default 600) under a steady stream of small jobs — single and two-worker command jobs,
command jobs that fail by design, zoo jobs (lenet) — some of which it cancels, while at random moments it
`kill -9`s a worker, a work-horse, a trainer, the API master or the Redis. Then it lets everything settle and
judges:

- every acknowledged job exists exactly once (submissions carry an Idempotency-Key and are retried through
  outages) and has ended as what was done to it says: canceled when a cancel was accepted; failed
  `exit_nonzero` when its trainer was killed or it failed by design; otherwise succeeded, retried no more often
  than its worker or work-horse was killed (failed `worker_lost` only once more kills hit it than it may retry);
- no job ran twice at the same time (each command task holds an flock on `$JOB_DIR/soak-lock-TASK` while it
  runs and writes `double` to its job's ledger when it finds it taken; no two live processes carry different
  attempt marks of one job at any scan);
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
import json
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.support.live import cmdline, descendants, environ, parent
from tests.support.stack import Up

SOAK_S = float(os.environ.get("GPUDECK_SOAK_S", "600"))
SEED = int(os.environ.get("GPUDECK_SOAK_SEED", str(random.randrange(10**6))))
KILL_EVERY_S = (12.0, 30.0)
"""Seconds between two kills (uniform)."""
KINDS = ("worker", "horse", "trainer", "api", "redis")
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
ledger(event="end", step=steps)
"""
"""A command job of `steps` steps of `pause` s; checkpoints every step; exits 3 at `fail_at` (0: never)."""


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

    # -- HTTP, through outages ------------------------------------------------------------------------------------
    def session(self) -> requests.Session:
        if not hasattr(self.local, "s"):
            self.local.s = requests.Session()
        return self.local.s

    def call(self, method: str, path: str, limit_s: float = 180.0, **kw) -> requests.Response:
        """One request, repeated through connection errors and 502–504 until `limit_s`."""
        deadline = time.monotonic() + limit_s
        while True:
            try:
                resp = self.session().request(method, f"{self.url}{path}", timeout=10, **kw)
                if resp.status_code not in (502, 503, 504):
                    return resp
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"{method} {path}: no answer in {limit_s}s"
            time.sleep(0.5)

    # -- the stream of jobs ---------------------------------------------------------------------------------------
    def plan(self) -> Planned:
        self.n += 1
        name = f"soak-{self.n}"
        kind = self.rng.choices(("command", "multi", "fails", "zoo"), weights=(6, 2, 1, 1))[0]
        cancel_after = self.rng.uniform(0, 8) if self.rng.random() < 0.12 else None
        if kind == "zoo":
            spec = {"model": "lenet", "dataset": "synthetic:16x16x3", "params": {"steps": ZOO_STEPS, "batch_size": 128}}
        else:
            steps = self.rng.randint(15, 45)
            fail_at = steps // 2 if kind == "fails" else 0
            argv = [sys.executable, "-c", SCRIPT, str(steps), str(self.rng.choice((0.1, 0.2))), str(fail_at)]
            spec = {"command": argv, "env": {"SOAK_DIR": str(self.dir)}}
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
                    threading.Timer(job.cancel_after, self.cancel, (job,)).start()
            self.stopping.wait(0.5)

    def cancel(self, job: Planned) -> None:
        resp = self.call("POST", f"/api/v1/jobs/{job.id}/cancel")
        assert resp.status_code in (200, 409), resp.text
        job.cancel = "accepted" if resp.status_code == 200 else "ended"
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
            runs: dict[int, set[str]] = collections.defaultdict(set)
            for pid in descendants(self.stack.proc.pid):
                env = environ(pid)
                if "GPUDECK_RUN_ID" in env and "GPUDECK_JOB_ID" in env:
                    # gpudeck-J-A.TOKEN (an attempt) or gpudeck-J-gG-tK.TOKEN (task K of placement G)
                    runs[int(env["GPUDECK_JOB_ID"])].add(re.sub(r"-t\d+$", "", env["GPUDECK_RUN_ID"].split(".")[0]))
            self.doubles += [{"job": j, "runs": sorted(r)} for j, r in runs.items() if len(r) > 1]
            self.stopping.wait(1.0)

    # -- chaos ----------------------------------------------------------------------------------------------------
    def killer(self) -> None:
        deck: list[str] = []
        self.stopping.wait(20)
        while not self.stopping.wait(self.rng.uniform(*KILL_EVERY_S)):
            if not deck:
                deck = list(KINDS)
                self.rng.shuffle(deck)
            kind = deck.pop()
            deadline = time.monotonic() + 20
            while not self.stopping.is_set() and not self.kill(kind):
                if time.monotonic() > deadline:
                    self.kills.append({"t": time.monotonic(), "kind": kind, "pid": None, "jobs": []})  # none to kill
                    break
                time.sleep(0.5)

    def kill(self, kind: str) -> bool:
        up = self.stack.proc.pid
        family = {p: (parent(p), cmdline(p)) for p in descendants(up)}
        workers = [p for p, (pp, cmd) in family.items() if pp == up and b"worker" in cmd]
        horses = [p for p, (pp, cmd) in family.items() if pp in workers and cmd == family[pp][1]]
        if kind == "worker":
            victims = workers
        elif kind == "horse":
            victims = horses
        elif kind == "trainer":
            victims = [p for p, (pp, _) in family.items() if pp in horses and "GPUDECK_RUN_ID" in environ(p)]
        elif kind == "api":
            victims = [p for p, (pp, cmd) in family.items() if pp == up and b"api.serve" in cmd]
        else:
            victims = [p for p, (pp, cmd) in family.items() if pp == up and b"redis-server" in cmd]
        if not victims:
            return False
        victim = self.rng.choice(victims)
        jobs = set()
        for p in {victim} | descendants(victim):
            if "GPUDECK_JOB_ID" in (env := environ(p)):
                jobs.add(int(env["GPUDECK_JOB_ID"]))
        if kind in ("worker", "horse"):  # a task between placement and its trainer has no process of the job yet
            worker_pid = victim if kind == "worker" else family[victim][0]
            try:
                for w in self.session().get(f"{self.url}/api/v1/workers", timeout=2).json()["workers"]:
                    if w["pid"] == worker_pid and w["job_id"] is not None:
                        jobs.add(w["job_id"])
            except (requests.RequestException, ValueError):
                pass
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.kills.append({"t": time.monotonic(), "kind": kind, "pid": victim, "jobs": sorted(jobs)})
        with self.lock:
            for job_id in jobs:
                if job_id in self.by_id:
                    self.by_id[job_id].kills.append(kind)
        return True

    def run(self) -> None:
        threads = [threading.Thread(target=t, daemon=True) for t in (self.submitter, self.prober, self.watcher)]
        killer = threading.Thread(target=self.killer, daemon=True)
        for t in [*threads, killer]:
            t.start()
        self.started = time.monotonic()
        time.sleep(SOAK_S)
        self.stopping.set()
        killer.join(60)
        threads[0].join(60)  # no more submissions; cancels already timed may still come
        self.stopping.clear()
        watch = [threading.Thread(target=t, daemon=True) for t in (self.prober, self.watcher)]
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


def ours(home: Path, soak_dir: Path) -> list[int]:
    """Live processes of this soak anywhere on the machine: working in its home, or carrying its marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            pid = int(entry.name)
            if cmdline(pid) and (  # a zombie has none
                cwd(pid).startswith(str(home))
                or environ(pid).get("SOAK_DIR") == str(soak_dir)
                or str(home).encode() in cmdline(pid)
            ):
                found.append(pid)
    return found


# -- the verdicts -------------------------------------------------------------------------------------------------
STOP_LANDS_S = 3.0
"""A work-horse reads a stop request within this long (it polls); work finished sooner than that after a cancel
was answered finished before the stop reached it."""


def expected(job: Planned, rec: dict, ended: dict[int, float]) -> str | None:
    """What is wrong with how `job` ended, given what was done to it (`ended`: when each command job's script
    wrote its last step, from the ledger); None when nothing."""
    status, reason, attempt = rec["status"], rec.get("reason"), rec["attempt"]
    lost = job.kills.count("worker") + job.kills.count("horse")
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
        return f"{attempt} attempts, but only {lost} kills of its worker or work-horse"
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
    env = {**child_env, "GPUDECK_COMMAND_JOBS": "1"}
    stack = Up(home, env, tmp_path / "up.log", args=("--cpu-workers", "2"))
    soak = Soak(stack, soak_dir, rng)
    problems: list[str] = []
    attempts: collections.Counter = collections.Counter()
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
        ledger = [  # each job's own (a job writes only inside its job dir: its sandbox)
            json.loads(line)
            for path in sorted(home.glob("jobs/*/soak-ledger.jsonl"))
            for line in path.read_text().splitlines()
        ]
        ended = {e["job"]: e["t"] for e in ledger if e["event"] == "end" and e["task"] == 0}
        for job in soak.jobs:
            rec = soak.call("GET", f"/api/v1/jobs/{job.id}").json()
            outcomes[(job.kind, rec["status"], rec.get("reason"))] += 1
            attempts[rec["attempt"]] += 1
            if why := expected(job, rec, ended):
                problems.append(f"job {job.id} ({job.kind}, kills {job.kills}, cancel {job.cancel}): {why}")
            points = soak.call("GET", f"/api/v1/jobs/{job.id}/metrics").json()["train"]
            log = soak.call("GET", f"/api/v1/jobs/{job.id}/logs").text
            if why := went_back(soak, job, rec, points, log):
                problems.append(f"job {job.id} ({job.kind}): {why}")

        problems += [f"ran twice at once: {e}" for e in ledger if e["event"] == "double"]
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
    time.sleep(1)
    problems += [f"left behind after the stop: {p} {cmdline(p)[:120]!r}" for p in ours(home, soak_dir)]
    if stop_code not in (0, None):
        problems.append(f"gpudeck up exited {stop_code} on SIGTERM")

    kinds = collections.Counter(k["kind"] for k in soak.kills if k["pid"])
    longest = {  # the longest run of failed probes
        kind: max((b - a for a, b, k in windows if k == kind and b != float("inf")), default=0.0)
        for kind in ("api", "redis")
    }
    report = {
        "seed": SEED,
        "seconds": SOAK_S,
        "jobs": len(soak.jobs),
        "by_kind": dict(collections.Counter(j.kind for j in soak.jobs)),
        "cancels": dict(collections.Counter(j.cancel for j in soak.jobs if j.cancel)),
        "kills": dict(kinds),
        "kills_with_nothing_to_kill": sum(1 for k in soak.kills if not k["pid"]),
        "jobs_hit_by_kills": sum(1 for j in soak.jobs if j.kills),
        "jobs_by_attempts": dict(sorted(attempts.items())),
        "outcomes": {"/".join(str(x) for x in k): v for k, v in sorted(outcomes.items(), key=str)},
        "probes": len(soak.probes),
        "probes_missed_in_outages": sum(1 for _, good, _, _ in soak.probes if not good) - len(outside),
        "longest_unavailable_s": {k: round(v, 1) for k, v in longest.items()},
        "problems": problems,
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
    for k in soak.kills:
        if not (k["pid"] and k["kind"] in ("api", "redis")):
            continue
        probes = [p for p in soak.probes if k["t"] - PROBE_LIMIT_S <= p[0] <= k["t"] + OUTAGE_S]
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
