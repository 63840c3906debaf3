"""Adaptive search: a sweep whose trials Optuna samples (random, TPE) and stops early (asynchronous successive
halving, median), each trial an ordinary gpudeck job (queued, pinned, preemptible, retried, logged, charted).

What Optuna does: the samplers, the pruners' decisions (which trial to stop at which rung), and the study itself,
kept in gpudeck's Redis by its journal storage (`gpudeck:sweep:N:optuna:*`), so a search survives restarts.
What gpudeck adds: the metric of any job without an SDK (a zoo trainer's points, a script's TensorBoard files or
metrics.jsonl, all read by the work-horse), reported to the study as points arrive; a stopped trial ends
`succeeded` with reason `stopped_early` (its checkpoint kept, its GPU to the next trial); the budget (trials,
concurrency, time); and the driving loop (`Searcher`), run by one process at a time under a lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from jobs import export, queues, tokens
from jobs import spec as spec_mod
from jobs.errors import Forbidden, GpudeckError, NotFound
from jobs.export import FAILED_SEARCH
from jobs.keys import (
    SEARCHER_LOCK_KEY,
    SEARCHING_KEY,
    optuna_prefix,
    sweep_key,
    sweep_stop_key,
    sweep_trials_key,
)
from jobs.periodic import Periodic
from jobs.searchspace import (  # noqa: F401 (the request half: re-exported from its old home)
    DEFAULT_CONCURRENT,
    DEFAULT_TRIALS,
    DISTRIBUTIONS,
    FIELDS,
    MAX_BUDGET_S,
    MAX_CHOICES,
    MAX_INT,
    MAX_TRIALS,
    METRIC_NAME,
    PROBED,
    SEARCHES,
    STOPPINGS,
    ZOO_METRICS,
    apply,
    is_search,
    key_problem,
    parse,
    trial_name,
)
from jobs.settings import Settings
from jobs.store import JobStore
from models.states import ENDED, Reason, Status

log = logging.getLogger(__name__)

MEDIAN_STARTUP = 3
"""Trials the median rule lets finish before it stops any (Optuna's n_startup_trials)."""
SEARCH_EVERY_S = 0.25
"""How often the searcher reads the running trials' new points and launches trials while a search runs (its
pruner's reaction must fit short trials: jobs.run.pump.TRIAL_EVERY_S); IDLE_EVERY_S while none does."""
IDLE_EVERY_S = 1.0
LOCK_S = 30
"""How long the searcher's lock lasts: a round takes well under a second, and a process killed in one (`gpudeck up`
stopped) holds every search up this long at most."""


# -- Optuna ------------------------------------------------------------------------------------------------------
def _optuna() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@contextlib.contextmanager
def _accepted() -> Iterator[None]:
    """Optuna's journal on Redis and TPE's constant liar are marked experimental (since Optuna 3.1 and 2.8): we
    choose them knowingly (the journal keeps a search in our Redis; the liar spreads concurrent trials apart)."""
    optuna = _optuna()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def study(redis_url: str, record: dict[str, Any], create: bool = False) -> Any:
    """The search's Optuna study, in its Redis journal."""
    optuna = _optuna()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalRedisBackend

    with _accepted():
        storage = JournalStorage(JournalRedisBackend(redis_url, prefix=optuna_prefix(record["id"])))
    direction = "maximize" if record["mode"] == "max" else "minimize"
    name = f"gpudeck-sweep-{record['id']}"
    if create:
        return optuna.create_study(storage=storage, study_name=name, direction=direction, pruner=pruner(record))
    return optuna.load_study(storage=storage, study_name=name, pruner=pruner(record))


def pruner(record: dict[str, Any]) -> Any:
    optuna = _optuna()
    rule = record.get("stopping")
    if rule is None:
        return optuna.pruners.NopPruner()
    if rule["kind"] == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=rule["min_steps"], reduction_factor=rule["reduction_factor"], min_early_stopping_rate=0
        )
    return optuna.pruners.MedianPruner(n_startup_trials=MEDIAN_STARTUP, n_warmup_steps=rule["min_steps"])


