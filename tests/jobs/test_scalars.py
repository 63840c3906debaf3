"""A command job's curves from what its script writes: TensorBoard event files (simple_value and tensor
scalars, train and validation runs) and metrics.jsonl, read incrementally without TensorFlow, and not sent twice
when a retried attempt reads the same job dir."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from jobs import scalars
from jobs.scalars import ScalarReader, field_name, read_result

scalars._loader_module()  # tensorboard on its TensorFlow-free path in this process too, as in a work-horse

from tests.support.events import scalar_event, tensor_event, write  # noqa: E402


def test_tags_map_to_the_point_fields_of_zoo_jobs():
    assert field_name("epoch_loss", False) == "loss"
    assert field_name("batch_accuracy", False) == "accuracy"
    assert field_name("epoch_loss", True) == "val_loss"
    assert field_name("sparse_categorical_accuracy", True) == "val_accuracy"
    assert field_name("learning_rate", False) == "lr"
    assert field_name("my/custom_thing", False) == "my/custom_thing"
    assert field_name("val_loss", False) == "val_loss"


def test_event_files_become_points_as_they_grow_without_tensorflow(tmp_path: Path):
    train = write(tmp_path / "tensorboard" / "train", scalar_event(0, epoch_loss=2.0, epoch_accuracy=0.125))
    valid = write(
        tmp_path / "tensorboard" / "validation",
        tensor_event(0, "epoch_loss", 2.5),
        tensor_event(0, "histogram", [[0, 1, 2]], plugin="histograms"),
    )
    reader = ScalarReader(tmp_path)
    run = {"run": "tensorboard"}  # (its train and validation folders: one run)
    assert reader.poll() == [{"step": 0, **run, "loss": 2.0, "accuracy": 0.125}, {"step": 0, **run, "val_loss": 2.5}]
    assert reader.poll() == []  # nothing new, nothing sent again
    late = tensor_event(1, "epoch_loss", 1.0)
    late.wall_time = 1_700_000_123.25  # (a point carries when its writer wrote it: MLflow's time axis, issue 67 #3)
    train.add_event(late)
    train.add_event(tensor_event(1, "learning_rate", 0.0625))
    train.add_event(tensor_event(1, "epoch_images", [1.0, 2.0]))  # not a scalar: left out
    train.flush()
    assert reader.poll() == [{"step": 1, **run, "loss": 1.0, "lr": 0.0625, "time": 1_700_000_123.25}]
    assert reader.last == {"loss": 1.0, "accuracy": 0.125, "val_loss": 2.5, "lr": 0.0625}
    # The worker process never imports TensorFlow to read them.
    code = (
        "import sys; from pathlib import Path; from jobs.scalars import ScalarReader; "
        f"ScalarReader(Path({str(tmp_path)!r})).poll(); print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    train.close()
    valid.close()


def test_a_later_attempt_sends_only_what_is_new_and_shipped_files_are_not_read(tmp_path: Path):
    w = write(tmp_path / "tb", scalar_event(1, loss=1.0), scalar_event(2, loss=0.5))
    first = ScalarReader(tmp_path)
    assert [p["step"] for p in first.poll()] == [1, 2]
    first.save()
    w.add_event(scalar_event(3, loss=0.25))
    w.flush()
    write(tmp_path / "src" / "old_logs", scalar_event(9, loss=9.0))
    shipped = {str(p.relative_to(tmp_path)) for p in (tmp_path / "src").rglob("*tfevents*")}
    again = ScalarReader(tmp_path, ignore=shipped)  # the retry of a killed attempt, same job dir
    assert again.poll() == [{"step": 3, "run": "tb", "loss": 0.25}]
    w.close()


def test_metrics_jsonl_lines_are_read_when_complete(tmp_path: Path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "loss": 0.9, "note": "text is dropped"}) + "\n" + '{"step": 2, "lo')
    reader = ScalarReader(tmp_path)
    before = time.time()
    (first,) = reader.poll()
    assert first == {"step": 1, "loss": 0.9, "time": first["time"]}
    assert before - 0.01 <= first["time"] <= time.time() + 0.01  # (a line without a time: when it was read)
    with open(path, "a") as f:
        f.write('ss": 0.8, "time": 1700000000.5}\nnot json\n')
    assert reader.poll() == [{"step": 2, "loss": 0.8, "time": 1700000000.5}]  # (its own, where it says)
    reader.save()
    assert ScalarReader(tmp_path).poll() == []


def test_result_json_must_be_an_object(tmp_path: Path):
    assert read_result(tmp_path) is None
    (tmp_path / "result.json").write_text("[1, 2]")
    assert read_result(tmp_path) is None
    (tmp_path / "result.json").write_text('{"test_accuracy": 0.9}')
    assert read_result(tmp_path) == {"test_accuracy": 0.9}


def test_a_line_as_a_terminal_leaves_it():
    """Issue 24 #5: carriage returns overwrite, backspaces step back, ESC[K erases, colours go."""
    from jobs.run.pump import as_shown

    assert as_shown("plain line") == "plain line"
    assert as_shown("1/3 [>..]\r2/3 [=>.]\r3/3 [==>]") == "3/3 [==>]"
    assert as_shown("loss: 0.512\b\b\b499") == "loss: 0.499"
    assert as_shown("\x1b[32mok\x1b[0m done") == "ok done"
    assert as_shown("a long first state\rshort\x1b[K") == "short"
    assert as_shown("abc\rxy") == "xyc"  # (a shorter update leaves the rest, as on a terminal)


