"""What the table and `gpudeck ls` print for a job's numbers (no stack needed)."""

import io
import time

import pytest
from rich.console import Console

from tui.cli.base import job_lines, status_line
from tui.screens.gpus import GpusScreen
from tui.widgets.fmt import accuracy_text, in_line, job_cells, over_attempts

RUNNING = {
    "id": 7,
    "name": "r",
    "status": "running",
    "spec": {"model": "lenet", "gpus": 0},
    "progress": {"step": 5, "total_steps": 10, "fraction": 0.5},
    "metrics": {"step": 5, "loss": 0.5, "accuracy": 0.875},
}


def test_accuracy_says_which_it_is_batch_while_running_then_validation_or_test():
    """Issue 16 #3: one column, never two meanings without a word that says which."""
    assert accuracy_text(RUNNING) == "0.8750 batch"
    assert accuracy_text({**RUNNING, "result": {"val_accuracy": 0.9}}) == "0.9000 val"
    done = {**RUNNING, "status": "succeeded", "result": {"test_accuracy": 0.91, "val_accuracy": 0.9}}
    assert accuracy_text(done) == "0.9100 test"
    assert accuracy_text({**RUNNING, "metrics": {"loss": 1.0}}) == ""
    assert job_cells(done)["acc"] == "0.9100 test"
    assert job_lines([done])[1].endswith("0.5000  0.9100 test") and job_lines([RUNNING])[1].endswith("0.8750 batch")


def test_a_nonfinite_loss_reads_nan_not_blank():
    diverged = {**RUNNING, "metrics": {"step": 5, "loss": None, "nonfinite": {"loss": "nan"}}}
    assert job_cells(diverged)["loss"] == "nan"
    assert "nan" in job_lines([diverged])[1].split()
    assert job_cells({**RUNNING, "metrics": {}})["loss"] == ""


def test_the_table_marks_why_a_job_failed():
    failed = {**RUNNING, "status": "failed", "reason": "timeout"}
    assert str(job_cells(failed)["status"]) == "failed·timeout"
    assert str(job_cells({**failed, "reason": "exit_nonzero"})["status"]) == "failed·exit"
    assert str(job_cells({**failed, "status": "canceled", "reason": "canceled"})["status"]) == "canceled"


def test_the_live_wait_line_says_state_step_loss_and_eta():
    assert status_line({**RUNNING, "eta_s": 62.0}) == "job 7 running  step 5/10  loss 0.5000  eta 1m02s"
    assert status_line({"id": 8, "status": "queued", "progress": {"step": None}}) == "job 8 queued"


def test_an_eta_moves_a_third_of_the_way_to_each_new_estimate_and_counts_down_between():
    from tui.widgets.fmt import EtaSmoother

    eta = EtaSmoother()
    assert eta(7, 600.0, now=0.0) == 600.0
    assert eta(7, 300.0, now=2.0) == 598.0 * 2 / 3 + 300.0 / 3  # a jump of 5 minutes moves it by 1.7
    assert eta(7, 300.0, now=3.0) == 598.0 * 2 / 3 + 300.0 / 3 - 1  # re-sorted, same estimate: it only counts down
    assert eta(7, None, now=4.0) is None and eta(7, 100.0, now=6.0) == 100.0  # ended, then a new run


def test_the_compact_row_fits_80_columns():
    long = {
        **RUNNING,
        "name": "a-rather-long-experiment-name",
        "status": "failed",
        "reason": "diverged",
        "result": {"test_accuracy": 0.9123},
        "elapsed_s": 3723.0,
    }
    cells = job_cells(long, compact=True)
    assert cells["name"] == "a-rather-lo…" and str(cells["status"]) == "✗ diverged"
    assert cells["acc"] == "0.912 test" and cells["progress"] == "██░░░  50%" and cells["time"] == "1h02m"
    widths = {"id": 5, "name": 12, "status": 12, "progress": 10, "loss": 6, "acc": 10, "time": 9}
    assert all(len(str(cells[k])) <= w for k, w in widths.items())
    assert sum(w + 2 for w in widths.values()) <= 80 - 2  # DataTable's cell padding, and a scrollbar


