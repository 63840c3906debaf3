"""GET /api/v1/doctor: what each worker host says of itself (its driver, MPS, its clock against the API's), for
admins (tests/e2e/test_doctor.py reads it through `gpudeck doctor` on a real stack)."""

import json
import time

from jobs.keys import alive_key, worker_info_key
from tests.support.workers import register


def test_each_host_says_its_driver_mps_and_clock_and_only_admins_read_it(redis, client, users):
    for name, host, gpus in (("a.gpu0", "node-a", ("0",)), ("a.gpu1", "node-a", ("1",)), ("b.cpu", "node-b", ())):
        register(redis, name, host=host, gpus=gpus)
        facts = {"driver": "550.54.15" if gpus else None, "mps_installed": False, "mps": False}
        redis.set(worker_info_key(name), json.dumps({"host": host, "gpus": list(gpus), "facts": facts}))
    now = time.time()
    redis.set(alive_key("a.gpu0"), f"{now - 0.4:.3f}")
    redis.set(alive_key("a.gpu1"), f"{now - 0.9:.3f}")
    redis.set(alive_key("b.cpu"), f"{now + 42:.3f}")  # (node-b's clock runs 42 s ahead)
    assert client.get("/api/v1/doctor", headers=users["alice"]).status_code == 403
    doc = client.get("/api/v1/doctor", headers=users["root"]).json
    a, b = doc["hosts"]
    assert (a["host"], a["workers"], a["gpus"], a["driver"]) == ("node-a", 2, ["0", "1"], "550.54.15")
    assert 0.3 < a["clock_offset_s"] < 1.5  # (the nearest of its workers' beats)
    assert (b["host"], b["driver"], b["gpus"]) == ("node-b", None, [])
    assert -43 < b["clock_offset_s"] < -41 and doc["clock_skew_max_s"] == 5.0
