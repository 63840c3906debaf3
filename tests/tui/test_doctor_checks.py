"""What `gpudeck doctor` makes of GPU memory a process still holds after its job ended (/healthz's
gpus_not_released; tests/e2e/test_doctor.py runs the doctor on a real stack)."""

from tui.cli.doctor import _released


def test_memory_held_after_a_job_is_a_failed_check_naming_the_process_and_what_to_do():
    held = [{"host": "box", "gpu": "0", "job_id": 7, "pid": 4242, "used_memory_mib": 900, "for_s": 75}]
    [check] = _released({"gpus_not_released": held})
    assert (check.name, check.result) == ("gpu memory released", "fail")
    assert check.detail == "still held after the job ended: box:0 pid 4242 of job 7 (900 MiB, 75 s)"
    assert check.fix.startswith("kill those processes on their hosts")
    assert _released({"gpus_not_released": []})[0].result == "ok"
    assert _released({}) == []  # (an API that does not say)