def test_a_queued_job_reads_its_place_its_expected_start_or_what_it_waits_for():
    soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 125)) + "Z"
    queued = {"id": 3, "status": "queued", "spec": {"model": "lenet", "gpus": 1}, "queue_position": 2}
    assert in_line(queued) == "#2 in line"
    assert in_line({**queued, "expected_start": soon}).startswith("#2 in line, ~2m")
    gone = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 365)) + "Z"
    assert in_line({**queued, "expected_start": gone}).startswith("#2 in line, 6m")  # (not `~0s` for 6 minutes)
    assert in_line({**queued, "expected_start": gone}, short=True) == "#2 late"
    assert in_line({**queued, "queue_position": None, "spec": {"after": [1, 2]}}) == "after 1,2"
    assert in_line({**queued, "message": "waiting: alice holds 1 of 1 GPU"}) == "quota"
    assert "#2 in line" in job_lines([{**queued, "name": "q", "progress": {}}])[1]


def test_the_gpus_table_names_a_foreign_process_and_its_user():
    hosts = [
        {
            "host": "box",
            "gpus": [
                {
                    "index": 0,
                    "uuid": "GPU-0",
                    "name": "H100",
                    "utilization": 3,
                    "memory_used_mib": 30822,
                    "memory_total_mib": 81559,
                    "processes": [
                        {"pid": 4242, "name": "python3", "used_memory_mib": 30822, "job_id": None, "user": "bob"}
                    ],
                    "held_by": None,
                }
            ],
        }
    ]
    out = io.StringIO()
    Console(file=out, width=200).print(GpusScreen()._gpus(hosts))
    assert "foreign pid 4242 (bob) 30.1 GiB" in out.getvalue()


def test_the_gpus_table_names_every_share_a_cordon_and_a_process_its_job_left():
    gpu = {"uuid": "GPU-0", "name": "H100", "utilization": 40, "memory_used_mib": 20000, "memory_total_mib": 81559}
    shares = [
        {"job_id": 12, "owner": "alice", "kind": "job", "gpu_memory": 10 << 30},
        {"job_id": 13, "owner": "bob", "kind": "job", "gpu_memory": 512 << 20},
    ]
    left = {"pid": 4242, "name": "python3", "used_memory_mib": 900, "job_id": None, "left_by": 7, "left_since": 1.0}
    hosts = [
        {
            "host": "box",
            "gpus": [
                {**gpu, "index": 0, "processes": [], "holders": shares, "held_by": shares[0]},
                {**gpu, "index": 1, "uuid": "GPU-1", "processes": [left], "holders": [], "held_by": None,
                 "cordoned": {"xid": 79, "at": 1.0, "text": "fallen off the bus"}},
            ],
        }
    ]  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=220).print(GpusScreen()._gpus(hosts))
    text = out.getvalue()
    assert "job 12 · alice · 10G, job 13 · bob · 512M" in text
    assert "CORDONED (Xid 79: gpudeck gpu uncordon), pid 4242 of ended job 7, not released 0.9 GiB" in text


def test_numbers_past_a_million_in_e_notation_and_a_warned_status_marked():
    """Issue 25 #7 and #15: the jobs table's loss cell, the job screen's result values, a warned job's status."""
    from tui.widgets.fmt import num, status, value_of

    assert num(638229155746993758071904465321984.0) == "6.382e+32" and num(0.25) == "0.2500"
    assert num(0.00012) == "1.200e-04" and num(0.0) == "0.0000" and num(3) == "3"
    assert value_of({"duration_s": 36.33, "images_per_sec": 2304.04, "epochs": 2.0}, "duration_s") == "36.3s"
    assert value_of({"duration_s": 3600.0}, "duration_s") == "1h00m"
    assert value_of({"images_per_sec": 2304.04}, "images_per_sec") == "2,304.0"
    assert value_of({"loss": None, "nonfinite": {"loss": "nan"}}, "loss") == "nan"
    assert status("succeeded", None, "the training loss grew …").plain == "succeeded⚠"
    assert status("failed", "exit_nonzero").plain == "failed·exit"


def test_a_confirmation_names_every_job_or_counts_them():
    """Issue 25 #9: a long selection reads as ranges, and past a few pieces says how many jobs it is."""
    from tui.widgets.fmt import id_list

    assert id_list([7]) == "job 7"
    assert id_list([3, 5, 6, 7, 8, 9, 12, 4]) == "jobs 3–9, 12 (8 jobs)"
    assert id_list([1, 2]) == "jobs 1, 2 (2 jobs)"
    many = id_list(list(range(1, 2000, 2)))
    assert many.startswith("jobs 1, 3, 5") and "…, 1999 (1000 jobs)" in many and len(many) < 80


