"""Benchmark: what a short zoo job costs from its process's start to its end, and what its end costs. Not run by
`make test` (whose ~90 trainers of a few steps each are mostly this cost).

Run: make bench PYTEST_ARGS="-k trainer_end -s"
The CPU seconds (user + system) of `python -m models.train` for a 2-step ResNet-20 and LeNet on the synthetic set,
against the same trainer ended the interpreter's usual way (`sys.exit(main())`: TensorFlow torn down), each kind
alternated, the medians over RUNS. The ratio is this run's; the figures depend on the machine.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys

import pytest

RUNS = int(os.environ.get("GPUDECK_TRAINER_END_RUNS", "5"))
SPECS = {
    "resnet20": {"model": "resnet20", "dataset": "synthetic", "params": {"steps": 2}},
    "lenet": {"model": "lenet", "dataset": "synthetic", "params": {"steps": 2}},
}
TORN_DOWN = "import sys; from models.train import main; sys.exit(main(sys.argv[1:]))"
"""The trainer as it ended before models.train.leave."""


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    """The CPU seconds of one finished child (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.timeout(3600)
def test_a_short_jobs_cpu_with_and_without_tensorflows_teardown(tmp_path):
    env = {**os.environ, "TF_NUM_INTRAOP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    for kind, spec in SPECS.items():
        spec_file = tmp_path / f"{kind}.json"
        spec_file.write_text(json.dumps(spec))
        seen: dict[str, list[float]] = {"leave": [], "teardown": []}
        for i in range(RUNS):
            for how, head in (("leave", ["-m", "models.train"]), ("teardown", ["-c", TORN_DOWN])):
                job_dir = tmp_path / f"{kind}-{how}-{i}"
                args = ["--spec", str(spec_file), "--job-dir", str(job_dir)]
                seen[how].append(cpu_of([sys.executable, *head, *args], env))
                assert json.loads((job_dir / "result.json").read_text())["steps"] == 2
        leave, teardown = statistics.median(seen["leave"]), statistics.median(seen["teardown"])
        print(
            f"\n{kind}, 2 steps: {leave:.2f} CPU-s a job ending with models.train.leave, {teardown:.2f} with "
            f"TensorFlow's teardown: {leave / teardown:.2f}x ({teardown - leave:.2f} CPU-s less a job)"
        )
        assert leave < teardown