def test_progress_follows_the_loss_clock_and_never_reads_past_its_total(redis):
    """Issue 24 #3: Keras 3 writes epoch_loss at step = epoch and evaluation_*_vs_iterations at step = iteration;
    progress follows the loss's steps (2 of 5 epochs, not 3,750 of 5), a fraction never tops 1, and a clock
    past its total gives no ETA rather than a negative one."""
    import time

    from jobs.run.pump import Output
    from jobs.store import JobStore
    from jobs.views import job_view

    store = JobStore(redis)
    store.create(1, {"command": ["python", "train.py"], "total_steps": 5, "gpus": 0}, "gpus-0")
    out = Output(store, 1)
    out.progress = {"step": None, "total_steps": 5, "steps_per_epoch": None}
    for point in ({"step": 1, "loss": 0.9}, {"step": 1875, "val_loss": 0.8}, {"step": 2, "loss": 0.7}):
        pipe = redis.pipeline()
        store.update(1, pipe=pipe, **out.point(point, pipe))
        pipe.execute()
    store.update(1, status="running", running_at=time.time() - 10)
    view = job_view(store.get(1))
    assert (view["progress"]["step"], view["progress"]["fraction"]) == (2, 0.4)
    assert view["eta_s"] is not None and view["eta_s"] >= 0
    store.update(1, progress={**out.progress, "step": 5625})  # a script whose clock is not the total's
    view = job_view(store.get(1))
    assert view["progress"]["fraction"] == 1.0 and view["eta_s"] is None
    # issue 43: Keras logs epochs 0-4 of five; a run that finished is whole, one a search stopped early is not
    store.update(1, progress={**out.progress, "step": 4}, status="succeeded", ended_at=time.time())
    assert job_view(store.get(1))["progress"]["fraction"] == 1.0
    store.update(1, progress={**out.progress, "step": 2}, reason="stopped_early")
    assert job_view(store.get(1))["progress"]["fraction"] == 0.4
    store.update(1, progress={**out.progress, "step": 4}, reason=None)
    assert job_view(store.get(1))["progress"]["step"] == 5  # (issue 67 #2: a finished 5-epoch run read `4/5`)


def test_a_validation_point_read_before_the_first_loss_does_not_take_the_progress(redis):
    """Issue 67 #2, the file order a Keras job with validation left: the validation folder's per-iteration point
    (step 1,875) was read before the training folder's first epoch_loss (step 0), and the progress read `1875/5`
    for the whole first training, the bar full and no ETA. The loss's clock takes over when its first point comes."""
    from jobs.run.pump import Output
    from jobs.store import JobStore
    from jobs.views import job_view

    store = JobStore(redis)
    store.create(1, {"command": ["python", "train.py"], "total_steps": 5, "gpus": 0}, "gpus-0")
    out = Output(store, 1)
    out.progress = {"step": None, "total_steps": 5, "steps_per_epoch": None}
    t = time.time() - 60
    order = [
        {"step": 1875, "run": "tensorboard", "val_loss": 0.31, "time": t + 40},  # (evaluation_loss_vs_iterations)
        {"step": 0, "run": "tensorboard", "loss": 0.49, "accuracy": 0.85, "time": t + 40},
        {"step": 0, "run": "tensorboard", "val_loss": 0.31, "val_accuracy": 0.9, "time": t + 41},
    ]
    for point in order:
        pipe = redis.pipeline()
        store.update(1, pipe=pipe, **out.point(point, pipe))
        pipe.execute()
    store.update(1, status="running", running_at=t)
    view = job_view(store.get(1), now=t + 45)
    assert (view["progress"]["step"], view["progress"]["fraction"]) == (0, 0.0), view["progress"]
    pipe = redis.pipeline()
    store.update(1, pipe=pipe, **out.point({"step": 1, "run": "tensorboard", "loss": 0.3, "time": t + 80}, pipe))
    pipe.execute()
    view = job_view(store.get(1), now=t + 80)
    assert (view["progress"]["step"], view["progress"]["fraction"]) == (1, 0.2) and view["eta_s"] is not None