def sampler(record: dict[str, Any], number: int) -> Any:
    """The sampler of trial `number`, seeded from the search's seed and the number: the same seed proposes the
    same trials, and a searcher started again after a restart does not propose the first ones again."""
    optuna = _optuna()
    seed = (record["seed"] + number * 7919) % 2**31
    if record["search"] == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = max(2, min(10, record["max_trials"] // 3))
    with _accepted():
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def _distribution(dist: dict[str, Any]) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    ((kind, arg),) = dist.items()
    if kind == "choice":
        return CategoricalDistribution(arg)
    if kind == "int":
        return IntDistribution(arg[0], arg[1])
    return FloatDistribution(float(arg[0]), float(arg[1]), log=kind == "loguniform")


def _rung_of(frozen: Any) -> int | None:
    """The highest rung of successive halving a trial reached (None: none)."""
    rungs = [int(k.rpartition("_")[2]) for k in frozen.system_attrs if k.startswith("completed_rung_")]
    return max(rungs) if rungs else None


# -- the trials --------------------------------------------------------------------------------------------------
def trials(redis: Redis, sweep_id: int) -> list[dict[str, Any]]:
    raw = redis.hgetall(sweep_trials_key(sweep_id))
    return sorted((json.loads(v) for v in raw.values()), key=lambda t: t["number"])


def _save(redis: Redis, sweep_id: int, trial: dict[str, Any]) -> None:
    redis.hset(sweep_trials_key(sweep_id), str(trial["number"]), json.dumps(trial))


def launch(
    redis: Redis, settings: Settings, record: dict[str, Any], the_study: Any, asked: Any = None
) -> dict[str, Any]:
    """Ask the study for the next trial (or take `asked`, one asked before) and submit its job; the trial as kept."""
    if asked is None:
        number = len(the_study.get_trials(deepcopy=False))
        the_study.sampler = sampler(record, number)
        asked = the_study.ask({k: _distribution(d) for k, d in record["space"].items()})
    values = {k: asked.params[k] for k in record["space"]}
    trial = {"number": asked.number, "trial_id": asked._trial_id, "job": None, "values": values, "state": "running"}
    trial.update(seen=0, step=None, last=None, metric=None, rung=None, stopped_early=False, outcome=None)
    spec = apply(record["base"], values)
    spec["tags"] = [*(spec.get("tags") or []), f"sweep:{record['id']}"]
    spec["name"] = trial_name(record["base"], record["id"], values)
    extra = {"sweep_id": record["id"], "trial": {"number": asked.number, "values": values}}
    if record.get("owner"):
        extra["owner"] = record["owner"]
    allowed = dataclasses.replace(settings, command_jobs=True)  # (the search's maker was allowed to run it)
    try:
        if record.get("owner"):  # (and still is, when each trial starts: a revoked or narrowed token launches none)
            who, why = tokens.named(redis, record["owner"])
            refused = (why, {}) if who is None else tokens.refusal(who, spec, spec_mod.is_command(spec))
            if refused is not None:
                raise Forbidden(refused[0], refused[1])
        job = queues.submit(redis, spec, allowed, extra=extra)
    except GpudeckError as exc:  # (a dataset deleted since, a quota lowered): the trial fails, the search stops
        the_study.tell(asked.number, state=_optuna().trial.TrialState.FAIL)
        trial.update(state="ended", outcome="fail", error=str(exc))
        _save(redis, record["id"], trial)
        redis.set(sweep_stop_key(record["id"]), f"trial {asked.number} could not be submitted: {exc}")
        return trial
    trial["job"] = job["id"]
    _save(redis, record["id"], trial)
    return trial


def start(redis: Redis, settings: Settings, record: dict[str, Any]) -> list[dict[str, Any]]:
    """Create the study and launch the first trials (as many as may run at once)."""
    the_study = study(settings.redis_url or "", record, create=True)
    first = min(record["max_concurrent"], record["max_trials"])
    launched = [launch(redis, settings, record, the_study) for _ in range(first)]
    redis.sadd(SEARCHING_KEY, record["id"])
    return launched


def drive(redis: Redis, settings: Settings, record: dict[str, Any], the_study: Any) -> bool:
    """One round of a search: report the running trials' new points, stop the ones the rule stops, tell the
    study how ended ones ended, launch trials while the budget lasts. False once the search is over."""
    optuna = _optuna()
    store = JobStore(redis)
    sweep_id, metric = record["id"], record["metric"]
    now = time.time()
    over = record.get("time_budget") is not None and now - record["created_at"] >= record["time_budget"]
    if over and not redis.exists(sweep_stop_key(sweep_id)):
        redis.set(sweep_stop_key(sweep_id), f"its time budget of {record['time_budget']} s ran out")
    kept = trials(redis, sweep_id)
    for trial in kept:
        if trial["state"] == "ended" or trial["job"] is None:
            continue
        try:
            rec = store.get(trial["job"])
        except NotFound:  # deleted
            _tell(the_study, trial, optuna.trial.TrialState.FAIL)
            _save(redis, sweep_id, trial)
            continue
        status = Status(rec["status"])
        handle = optuna.trial.Trial(the_study, trial["trial_id"])
        _, points = store.read_points_raw(trial["job"], trial["seen"])
        for n, raw in points:
            trial["seen"] = n
            point = json.loads(raw)
            value, step = point.get(metric), point.get("step")  # (a diverged NaN too: the rule stops it)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            step = step if isinstance(step, int) else (trial["step"] or 0) + 1
            if trial["step"] is not None and step <= trial["step"]:
                continue
            handle.report(float(value), step)
            trial["step"], trial["last"] = step, float(value)
            if (
                record.get("stopping")
                and trial["state"] == "running"
                and status == Status.RUNNING
                and not over
                and handle.should_prune()
            ):
                rung = _rung_of(the_study._storage.get_trial(trial["trial_id"]))
                stop = {"step": step, "rung": rung, "metric": metric, "value": _finite(value)}
                store.update(trial["job"], early_stop=stop)
                store.request_stop(trial["job"], Reason.STOPPED_EARLY.value, only_first=True)
                trial.update(state="stopping", rung=rung, stopped_early=True)
                log.info("sweep %s: trial %s (job %s) stopped at step %s, rung %s", sweep_id, trial["number"],
                         trial["job"], step, rung)  # fmt: skip
                break
        if over and trial["state"] == "running" and status in (Status.STARTING, Status.RUNNING):
            store.update(trial["job"], early_stop={"step": trial["step"], "rung": None, "metric": metric,
                                                   "value": _finite(trial["last"]), "budget": True})  # fmt: skip
            store.request_stop(trial["job"], Reason.STOPPED_EARLY.value, only_first=True)
            trial.update(state="stopping", stopped_early=True)
        if status.ended:
            _end(the_study, trial, rec, metric)
        _save(redis, sweep_id, trial)
    stopped = redis.exists(sweep_stop_key(sweep_id))
    # A trial the study gave out whose job was never submitted (the process that asked for it went between the two,
    # as when `gpudeck up` stops; perhaps before the study had set all its values): submitted now, its missing values
    # sampled, so no trial number is skipped and none stays running forever.
    known = {t["number"] for t in kept}
    for orphan in the_study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if orphan.number not in known:
            log.info("sweep %s: trial %s was asked for but never launched", sweep_id, orphan.number)
            if stopped:
                _tell(the_study, {"trial_id": orphan._trial_id, "number": orphan.number}, optuna.trial.TrialState.FAIL)
            else:
                kept.append(launch(redis, settings, record, the_study, _completed(the_study, record, orphan)))
    active = sum(t["state"] != "ended" for t in kept)
    while not stopped and active < record["max_concurrent"] and len(kept) < record["max_trials"]:
        kept.append(launch(redis, settings, record, the_study))
        active += 1
        stopped = redis.exists(sweep_stop_key(sweep_id))
    return not (all(t["state"] == "ended" for t in kept) and (stopped or len(kept) >= record["max_trials"]))


def _completed(the_study: Any, record: dict[str, Any], orphan: Any) -> Any:
    """An orphan trial with a value for every key of the space: those the study had set, the rest sampled now (as
    `ask` would have: the trial's own seeded sampler)."""
    the_study.sampler = sampler(record, orphan.number)
    trial = _optuna().trial.Trial(the_study, orphan._trial_id)
    for name, dist in record["space"].items():
        if name not in orphan.params:
            trial._suggest(name, _distribution(dist))
    return trial


def _finite(value: Any) -> float | None:
    return value if isinstance(value, float) and math.isfinite(value) else None


def _tell(the_study: Any, trial: dict[str, Any], state: Any, value: float | None = None) -> None:
    try:
        the_study.tell(trial["number"], value if state.name == "COMPLETE" else None, state=state)
    except (ValueError, RuntimeError) as exc:  # (told already: a round that died after telling, before saving)
        log.info("sweep trial %s: %s", trial["number"], exc)
    trial.update(state="ended", outcome=state.name.lower())


def _end(the_study: Any, trial: dict[str, Any], rec: dict[str, Any], metric: str) -> None:
    """Tell the study how a trial's job ended: stopped early (pruned), succeeded with its metric (the result's
    value, else the last reported), or failed (a failure, a divergence, a cancel, no metric at all)."""
    states = _optuna().trial.TrialState
    if rec["status"] == Status.SUCCEEDED.value and rec.get("reason") == Reason.STOPPED_EARLY.value:
        trial.update(stopped_early=True, rung=(rec.get("early_stop") or {}).get("rung", trial.get("rung")))
        trial["metric"] = trial["last"]
        _tell(the_study, trial, states.PRUNED)
        return
    value = (rec.get("result") or {}).get(metric)
    value = value if isinstance(value, (int, float)) and not isinstance(value, bool) else trial["last"]
    if rec["status"] == Status.SUCCEEDED.value and value is not None and math.isfinite(value):
        trial.update(metric=float(value), stopped_early=False)  # (a stop that came after its last step: complete)
        _tell(the_study, trial, states.COMPLETE, float(value))
        return
    trial["metric"] = None
    _tell(the_study, trial, states.FAIL)


# -- what a search looks like ------------------------------------------------------------------------------------
def rungs(record: dict[str, Any], kept: list[dict[str, Any]], frozen: list[Any]) -> list[dict[str, Any]]:
    """The rungs of successive halving: each one's step and the trials that reached it, with their value there
    and whether they went on past it."""
    rule = record.get("stopping")
    if not rule or rule["kind"] != "asha":
        return []
    by_number = {t["number"]: t for t in kept}
    out: list[dict[str, Any]] = []
    for k in range(64):
        reached = [f for f in frozen if f"completed_rung_{k}" in f.system_attrs]
        if not reached:
            break
        entries = []
        for f in reached:
            t = by_number.get(f.number, {})
            stopped_here = t.get("stopped_early") and t.get("rung") == k
            entries.append({"job": t.get("job"), "trial": f.number, "value": f.system_attrs[f"completed_rung_{k}"],
                            "passed": not stopped_here})  # fmt: skip
        out.append({"rung": k, "step": rule["min_steps"] * rule["reduction_factor"] ** k, "trials": entries})
    return out


def frozen_trials(redis_url: str, record: dict[str, Any]) -> list[Any]:
    try:
        return study(redis_url, record).get_trials(deepcopy=False)
    except KeyError:  # (no study: made by an older gpudeck, or deleted)
        return []


class Searcher(Periodic):
    """In each worker: drives the running searches, one process at a time (a lock held for the round)."""

    what, every_s = "searcher", IDLE_EVERY_S
    forks_wait = True  # (its rounds import Optuna, and numpy with it: jobs.periodic.FORK_GUARD)

    def __init__(self, settings: Settings):
        super().__init__(settings.redis_url or "", "gpudeck-searcher")
        self.settings = settings
        self.studies: dict[int, Any] = {}

    def round(self) -> None:
        ids = [int(i) for i in self.redis.smembers(SEARCHING_KEY)]
        self.every_s = SEARCH_EVERY_S if ids else IDLE_EVERY_S
        if not ids:
            return
        # (a round takes well under a second; a process killed in one holds the lock this long at most)
        self.under_lock(SEARCHER_LOCK_KEY, LOCK_S, lambda: self._drive_all(ids))

    def _drive_all(self, ids: list[int]) -> None:
        for sweep_id in sorted(ids):
            raw = self.redis.get(sweep_key(sweep_id))
            if raw is None:
                self.redis.srem(SEARCHING_KEY, sweep_id)
                continue
            try:  # (each search in its own error boundary: one that raises fails, the others go on)
                record = json.loads(raw)
                if sweep_id not in self.studies:
                    self.studies[sweep_id] = study(self.settings.redis_url or "", record)
                going = drive(self.redis, self.settings, record, self.studies[sweep_id])
            except RedisError:
                raise  # (an outage is the round's, not the search's: Periodic rides it out)
            except Exception as exc:  # noqa: BLE001
                log.exception("sweep %s: its search failed", sweep_id)
                fail(self.redis, sweep_id, exc)
                going = False
            if not going:
                self.redis.srem(SEARCHING_KEY, sweep_id)
                self.studies.pop(sweep_id, None)
                log.info("sweep %s: search over", sweep_id)
                export_last(self.redis, sweep_id)


def export_last(redis: Redis, sweep_id: int) -> None:
    """A search that ended: its trial that ended last is exported again where trials are exported to MLflow
    (jobs.export, idempotent: the same run), which ends the sweep's parent run there now that nothing of it runs
    (its own export may have come first)."""
    store = JobStore(redis)
    ended = []
    for t in trials(redis, sweep_id):
        try:
            rec = store.get(t["job"]) if t.get("job") is not None else None
        except NotFound:
            continue
        if rec is not None and rec["status"] in ENDED:
            ended.append(rec)
    if ended:
        export.enqueue(redis, max(ended, key=lambda r: float(r.get("ended_at") or 0)))


def forget(redis: Redis, sweep_id: int) -> None:
    """A search whose creation failed midway, gone: its record, trials, stop and Optuna study (a trial it submitted
    already stays an ordinary job)."""
    keys = [sweep_key(sweep_id), sweep_trials_key(sweep_id), sweep_stop_key(sweep_id)]
    keys += list(redis.scan_iter(match=optuna_prefix(sweep_id) + "*", count=1000))
    redis.delete(*keys)
    redis.srem(SEARCHING_KEY, sweep_id)


FAILED = FAILED_SEARCH
"""How the stop of a search that raised begins (the sweep's state is then `failed`)."""


def fail(redis: Redis, sweep_id: int, exc: BaseException) -> None:
    """A search whose round raised launches no more trials and says why (its running trials finish)."""
    redis.set(sweep_stop_key(sweep_id), f"{FAILED}{type(exc).__name__}: {str(exc)[:300]}")


def stop(redis: Redis, sweep_id: int, why: str = "stopped on request") -> None:
    """Launch no more trials of a sweep, which exists (running ones finish; control.stop_sweep also cancels a
    grid's queued jobs)."""
    redis.set(sweep_stop_key(sweep_id), why, nx=True)