def test_gpus_read_as_cpu_a_count_or_the_indices_held():
    """Issue 25 #4: `gpus 0` meant no GPU on one box and GPU number 0 on another; each form now reads apart."""
    from tui.widgets.fmt import gpus_text, job_cells

    spec = {"model": "lenet", "dataset": "synthetic"}
    assert gpus_text({"spec": {**spec, "gpus": 0}}) == "cpu"
    assert gpus_text({"spec": {**spec, "gpus": 1}}) == "1 GPU" and gpus_text({"spec": {**spec, "gpus": 2}}) == "2 GPUs"
    assert gpus_text({"spec": {**spec, "gpus": 1}, "gpu_ids": ["0"]}) == "GPU 0"
    assert gpus_text({"spec": {**spec, "gpus": 2}, "gpu_ids": ["2", "3"]}) == "GPU 2,3"
    job = {"id": 1, "status": "running", "spec": {**spec, "gpus": 1}, "gpu_ids": ["0"]}
    assert job_cells(job)["gpu"] == "GPU 0"


def test_the_gpus_screen_at_80_columns_says_which_gpu_how_busy_and_whose():
    """Issue 25 #1: at 80 columns each GPU row keeps its index (host too on a cluster), utilization and memory as
    numbers, and the job and owner holding it, uncut; the workers keep name, state, GPUs and job."""
    gpu = {"uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "utilization": 97, "temperature_c": 55}
    gpu |= {"memory_used_mib": 30822, "memory_total_mib": 81559, "power_draw_w": 300.0, "power_limit_w": 700.0}
    hosts = [
        {"host": "node-a", "gpus": [{**gpu, "index": 0, "held_by": {"job_id": 12, "owner": "alice"}}]},
        {"host": "node-b", "gpus": [{**gpu, "uuid": "GPU-1", "index": 3, "held_by": None, "processes": []}]},
    ]
    workers = [
        {"name": "node-a-gpu0", "host": "node-a", "alive": True, "draining": False, "state": "busy", "gpus": ["0"],
         "queues": ["tasks@node-a-gpu0"], "job_id": 12},
    ]  # fmt: skip
    out = io.StringIO()
    screen = GpusScreen()
    Console(file=out, width=80).print(screen._gpus(hosts, wide=False), screen._workers(workers, {}, wide=False))
    lines = out.getvalue().splitlines()
    row = next(line for line in lines if line.lstrip().startswith("node-a:0"))
    assert "97%" in row and "30.1/80G" in row and "job 12 · alice" in row, lines
    assert any(line.lstrip().startswith("node-b:3") and line.rstrip().endswith("-") for line in lines), lines
    worker = next(line for line in lines if line.lstrip().startswith("node-a-gpu0"))
    assert "busy" in worker and "12" in worker and "tasks@" not in out.getvalue(), lines
    assert max(len(line) for line in lines) <= 80 and "…" not in out.getvalue(), lines


def test_rows_that_read_alike_keep_what_tells_them_apart():
    """Issue 25 #2: a sweep's runs keep their swept values at 80 and 120 columns; a failed job's reason is read
    whole at 80 (`✗ diverged`, not `failed·dive…`); a long command does not take the MODEL column's width."""
    from tui.widgets.fmt import job_cells, keep_tail

    runs = [f"lrsweep lr={lr} model=lenet" for lr in (0.1, 0.01, 0.001, 0.0001)]
    for width in (12, 24):
        shown = [keep_tail(n, width) for n in runs]
        assert len(set(shown)) == 4 and all(len(s) <= width for s in shown), shown
    assert keep_tail("lrsweep lr=0.001", 24) == "lrsweep lr=0.001"  # what fits stays as it is
    assert keep_tail("a plain long job name here", 12) == "a plain lon…"
    # no room for the base: the value, with an ellipsis where the name was cut (issue 67 #7: `0.1000` alone)
    assert keep_tail("sweep 3 lr=0.1000", 8) == "…0.1000" and keep_tail("sweep 3 lr=0.1000 m=0.9", 8) == "…0.1000…"
    failed = {"id": 1, "status": "failed", "reason": "diverged", "spec": {"model": "lenet", "gpus": 0}}
    assert job_cells(failed, compact=True)["status"].plain == "✗ diverged"
    assert job_cells({**failed, "reason": "dependency_failed"}, compact=True)["status"].plain == "✗ after"
    assert job_cells(failed)["status"].plain == "failed·diverged"
    command = {**failed, "spec": {"command": ["python", "-c", "import json, os, sys, time\nprint(1)"], "gpus": 0}}
    assert len(job_cells(command)["model"]) <= 16


def test_chart_ticks_are_round_and_evenly_spaced():
    """Issue 25 #7: an axis reads 0.5 1 1.5 2, not values that skip about; a log10 axis names what it stands for."""
    import math

    from tui.widgets.fmt import axis_ticks, nice_ticks, tick_label

    assert nice_ticks(0.1732, 2.31) == [0.5, 1.0, 1.5, 2.0]
    assert nice_ticks(0.05, 0.98) == [0.2, 0.4, 0.6, 0.8]
    for lo, hi in ((0.0032, 0.0063), (-3.2, 0.4), (1.0, 9.6e9), (0.9, 0.91)):
        ticks = nice_ticks(lo, hi)
        gaps = {round(b - a, 12) for a, b in zip(ticks, ticks[1:])}
        assert 2 <= len(ticks) <= 6 and len(gaps) == 1 and lo <= ticks[0] and ticks[-1] <= hi, (lo, hi, ticks)
    assert [tick_label(t, log10=True) for t in nice_ticks(-3.2, 0.4)] == ["0.001", "0.01", "0.1", "1"]
    assert tick_label(2.0, log10=True) == "100" and tick_label(9.0, log10=True) == "1e+09"
    _, shown = axis_ticks(math.log10(0.0035), math.log10(0.016), log10=True)  # less than a decade: round values
    assert shown == ["0.005", "0.01", "0.015"], shown
    where, shown = axis_ticks(-9.2, 1.5, log10=True)  # many decades: powers of ten, a few of them
    assert all(float(w).is_integer() for w in where) and 2 <= len(where) <= 6 and "1e-09" in shown, shown


def test_a_job_that_ran_more_than_once_says_its_whole_time_and_preemptions():
    assert over_attempts({"attempt": 1, "preemptions": 0, "ran_s": 19.0}) == ""
    said = over_attempts({"attempt": 4, "preemptions": 3, "ran_s": 671.0})
    assert said == " (11m11s in all, 4 attempts, preempted 3×)"
    assert over_attempts({"attempt": 2, "preemptions": 0, "ran_s": None}) == " (2 attempts)"


@pytest.mark.parametrize("columns", [80, 100, 119, 120, 130, 150, 200])
def test_the_gpus_table_never_cuts_a_gpus_host_index_or_numbers(columns):
    """Issue 42 #1: from 120 columns the wide table; host, index, utilization, memory, temperature and power keep
    their width (the name, history and holder give way), and where they would not fit the compact table is shown."""
    from tui.screens.gpus import WIDE, fits_wide

    hosts = [
        {
            "host": f"gpu-node-{h}",
            "gpus": [
                {"uuid": f"GPU-{h}{i}", "index": i, "name": "NVIDIA H100 80GB HBM3", "utilization": 87 - i,
                 "memory_used_mib": 40000 + i, "memory_total_mib": 81559, "temperature_c": 61,
                 "power_draw_w": 312.4, "power_limit_w": 700, "processes": [],
                 "held_by": {"job_id": 1200 + i, "owner": "alice", "kind": None}}
                for i in range(4)
            ],
        }
        for h in ("a1", "b2")
    ]  # fmt: skip
    width = columns - 2  # (the scroll bar)
    wide = columns >= WIDE and fits_wide(hosts, width)
    assert wide == (columns >= 120)  # (these hosts fit the wide table from 120 on)
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(GpusScreen()._gpus(hosts, wide, width))
    lines = out.getvalue().splitlines()
    rows = [line for line in lines[1:] if line.split() and line.split()[0].startswith("gpu-node")]
    assert len(rows) == 8 and all(len(line.rstrip()) <= width for line in lines)  # (a holder may wrap: issue 64)
    for row, (h, i) in zip(rows, [(h, i) for h in ("a1", "b2") for i in range(4)]):
        words = row.split()
        assert f"{87 - i}%" in words, row
        if wide:
            assert words[:2] == [f"gpu-node-{h}", str(i)] and "61°C" in words and "312/700W" in words, row
            assert f"{40000 + i}/81559" in row, row  # (the name may give way: NVIDIA …)
        else:
            assert words[0] == f"gpu-node-{h}:{i}" and "39.1/80G" in words, row


def test_the_title_bar_says_how_the_box_is_used_and_what_is_yours():
    """Issue 42 #4: `3/4 GPUs busy · 5 queued · you: 2/2 GPUs`, from /share, /workers and /whoami as answered."""
    from tui.widgets.fmt import box_summary

    workers = [
        {"host": "box", "gpus": ["0", "1"], "alive": True, "job_id": 3},
        {"host": "box", "gpus": ["2"], "alive": True, "job_id": 4},
        {"host": "box", "gpus": ["3"], "alive": True, "job_id": None},
        {"host": "box", "gpus": ["4"], "alive": False, "job_id": None},  # (lost: not counted)
    ]
    share = {
        "owners": [
            {"owner": "alice", "gpus": 2, "running": 1, "queued": 4},
            {"owner": "bob", "gpus": 1, "running": 1, "queued": 1},
        ]
    }
    alice = {"name": "alice", "auth": "named", "max_gpus": 2}
    assert box_summary(share, workers, alice) == "3/4 GPUs busy · 5 queued · you: 2/2 GPUs"
    assert box_summary(share, workers, {**alice, "name": "carol", "max_gpus": None}) == (
        "3/4 GPUs busy · 5 queued · you: 0 GPUs"
    )
    assert box_summary(share, workers, {"name": None, "auth": "none"}) == "3/4 GPUs busy · 5 queued"
    cpus = [{**w, "gpus": []} for w in workers]
    assert box_summary({"owners": []}, cpus, None) == "2/3 workers busy · 0 queued"


def test_the_header_shows_the_priority_and_a_session_its_limits_not_steps():
    """Issue 42 #4 and a should-fix: a job's header names its priority; a shell session's reads how long it has
    been up and its idle and max times, not `step 0/? eta -`."""
    from tui.widgets.jobtext import header_text

    head = header_text({**RUNNING, "spec": {**RUNNING["spec"], "priority": "high"}, "elapsed_s": 30}, 120).plain
    assert "priority high" in head and "step 5/10" in head
    session = {
        "id": 9,
        "name": "shell",
        "status": "running",
        "spec": {"kind": "session", "idle": 1800, "max": 28800, "priority": "normal", "gpus": 1},
        "elapsed_s": 65,
    }
    head = header_text(session, 120).plain
    assert "up 1m05s" in head and "released after 30m00s unused, ends after 8h00m" in head, head
    assert "step" not in head and "eta" not in head, head


def test_a_priority_other_than_normal_is_marked_in_both_tables():
    cells = job_cells({**RUNNING, "spec": {**RUNNING["spec"], "priority": "low"}})
    assert (str(cells["priority"]), cells["mark"]) == ("low", "↓")
    cells = job_cells(RUNNING)  # (a spec kept before priorities: normal, the default, shown as nothing)
    assert (str(cells["priority"]), cells["mark"]) == ("", "")


def test_the_trials_of_a_search_are_listed_by_one_kind_of_accuracy():
    """Issue 43: a trial stopped early has no test accuracy of its own; its finished siblings were listed by `test`
    or `val` beside its `batch`. Every trial of a sweep now shows the best kind all of them have (here: val, from the
    stopped one's last validation point); a job of no sweep keeps its own."""
    base = {"status": "succeeded", "reason": None, "name": "t", "spec": {"model": "lenet"}, "progress": {}}
    finished = {
        **base,
        "id": 1,
        "sweep_id": 4,
        "result": {"test_accuracy": 0.95, "val_accuracy": 0.93},
        "metrics": {"accuracy": 0.97, "val_accuracy": 0.93},
    }
    stopped = {
        **base,
        "id": 2,
        "sweep_id": 4,
        "reason": "stopped_early",
        "result": {},
        "metrics": {"accuracy": 0.41, "val_accuracy": 0.38},
    }
    alone = {**base, "id": 3, "sweep_id": None, "result": {"test_accuracy": 0.90}, "metrics": {"accuracy": 0.92}}
    rows = {line.split()[0]: line for line in job_lines([finished, stopped, alone])[1:]}
    assert rows["1"].rstrip().endswith("0.9300 val") and rows["2"].rstrip().endswith("0.3800 val"), rows
    assert rows["3"].rstrip().endswith("0.9000 test"), rows
    running = {**base, "id": 5, "sweep_id": 4, "status": "running", "result": None, "metrics": {"accuracy": 0.5}}
    rows = {line.split()[0]: line for line in job_lines([finished, stopped, running])[1:]}
    assert all(rows[i].rstrip().endswith(" batch") for i in "125"), rows  # (all the trials have is batch)


def test_gpudeck_ls_fits_a_terminal_of_80_columns_and_a_pipe_gets_every_cell_whole():
    """Issue 67 #7: `gpudeck ls` wrapped every row at 80 columns."""
    jobs = [
        {"id": 1234, "status": "running", "name": "sweep 12 lr=0.0123 momentum=0.9 wd=1e-4", "owner": "alice",
         "spec": {"command": "python train_imagenet_resnet.py --epochs 90", "gpus": 2}, "gpu_ids": ["0", "1"],
         "progress": {"step": 1200, "total_steps": 90000}, "metrics": {"loss": 2.3456}, "result": None},
    ]  # fmt: skip
    wide = job_lines(jobs, owners=True)
    assert max(map(len, wide)) > 80 and "sweep 12 lr=0.0123 …" in wide[1]  # (a pipe: as it was)
    fitted = job_lines(jobs, owners=True, width=80)
    assert max(map(len, fitted)) <= 80, fitted
    assert "…" in fitted[1] and fitted[1].startswith("1234") and "2.3456" in fitted[1] and "1200/90000" in fitted[1]


def test_a_preempted_job_in_line_again_shows_no_old_gpu_and_no_growing_time():
    """Issue 67 #7: a preempted job waiting in line showed the GPU it had held and an elapsed time that grew."""
    waiting = {"id": 9, "status": "queued", "reason": "preempted", "gpu_ids": ["1"], "elapsed_s": 400.0,
               "spec": {"model": "lenet", "gpus": 1}, "queue_position": 1}  # fmt: skip
    cells = job_cells(waiting)
    assert cells["gpu"] == "1 GPU" and cells["time"] == "" and cells["elapsed"] == ""
    assert job_cells({**waiting, "status": "running"})["gpu"] == "GPU 1"


@pytest.mark.parametrize("columns", [120, 130, 150])
def test_every_holder_of_a_shared_gpu_is_shown_whole_at_every_width(columns):
    """Issue 64 #3: HELD BY was cut at 120–150 columns once a GPU had several shares or a foreign process; the
    holders wrap onto more lines instead."""
    from tui.screens.gpus import WIDE, fits_wide

    holders = [
        {"job_id": 1200 + n, "owner": owner, "kind": "job", "gpu_memory": 10 << 30, "part": 0.13}
        for n, owner in enumerate(("alice", "bartholomew", "carol"))
    ]
    gpu = {"uuid": "GPU-0", "index": 0, "name": "NVIDIA H100 80GB HBM3", "utilization": 87,
           "memory_used_mib": 40000, "memory_total_mib": 81559, "temperature_c": 61, "power_draw_w": 312.4,
           "power_limit_w": 700, "holders": holders, "held_by": holders[0],
           "processes": [{"pid": 4242, "user": "dave", "used_memory_mib": 2048, "job_id": None}]}  # fmt: skip
    hosts = [{"host": "gpu-node-a1", "gpus": [gpu]}]
    width = columns - 2
    out = io.StringIO()
    wide = columns >= WIDE and fits_wide(hosts, width)
    Console(file=out, width=width, color_system=None).print(GpusScreen()._gpus(hosts, wide, width))
    text = " ".join(out.getvalue().split())
    for said in ("job 1200 · alice · 10G", "job 1201 · bartholomew · 10G", "job 1202 · carol · 10G",
                 "foreign pid 4242 (dave) 2.0 GiB"):  # fmt: skip
        assert said in text, (said, out.getvalue())


def test_a_jobs_owner_cell_names_its_project_and_the_filter_finds_it():
    from models.common import search_text

    job = {**RUNNING, "owner": "alice", "project": "vision", "spec": {**RUNNING["spec"], "project": "vision"}}
    assert job_cells(job)["owner"] == "alice/vision" and job_cells({**job, "project": None})["owner"] == "alice"
    assert "vision" in search_text(job).split()
    head, row = job_lines([job], owners=True)
    assert "alice/vision" in row.split()
    from tui.widgets.jobtext import header_text

    assert "alice/vision" in header_text({**job, "elapsed_s": 5}, 120).plain  # (the job screen's header)
