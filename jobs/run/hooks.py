"""What one kind of attempt does at each phase of jobs.run.runner.JobRun, as an object the attempt is given (the way
rq's worker calls a job's callbacks around its one `perform`, or dramatiq its middleware around a message): `Hooks`,
a single job's; `jobs.run.taskrun.TaskHooks`, one task of a job of several; `jobs.run.sessionrun.SessionHooks`, a
session's. Each hook is handed the attempt (`Run`: what hooks read and set of it)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from redis import Redis

from jobs import gang, lifecycle, outcome
from jobs.archives import tree_bytes
from jobs.keys import rq_job_id
from jobs.record import Kept
from jobs.run import launch, sandbox
from jobs.run.launch import Attempt
from jobs.run.proc import Started
from jobs.run.projectenv import Building
from jobs.run.warm import Adopted, Invocation, PythonWant, Warm, python_invocation, want_of
from jobs.store import StopListener
from models import protocol


class Run(Building, Protocol):
    """What hooks read and set of the attempt they serve (jobs.run.runner.JobRun)."""

    gen: int | None
    redis: Redis
    spec: Kept
    command: bool
    prefix: str
    preamble: list[str]
    refused: str | None
    no_space: str | None
    log_full: bool
    resumes: int | None
    data_dir: Path | None
    lifeline: tuple[int, int]
    warm: Warm | None
    adopted: Adopted | None
    stops: StopListener
    python_want: PythonWant | None

    def drop_warm(self) -> None: ...


class Hooks:
    """A single job's attempt (the defaults; a task's and a session's hooks override some)."""

    one_of_several = False
    """A task of a job of several workers (it starts cold: jobs.run.warm)."""

    def begin(self, run: Run) -> None:
        """The attempt was made (before its claim): what this kind sets of it (a task's prefix, who reports)."""

    def claim(self, run: Run) -> bool:
        """Take the job the scheduler placed on this worker (jobs.gang.claim); False when it is not this worker's."""
        gpu_ids = gang.claim(run.store, run.job_id, run.gen, run.ctx.name)
        if gpu_ids is None:
            return False
        run.ctx = replace(run.ctx, gpu_ids=gpu_ids)
        return True

    def prepare(self, run: Run, spec: Kept) -> dict[str, str] | None:
        """Extra environment for the trainer; None when the attempt must stand down without training."""
        return {}

    def stand_down(self, run: Run) -> str:
        return run.store.get(run.job_id).status

    def plan_launch(
        self, run: Run, spec: Kept, extra_env: dict[str, str], events_w: int, built: Path | None = None
    ) -> launch.Launch:
        """What this attempt runs (Refused when it cannot start here); a command's variables go in its record."""
        attempt = Attempt(run.job_id, run.attempt, run.run_id, run.job_dir)
        readable = [run.data_dir] if run.data_dir is not None else []
        if not run.command:
            own = run.job_id if run.attempt > 1 else None  # (an id reused after a new Redis: not its objects)
            said = launch.take_checkpoints(run.ctx.settings, run.job_dir, run.resumes, own)
            run.preamble += [said] if said and said not in run.preamble else []
            how = launch.trainer(run.ctx, attempt, events_w, extra_env)
            if run.warm is not None:  # (it runs in the warm trainer's sandbox, made already)
                return how
            return launch.sandboxed(run.ctx, how, run.job_dir, readable, run.lifeline[0])
        launch.may_run_unsandboxed(run.ctx, run.owner)
        how = launch.command(run.ctx, attempt, spec, run.data_dir, extra_env, built)
        run.preamble += launch.sandbox_notes(run.ctx.settings, spec, run.job_dir)  # (a host path it cannot use)
        readable += [built] if built is not None else []
        if run.reports:
            run.output.command_launched(how, spec, run.job_dir, built)
        if self.warm_interpreter(run, spec, how, built):  # (it runs in the warm interpreter's sandbox, made already)
            return how
        return launch.sandboxed(run.ctx, how, run.job_dir, readable, run.lifeline[0])

    def warm_interpreter(self, run: Run, spec: Kept, how: launch.Launch, built: Path | None) -> bool:
        """Whether a command job starts in the warm interpreter its worker handed it (jobs.run.warm, issue 65 #2);
        the log says so, or why not. A Python job that could have notes its environment (`run.python_want`): the
        next warm interpreter of these GPUs is made for it."""
        if not run.ctx.settings.warm or self.one_of_several:  # (then no warm process was handed either)
            return False
        inv = python_invocation(spec.command)
        want = want_of(how, spec, inv, built, run.ctx.settings, run.owner) if isinstance(inv, Invocation) else inv
        run.python_want = want if isinstance(want, PythonWant) else None
        if run.warm is None:
            return False
        why = run.warm.unusable_command(how, inv, want, run.data_dir)
        if why is None:
            names = run.warm.want.imports if run.warm.want else ()
            many = f"{len(names)} module{'s' if len(names) > 1 else ''}"
            took = f"{many} imported ahead: {', '.join(names[:5])}{', …' if names[5:] else ''}"
            ready = f"a Python ready {time.time() - run.warm.born:.0f}s"
            run.preamble.append(f"gpudeck: warm start ({ready}, {took if names else 'nothing imported ahead'})")
            return True
        run.preamble.append(f"gpudeck: cold start: the warm interpreter here cannot run it ({why})")
        run.drop_warm()
        return False

    def start(self, run: Run, how: launch.Launch, fds: tuple[int, ...]) -> Started:
        """Start the attempt's process, or hand the job to the warm trainer it chose (OSError when its job dir
        cannot move there)."""
        if run.warm is not None:
            user = sandbox.job_user(run.ctx.settings.job_user)
            if run.warm.want is not None:  # (a warm interpreter: a command job)
                run.adopted = run.warm.begin_command(how, run.spec, run.job_dir, user)
            else:
                run.adopted = run.warm.begin(how.env, list(launch.TRAINER_ARGS), run.job_dir, user)
            return run.adopted
        return run.spawn(how, fds)

    def beat(self, run: Run) -> None:
        run.store.beat(run.job_id, run.ctx.name)

    def stop_reason(self, run: Run) -> str | None:
        return run.store.stop_reason(run.job_id) or run.stops.heard_now()

    def grace(self, run: Run, reason: str | None) -> float:
        """Seconds between SIGTERM and SIGKILL for a stop with this reason."""
        return run.ctx.stop_grace_s

    def started(self, run: Run, pid: int) -> None:
        fields = {"pid": pid, "spawned_at": time.time(), "warm_start": run.adopted is not None}
        run.store.update(run.job_id, **fields, **self.command_running(run))
        if run.command:
            run.output.went_running = True  # (told by the pump, with a trainer's `running` event)

    def rq_id(self, run: Run) -> str:
        """The RQ id of this attempt (what its processes' mark begins with)."""
        return rq_job_id(run.job_id, run.attempt)

    def facts(self, run: Run, returncode: int | None, oom_before: int | None) -> outcome.Facts:
        """What the job-end table (jobs.outcome) weighs of this attempt."""
        killed = oom_before is not None and (launch.oom_kills() or 0) > oom_before
        attempt = {"refusal": run.refused, "no_space": run.no_space is not None, "environment": run.env_failed}
        return run.output.facts(returncode, self.stop_reason(run), killed, run.command, run.log_full, **attempt)

    def finish(self, run: Run, returncode: int | None, oom_before: int | None) -> str:
        """Record the honest final state (jobs.outcome decides, jobs.lifecycle applies): succeeded, canceled,
        failed with a typed reason, or queued again after a worker_lost stop while retries last."""
        self.command_result(run, returncode)
        end = outcome.of_job(self.facts(run, returncode, oom_before))
        kept = launch.newest_checkpoint(run.job_dir) if end.requeue and not run.command else None
        status = lifecycle.end(  # (its own attempt only: never the next one, should the reaper have moved on)
            run.redis,
            run.job_id,
            end,
            of_attempt=run.attempt,
            log_tail=run.output.tail,
            disk_bytes=tree_bytes(run.job_dir),
            checkpoint_step=kept,
        )
        return status or run.store.get(run.job_id).status

    # -- for the hooks of every kind ---------------------------------------------------------------------------
    @staticmethod
    def command_running(run: Run) -> dict[str, Any]:
        """A command job is running once its process is: there is no trainer to say so."""
        return run.output.command_running(run.spec.total_steps) if run.command else {}

    @staticmethod
    def command_result(run: Run, returncode: int | None) -> None:
        """A command that exited 0 reports its result (the run that reports for the job)."""
        if run.command and run.reports and returncode == protocol.EXIT_OK:
            run.output.command_result(run.job_dir, run.spec.classes)
