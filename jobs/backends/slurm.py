"""A lab's Slurm (GPUDECK_BACKEND=slurm): Slurm places, orders and plans; gpudeck's agent (jobs.onslurm, run by
`gpudeck up --backend slurm` in place of workers) sends the lines' jobs to sbatch and reads squeue back."""

from __future__ import annotations

from redis import Redis

from jobs import onslurm, slurm
from jobs.backends.base import Backend, Starts
from jobs.errors import ConfigError, Conflict, NotImplementedHere, ValidationError
from jobs.keys import SLURM_WAKE_KEY
from jobs.record import Job, Kept
from jobs.settings import Settings


class SlurmBackend(Backend):
    name = "slurm"
    agent_module = "jobs.slurmagent"

    def default_gpus(self, redis: Redis) -> int:
        """One: the cluster's GPUs (there are no workers of gpudeck's to count)."""
        return 1

    def admit(self, redis: Redis, spec: Kept, settings: Settings) -> None:
        """ValidationError naming the field of what Slurm does not run as gpudeck would: a GPU share (Slurm's shard
        GRES is its operator's); NotImplementedHere (501) for a session, which is not on Slurm yet."""
        if spec.is_session:
            raise NotImplementedHere(
                "sessions do not run on Slurm yet (GPUDECK_BACKEND=slurm): on the cluster, `salloc --gres=gpu:1` "
                "then `srun --pty bash` gives the same shell on a GPU node",
                {"field": "kind"},
            )
        try:
            slurm.sbatch_options(0, spec, slurm.SlurmOptions(), output="-")
        except slurm.NotOnSlurm as exc:
            raise ValidationError({exc.field: f"{str(exc).split(': ', 1)[1]} (GPUDECK_BACKEND=slurm)"}) from None

    def queued(self, redis: Redis, job_id: int, settings: Settings) -> None:
        redis.rpush(SLURM_WAKE_KEY, job_id)  # (the agent's round, woken, sends it to sbatch at once)

    def lines(self, redis: Redis, recs: list[Job], settings: Settings) -> tuple[dict[int, int], Starts]:
        """No places (Slurm orders its queue); the starts Slurm's backfill planned, as squeue said."""
        return {}, {r["id"]: onslurm.expected_start(r) for r in recs if r["status"] == "queued"}

    def reprioritize(self, redis: Redis, rec: Job, priority: str, settings: Settings) -> None:
        """A job Slurm has gets a QOS or a nice value through scontrol."""
        onslurm.reprioritize(settings, rec, priority)

    def move(self, redis: Redis, job_id: int, before: int | None, after: int | None) -> Job:
        raise Conflict(
            "on Slurm, Slurm orders its queue (by priority, fair share and age): a job has no place to move to; "
            'change its priority instead (PATCH with {"priority": …}: a QOS or nice value through scontrol)',
            {"field": "body"},
        )

    def check_up(self, gpus: str | None, cpu_workers: int | None) -> None:
        if gpus is not None or cpu_workers is not None:
            raise ConfigError(
                "--gpus and --cpu-workers start gpudeck's workers; on Slurm the compute nodes are Slurm's"
            )


BACKEND = SlurmBackend