def test_the_line_being_drawn_is_shown_at_most_once_a_second_and_goes_with_its_newline(redis, client):
    """Issue 24 #5: a progress bar before its newline is shown (/logs?live=1, after a \\r) as a terminal would,
    rewritten at most once a second however fast the script draws; its newline puts its final state in the log
    and ends the live line."""
    import time

    from jobs.run.pump import LIVE_EVERY_S, Output
    from jobs.store import JobStore

    store = JobStore(redis)
    store.create(1, {"command": ["python", "train.py"], "gpus": 0}, "gpus-0")
    out = Output(store, 1)
    writes: list[str] = []
    set_live = store.set_live
    store.set_live = lambda job_id, line, pipe: (writes.append(line), set_live(job_id, line, pipe))  # type: ignore[method-assign]
    partial, started = b"", time.monotonic()
    for i in range(1, 301):  # a bar drawn every 5 ms for 1.5 s
        partial += f"\r{i}/300 [{'=' * (i // 30):<10}]".encode()
        pipe = redis.pipeline()
        out.drawing(partial, pipe)
        pipe.execute()
        time.sleep(0.005)
    elapsed = time.monotonic() - started
    assert 1 <= len(writes) <= elapsed / LIVE_EVERY_S + 1, (len(writes), elapsed)
    shown = client.get("/api/v1/jobs/1/logs?live=1").get_data(as_text=True)
    assert shown == "\r" + writes[-1] and re.fullmatch(r"\d+/300 \[=* *\]", writes[-1]), shown  # one state
    assert client.get("/api/v1/jobs/1/logs").get_data(as_text=True) == ""  # (not a line of the log)

    class NoFile:
        def write(self, text: str) -> None:
            pass

    pipe = redis.pipeline()
    out.handle("log", [partial + b"\r300/300 [==========]"], NoFile(), pipe)  # type: ignore[arg-type]
    pipe.execute()
    assert client.get("/api/v1/jobs/1/logs?live=1").get_data(as_text=True) == "300/300 [==========]\n"


def test_pytorch_summary_writer_scalars_are_points_named_by_their_tags(tmp_path: Path):
    """Issue 30 #2: torch.utils.tensorboard's SummaryWriter.add_scalar(tag, value, step) writes one simple_value
    per call, its tag as given (`Loss/train`), into the folder it is given; they arrive like Keras's, each named by
    its tag (a tag gpudeck knows, `loss`, as that field)."""
    writer = write(tmp_path / "runs" / "exp1", scalar_event(0, **{"Loss/train": 0.875}), scalar_event(0, loss=0.625))
    writer.add_event(scalar_event(1, **{"Loss/train": 0.5, "Accuracy/test": 0.75}))
    writer.flush()
    points = ScalarReader(tmp_path).poll()
    assert points == [
        {"step": 0, "run": "runs/exp1", "Loss/train": 0.875, "loss": 0.625},
        {"step": 1, "run": "runs/exp1", "Loss/train": 0.5, "Accuracy/test": 0.75},
    ], points
    writer.close()


def test_a_second_training_gets_its_eta_from_its_own_clock_not_the_jobs(redis):
    """Issue 43 (should-fix): a script that trains twice showed `eta 5m53s` with 69 s left: the second run's steps
    were timed from the job's start. A new run counts from its first point."""
    import time

    from jobs.run.pump import Output
    from jobs.store import JobStore
    from jobs.views import job_view

    store = JobStore(redis)
    store.create(1, {"command": ["python", "train.py"], "total_steps": 5, "gpus": 0}, "gpus-0")
    out = Output(store, 1)
    out.progress = {"step": None, "total_steps": 5, "steps_per_epoch": None}
    store.update(1, status="running", running_at=time.time() - 600)  # (the first training took ten minutes)
    t = time.time() - 20
    for point in [{"step": s, "run": "fit/A", "loss": 1.0 / (s + 1)} for s in range(5)] + [
        {"step": 0, "run": "fit/B", "loss": 0.9, "time": t},
        {"step": 2, "run": "fit/B", "loss": 0.5, "time": t + 10},
    ]:
        pipe = redis.pipeline()
        store.update(1, pipe=pipe, **out.point(point, pipe))
        pipe.execute()
    since = store.get(1)["progress"]["since"]
    assert since == t  # (B's clock starts at its first point's own time)
    view = job_view(store.get(1), now=t + 10)  # two steps of B in its first ten seconds: three more take 15 s
    assert (view["progress"]["step"], view["eta_s"]) == (2, 15.0), view["progress"]
    # and between two points it counts down, not up (issue 67 #2: `eta 2m19s` 4 s before the end, climbing)
    assert job_view(store.get(1), now=t + 14)["eta_s"] == 11.0


