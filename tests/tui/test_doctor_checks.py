"""What `gpudeck doctor` makes of GPU memory a process still holds after its job ended (/healthz's
gpus_not_released; tests/e2e/test_doctor.py runs the doctor on a real stack)."""

from tui.cli.doctor import _released, _workers


def test_memory_held_after_a_job_is_a_failed_check_naming_the_process_and_what_to_do():
    held = [{"host": "box", "gpu": "0", "job_id": 7, "pid": 4242, "used_memory_mib": 900, "for_s": 75}]
    [check] = _released({"gpus_not_released": held})
    assert (check.name, check.result) == ("gpu memory released", "fail")
    assert check.detail == "still held after the job ended: box:0 pid 4242 of job 7 (900 MiB, 75 s)"
    assert check.fix.startswith("kill those processes on their hosts")
    assert _released({"gpus_not_released": []})[0].result == "ok"
    assert _released({}) == []  # (an API that does not say)


def test_what_the_warm_trainers_hold_is_said_and_nothing_where_there_are_none():
    worker = {"name": "box.gpu0.1", "host": "box", "alive": True, "sandboxed": True, "warm": None}
    assert "warm processes" not in [c.name for c in _workers([worker])]
    kept = {**worker, "warm": {"pid": 9, "rss_bytes": 600 << 20, "since": 0.0}}  # (an older worker: no kind)
    gone = {**kept, "name": "box.gpu1.2", "alive": False}  # (a lost worker's report is not counted)
    python = {**kept, "name": "box.gpu1.3", "warm": {**kept["warm"], "kind": "interpreter"}}
    [check] = [c for c in _workers([kept, python, gone]) if c.name == "warm processes"]
    said = "2 kept ready (1 interpreters, 1 trainers), 1.2 GiB resident (GPUDECK_WARM=off: none)"
    assert (check.result, check.detail) == ("ok", said)


class Answers:
    """The API's answer to GET /api/v1/doctor, as the doctor's client call returns it."""

    def __init__(self, doc):
        self.doc = doc

    def request(self, method, path):
        assert (method, path) == ("GET", "/api/v1/doctor")
        return self

    def json(self):
        return self.doc


def test_a_host_without_a_driver_mps_asked_but_missing_and_a_clock_off_are_failed_checks():
    from tui.cli.doctor import _hosts

    doc = {
        "clock_skew_max_s": 5.0,
        "hosts": [
            {
                "host": "a",
                "gpus": ["0"],
                "driver": "550.54.15",
                "mps": True,
                "mps_installed": True,
                "clock_offset_s": 0.4,
            },
            {"host": "b", "gpus": ["0"], "driver": None, "mps": True, "mps_installed": False, "clock_offset_s": -42.0},
        ],
    }
    checks = {c.name: c for c in _hosts(Answers(doc))}
    assert [(n, c.result) for n, c in checks.items()] == [
        ("driver (a)", "ok"), ("mps (a)", "ok"), ("clock (a)", "ok"),
        ("driver (b)", "fail"), ("mps (b)", "fail"), ("clock (b)", "fail"),
    ]  # fmt: skip
    assert checks["clock (b)"].detail == "-42.0 s from the API's" and "NTP" in checks["clock (b)"].fix
    assert "nvidia-cuda-mps-control" in checks["mps (b)"].fix
    # which kinds of job a host's workers run (issue 68): what is not installed is said with how to have it
    lean = {"host": "c", "gpus": [], "tensorflow": False, "uv": True, "jupyter": False, "clock_offset_s": None}
    checks = {c.name: c for c in _hosts(Answers({**doc, "hosts": [lean]}))}
    assert checks["job kinds (c)"].detail == "runs commands, shell sessions, project environments"
    assert checks["zoo models (c)"].result == "skip" and "gpudeck[tensorflow]" in checks["zoo models (c)"].fix
    assert (
        checks["notebook sessions (c)"].result == "skip" and "gpudeck[notebook]" in checks["notebook sessions (c)"].fix
    )


class Trials:
    """The API as the doctor's trials meet it: each submitted spec kept, each job ending as `ends` says."""

    def __init__(self, ends, max_priority=None):
        self.ends, self.specs, self.max_priority = ends, [], max_priority

    def whoami(self):
        return {"name": "alice", "max_priority": self.max_priority}

    def submit(self, spec):
        self.specs.append(spec)
        return {"id": len(self.specs)}

    def wait(self, job_id, timeout):
        return {"id": job_id, "worker": f"vm.gpu{job_id - 1}", "gpu_ids": [str(job_id - 1)], **self.ends}


def test_the_trials_use_mixed_precision_and_xla_on_gpus_unless_plain_and_say_so():
    """(tests/e2e/test_doctor.py runs `doctor --plain` on two fake GPUs, where XLA's compile on the CPU doubles a
    trial's cost: this is what the default submits and says.)"""
    from tui.cli.doctor import _trials

    workers = [{"host": "vm", "alive": True, "gpus": ["0"]}, {"host": "vm", "alive": True, "gpus": ["1"]}]
    done = {"status": "succeeded", "elapsed_s": 13.6, "result": {"gpus_seen": 1, "images_per_sec": 466.0}}
    for plain, how in ((False, " with mixed precision and XLA"), (True, "")):
        api = Trials(done)
        checks = {c.name: c for c in _trials(api, workers, 60, plain)}
        assert len(api.specs) == 2 and all(s["gpus"] == 1 and s["params"]["steps"] == 20 for s in api.specs)
        fast = [(s["params"].get("mixed_precision", False), s["params"].get("xla", False)) for s in api.specs]
        assert fast == [(not plain, not plain)] * 2, api.specs
        assert checks["training (job 1)"].detail == f"20 steps{how} on vm.gpu0 (GPU 0) in 13.6 s, 466 images/s"
        assert checks["pinning"].result == checks["tensorflow sees the GPU"].result == "ok"
    assert {s["priority"] for s in api.specs} == {"high"}  # (a token with no limit: the check goes first)
    api = Trials(done, max_priority="normal")  # (issue 62 #10: a user held to normal runs the check at normal)
    _trials(api, workers, 60, True)
    assert {s["priority"] for s in api.specs} == {"normal"}
    api = Trials(done)
    _trials(api, [{"host": "vm", "alive": True, "gpus": []}], 60)  # (no GPU: one trial on the CPU worker, float32)
    assert [s["gpus"] for s in api.specs] == [0] and "xla" not in api.specs[0]["params"]
