"""`python -m models.train --spec spec.json --job-dir DIR`: train one job spec, standalone or for a worker."""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

from models.protocol import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_OK, EXIT_STOPPED

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def main(argv: list[str] | None = None) -> int:
    """Exit codes of models.protocol: EXIT_OK, EXIT_BAD_INPUT, EXIT_STOPPED (after a checkpoint), EXIT_DIVERGED;
    1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m models.train", description=__doc__)
    parser.add_argument("--spec", required=True, type=Path, help="job spec JSON file")
    parser.add_argument("--job-dir", required=True, type=Path, help="where logs, checkpoints, results go")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout, force=True
    )
    log = logging.getLogger("models.train")
    log.setLevel(logging.INFO)  # ours at INFO; TensorFlow's Python loggers stay at WARNING
    try:
        spec = json.loads(args.spec.read_text())
    except (OSError, ValueError) as exc:
        log.error("cannot read spec %s: %s", args.spec, exc)
        return EXIT_BAD_INPUT
    from models import params as params_mod
    from models.catalog import model_info, parse_dataset

    problems = params_mod.validate(spec.get("params") or {})
    if not isinstance(spec.get("model"), str) or model_info(spec["model"]) is None:
        problems["model"] = f"unknown model {spec.get('model')!r}"
    try:
        parse_dataset(spec.get("dataset"))
    except ValueError as exc:
        problems["dataset"] = str(exc)
    if problems:
        for field, problem in problems.items():
            log.error("bad spec: %s: %s", field, problem)
        return EXIT_BAD_INPUT
    from models.datasets import DatasetError, must_exist

    dataset = parse_dataset(spec.get("dataset_path") or spec["dataset"])  # (a worker's folder of an upload first)
    try:
        if dataset.kind == "path":
            must_exist(Path(dataset.path))
    except DatasetError as exc:  # (as the trainer says it, without 3 s of TensorFlow's import first)
        log.error("bad input: %s", exc)
        return EXIT_BAD_INPUT

    from models.trainer import BadInput, Diverged, Stopped, Trainer

    try:
        Trainer(spec, args.job_dir).run()
    except Stopped:
        return EXIT_STOPPED
    except Diverged:
        return EXIT_DIVERGED
    except BadInput as exc:
        log.error("bad input: %s", exc)
        return EXIT_BAD_INPUT
    return EXIT_OK


def not_in_a_notebook() -> None:
    """Keras imports IPython, where it is installed, to tell whether it runs in a notebook (0.2 CPU-s at every
    trainer's start where Jupyter shares the environment, as a notebook session's needs it to): a trainer never does,
    so IPython reads as absent here. Only where the process starts as a trainer (this module's or models.warm's
    `__main__`), before Keras is imported."""
    sys.modules.setdefault("IPython", None)  # type: ignore[arg-type]  # (None there: "not installed")


def leave(code: int) -> NoReturn:
    """Exit with `code` now, without the interpreter's teardown. When `main` returns, the job is written and closed
    (result.json, model, checkpoints, metrics, TensorBoard, the event pipe); tearing TensorFlow down after that (its
    runtime, graphs, threads and every module) cost 0.8 CPU-s a job here, what a short job's training costs. An
    exception out of `main` still exits the usual way, with its traceback. The exit handlers still run (logging's
    shutdown; AutoGraph's, which deletes the module it writes to the temp dir for each function it converts: the
    training and evaluation steps are traced without it, but a trainer outside the sandbox's private /tmp once
    left ~6 files behind a job); they cost nothing measurable."""
    atexit._run_exitfuncs()  # (CPython's, what the interpreter's own exit calls first; multiprocessing calls it too)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    not_in_a_notebook()
    leave(main())