def test_a_script_whose_accuracy_is_at_chance_over_its_declared_classes_gets_the_chance_warning(redis, tmp_path):
    """Issue 43 (should-fix): a script trial at chance gets the warning a zoo job gets, where its spec says what
    chance is (`classes`); a script that learned, or one that declares no classes, gets none."""
    from jobs.run.pump import Output
    from jobs.store import JobStore
    from jobs.views import job_view

    store = JobStore(redis)
    cases = [
        ({"val_accuracy": 0.104, "val_loss": 2.30}, 10, "its val_accuracy 0.104 is at chance (1/10 = 0.100)"),
        ({"eval/top1_accuracy": 0.0012}, 1000, "its eval/top1_accuracy 0.001 is at chance (1/1000 = 0.001)"),
        ({"val_accuracy": 0.91}, 10, None),
        ({"val_accuracy": 0.104}, None, None),
        ({"loss": 2.3}, 10, None),
        # issue 67 #6: a loss that is not finite is always a warning, classes declared or not
        ({"loss": float("nan"), "accuracy": 0.95}, None, "its result's loss is nan: the model learned nothing"),
        ({"val_loss": float("inf"), "val_accuracy": 0.104}, 10, "its result's val_loss is inf"),
    ]
    for job_id, (result, classes, said) in enumerate(cases, 1):
        spec = {"command": ["python", "train.py"], "gpus": 0, **({"classes": classes} if classes else {})}
        store.create(job_id, spec, "gpus-0")
        job_dir = tmp_path / str(job_id)
        job_dir.mkdir()
        (job_dir / "result.json").write_text(json.dumps(result))
        Output(store, job_id).command_result(job_dir, spec.get("classes"))
        warning = job_view(store.get(job_id))["warning"]
        assert (warning is None) if said is None else warning.startswith(said), (result, classes, warning)


def test_a_resumed_attempt_stores_what_the_dead_one_wrote_unread_and_then_each_step_once(redis, tmp_path: Path):
    """A script's attempt killed with its work-horse: its last points (16, 17) were in metrics.jsonl, never read.
    The next attempt resumes from the checkpoint of step 15 and writes 16… again. The curve keeps every step once:
    the dead attempt's unread points are read as its own before the next starts, which goes on after them
    (make test saw 1…17, then 17…40: step 16 stored once, 17 twice)."""
    from types import SimpleNamespace

    from jobs.record import Kept
    from jobs.run.pump import Output
    from jobs.store import JobStore

    store = JobStore(redis)
    store.create(1, {"command": ["python", "train.py"], "gpus": 0}, "gpus-0")
    metrics = tmp_path / "metrics.jsonl"

    def attempt(*, later: bool) -> Output:
        out = Output(store, 1)
        out.points = len(store.read_points(1))
        if later:
            out.after_earlier_attempts()
        out.command_launched(SimpleNamespace(source=None, injected={}), Kept({}), tmp_path, None)  # type: ignore[arg-type]
        return out

    def written(*steps: int) -> None:
        with metrics.open("a") as f:
            f.writelines(json.dumps({"step": s, "loss": 1 / s}) + "\n" for s in steps)

    def pumped(out: Output) -> None:  # (one round of the pump: scan, write, mark read)
        pipe = redis.pipeline(transaction=False)
        out.scan(pipe)
        pipe.execute()
        assert out.reader is not None
        out.reader.save()

    first = attempt(later=False)
    written(*range(1, 16))
    pumped(first)
    written(16, 17)  # …and the attempt dies before its next round
    second = attempt(later=True)
    written(*range(16, 21))  # from the checkpoint of step 15
    pumped(second)
    assert [p["step"] for p in store.read_points(1)] == list(range(1, 21))
