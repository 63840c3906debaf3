"""`make bench-gpu`, the part that needs no TensorFlow: what gpudeck does on a real GPU, checked with the PyTorch and
JAX of the box's own Python (the Python running this file: its jobs run `python3` from the same folder). The real
`nvidia-smi` read by gpudeck's own parsers (the list, a sample, a process's memory); a command job pinned to its GPU
(`CUDA_VISIBLE_DEVICES`: exactly one device, the UUID of the GPU the record names); four `gpu_memory` shares of one
GPU at once, each capped as the README says (PyTorch's two lines: an allocation past the share fails) and what they
do together against one whole-GPU job (bf16 matrix products, TFLOP/s); JAX in a share (XLA_PYTHON_CLIENT_MEM_FRACTION:
it preallocates its part, and the watchdog leaves it alone); the watchdog stopping a share that takes more than it
said; and with MPS (where `nvidia-cuda-mps-control` is installed) the four shares again. Skips where nvidia-smi lists
no GPU or the jobs' Python has no CUDA PyTorch: a CPU says nothing of a GPU."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import requests

from jobs.gpus import list_gpus, sample
from models.states import ENDED
from tests.support.live import submit_job, until, wait_ended
from tests.support.stack import Up

G = 1 << 30
SIZE = int(os.environ.get("GPUDECK_GPU_BENCH_MATMUL", "8192"))
ITERS = int(os.environ.get("GPUDECK_GPU_BENCH_ITERS", "2000"))

MATMUL = """
import json, os, sys, time
import torch
share = os.environ.get("GPUDECK_GPU_MEMORY")
props = torch.cuda.get_device_properties(0)
if share:  # the README's two lines
    torch.cuda.set_per_process_memory_fraction(int(share) / props.total_memory)
n, iters = int(sys.argv[1]), int(sys.argv[2])
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
t0 = time.time()
for _ in range(iters):
    c = a @ b
torch.cuda.synchronize()
t1 = time.time()
capped = None
if share:
    try:
        torch.empty(int(share) + (2 << 30), dtype=torch.uint8, device="cuda")
        capped = False
    except torch.OutOfMemoryError:
        capped = True
print("RESULT " + json.dumps({
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "count": torch.cuda.device_count(), "name": props.name,
    "uuid": "GPU-" + str(props.uuid), "t0": t0, "t1": t1, "tflops": 2 * n**3 * iters / (t1 - t0) / 1e12,
    "finite": bool(torch.isfinite(c.float()).all()), "capped": capped,
    "mps": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"), "threads": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
}), flush=True)
"""

HOLD = """
import os, sys, time
import torch
x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("holding", sys.argv[1], "MiB", flush=True)
time.sleep(float(sys.argv[2]))
"""

CNN = """
import json, os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
share = os.environ.get("GPUDECK_GPU_MEMORY")
if share:
    torch.cuda.set_per_process_memory_fraction(int(share) / torch.cuda.get_device_properties(0).total_memory)
torch.backends.cudnn.benchmark = True

class Block(nn.Module):  # ResNet-20's (He et al. 2016, CIFAR): two 3x3 convolutions and a shortcut
    def __init__(self, i, o, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(i, o, 3, stride, 1, bias=False), nn.BatchNorm2d(o)
        self.c2, self.b2 = nn.Conv2d(o, o, 3, 1, 1, bias=False), nn.BatchNorm2d(o)
        same = stride == 1 and i == o
        self.short = None if same else nn.Sequential(nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.short is None else self.short(x)))

layers, i = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
for o, stride in ((16, 1), (32, 2), (64, 2)):
    for k in range(3):
        layers.append(Block(i, o, stride if k == 0 else 1))
        i = o
model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
steps, batch = int(sys.argv[1]), int(sys.argv[2])
x = torch.randn(batch, 3, 32, 32, device="cuda")
y = torch.randint(0, 10, (batch,), device="cuda")

def step():
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss

for _ in range(20):
    first = step()
torch.cuda.synchronize()
t0 = time.time()
for _ in range(steps):
    loss = step()
torch.cuda.synchronize()
t1 = time.time()
print("RESULT " + json.dumps({
    "t0": t0, "t1": t1, "images_per_s": steps * batch / (t1 - t0), "learned": loss.item() < first.item(),
    "count": torch.cuda.device_count(), "mps": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
}), flush=True)
"""

FILL = """
import os, sys, time
import torch
share = int(os.environ["GPUDECK_GPU_MEMORY"])
torch.cuda.set_per_process_memory_fraction(share / torch.cuda.get_device_properties(0).total_memory)
held = []
try:
    while True:
        held.append(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"))
        held[-1].fill_(1)
except torch.OutOfMemoryError:
    pass
torch.cuda.synchronize()
print("FILLED", sum(t.numel() for t in held) >> 20, "MiB of a share of", share >> 20, "MiB", flush=True)
time.sleep(float(sys.argv[1]))
"""

JAX = """
import os, sys, time
import jax, jax.numpy as jnp
x = jnp.ones((4096, 4096))
(x @ x).block_until_ready()
fraction = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
print("JAX", jax.devices(), "XLA_PYTHON_CLIENT_MEM_FRACTION", fraction, flush=True)
time.sleep(float(sys.argv[1]))
"""


def inline(script: str, *args: object) -> str:
    """A job's command that runs `script` with `args` (the script in the command itself: a job's sandbox has a /tmp
    of its own, so a file under pytest's tmp_path is not there)."""
    return f"python3 - {' '.join(map(str, args))} <<'PY'\n{script}\nPY"


def jobs_python() -> str:
    return str(Path(sys.executable).parent / "python3")


def cuda_torch() -> bool:
    probe = "import torch; assert torch.cuda.is_available()"
    return subprocess.run([jobs_python(), "-c", probe], capture_output=True, timeout=120).returncode == 0


@pytest.fixture(scope="module")
def gpus():
    found = list_gpus()
    if not found:
        pytest.skip("nvidia-smi lists no GPU here: this measures a GPU box")
    if not cuda_torch():
        pytest.skip(f"{jobs_python()} has no PyTorch with CUDA: the jobs here run PyTorch")
    return found


def test_the_real_nvidia_smi_through_gpudecks_parsers(gpus, tmp_path):
    print("\nnvidia-smi -L, as gpudeck reads it:", json.dumps(gpus))
    assert all(re.fullmatch(r"GPU-[0-9a-f-]{36}", g["uuid"]) for g in gpus), gpus
    (tmp_path / "hold.py").write_text(HOLD)
    holder = subprocess.Popen([jobs_python(), str(tmp_path / "hold.py"), "3072", "60"], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and b"holding" in holder.stdout.readline()
        seen = sample({holder.pid: 7})
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    print("a sample, as gpudeck reads it:", json.dumps(seen))
    assert seen and len(seen) == len(gpus)
    first = seen[0]
    assert first["memory_total_mib"] > 1024 and isinstance(first["utilization"], int), first
    mine = [p for g in seen for p in g["processes"] if p["pid"] == holder.pid]
    # (3 GiB and the CUDA context's own)
    assert len(mine) == 1 and mine[0]["job_id"] == 7 and mine[0]["used_memory_mib"] >= 3072, seen


def stack(tmp_path: Path, name: str, **settings: str) -> Up:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUDECK_", "REDIS_URL"))}
    env |= {"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "PYTHONUNBUFFERED": "1"}
    env |= {"GPUDECK_COMMAND_JOBS": "1", "GPUDECK_JOBS_PER_GPU": "4", "GPUDECK_GPU_MEMORY_GRACE": "4s"}
    env |= {f"GPUDECK_{k.upper()}": v for k, v in settings.items()}
    return Up(tmp_path / name, env, tmp_path / f"{name}.log")


def started(up: Up, workers: int) -> Api:
    """`up`'s API, once its `workers` are up and a GPU sample is in (what shares are packed by)."""
    api = Api(up)
    until(lambda: len(api.http.get(f"{up.url}/api/v1/workers", timeout=10).json()["workers"]) == workers, 120)
    until(lambda: api.http.get(f"{up.url}/api/v1/gpus", timeout=10).json()["hosts"], 60, "a GPU sample")
    return api


class Api:
    def __init__(self, up: Up):
        self.url, self.http = up.url, requests.Session()

    def submit(self, command: str, **spec) -> int:
        return submit_job(self.url, {"command": command, **spec})

    def job(self, job_id: int) -> dict:
        return self.http.get(f"{self.url}/api/v1/jobs/{job_id}", timeout=30).json()

    def wait(self, job_id: int, limit_s: int = 300) -> dict:
        return wait_ended(self.url, job_id, limit_s)

    def log(self, job_id: int) -> str:
        return self.http.get(f"{self.url}/api/v1/jobs/{job_id}/logs", timeout=30).text

    def result(self, job_id: int) -> dict:
        ended = self.wait(job_id)
        text = self.log(job_id)
        assert ended["status"] == "succeeded", (ended, text[-3000:])
        line = next((ln for ln in text.splitlines() if ln.startswith("RESULT ")), None)
        assert line, text[-3000:]
        return {**json.loads(line[len("RESULT ") :]), "gpu_ids": ended["gpu_ids"], "id": job_id}


def watched(api: Api, job_id: int, limit_s: float = 180) -> tuple[dict, int]:
    """Follow a job to its end, sampling what gpudeck's GPU samples say its processes hold: its end and that peak
    (MiB)."""
    peak, deadline = 0, time.monotonic() + limit_s
    while (job := api.job(job_id))["status"] not in ENDED:
        assert time.monotonic() < deadline, job
        hosts = api.http.get(f"{api.url}/api/v1/gpus", timeout=10).json()["hosts"]
        mine = [p for h in hosts for g in h["gpus"] for p in g.get("processes") or [] if p.get("job_id") == job_id]
        peak = max(peak, sum(int(p.get("used_memory_mib") or 0) for p in mine))
        time.sleep(0.5)
    return job, peak


def four_shares(api: Api) -> tuple[list[dict], float]:
    ids = [api.submit(inline(MATMUL, SIZE, ITERS), gpu_memory="10G") for _ in range(4)]
    got = [api.result(i) for i in ids]
    overlap = min(r["t1"] for r in got) - max(r["t0"] for r in got)
    together = 4 * 2 * SIZE**3 * ITERS / (max(r["t1"] for r in got) - min(r["t0"] for r in got)) / 1e12
    each = ", ".join(f"{r['tflops']:.0f}" for r in got)
    print(f"  4 shares of 10G: {each} TFLOP/s each; {together:.0f} together "
          f"(first start to last end); all four computing at once for {overlap:.2f} s")  # fmt: skip
    assert all(r["count"] == 1 and r["capped"] is True and r["finite"] for r in got), got
    return got, together


def test_jobs_on_the_real_gpu_pinned_shared_capped_and_watched(gpus, tmp_path):
    uuids = {g["index"]: g["uuid"] for g in gpus}
    up = stack(tmp_path, "plain")
    try:
        api = started(up, 4 * len(gpus))
        print(f"\nbf16 {SIZE}x{SIZE} matrix products, {ITERS} each, on {gpus[0]['name']}:")
        whole = api.result(api.submit(inline(MATMUL, SIZE, ITERS), gpus=1))
        print(f"  one whole-GPU job: {whole['tflops']:.0f} TFLOP/s; it saw {whole['count']} device, "
              f"CUDA_VISIBLE_DEVICES={whole['visible']}, {whole['uuid']}")  # fmt: skip
        assert whole["count"] == 1 and whole["uuid"] == uuids[whole["gpu_ids"][0]], (whole, uuids)
        shares, together = four_shares(api)
        print(f"  4 shares together / one whole job: {together / whole['tflops']:.2f}")

        # a share that takes all of its part, the README's way (PyTorch's cap), and JAX's preallocation in one:
        # each must be left alone by the watchdog, which counts what nvidia-smi says its processes hold
        filled = api.submit(inline(FILL, 15), gpu_memory="10G")
        fill_end, fill_peak = watched(api, filled)
        jax_id = api.submit(inline(JAX, 15), gpu_memory="10G")
        jax_end, jax_peak = watched(api, jax_id)
        for what, ended, peak in (("PyTorch, capped", fill_end, fill_peak), ("JAX", jax_end, jax_peak)):
            said = [ln for ln in api.log(ended["id"]).splitlines() if ln.startswith(("FILLED", "JAX"))]
            print(f"  {what}, a 10G share: nvidia-smi's peak for it {peak} MiB; {ended['status']} "
                  f"({ended.get('reason')}: {ended.get('message')}); it said {said}")  # fmt: skip
        over = api.submit(inline(HOLD, 5120, 120), gpu_memory="2G")
        t0 = time.monotonic()
        over_end, over_peak = watched(api, over)
        print(f"  a 2G share holding 5 GiB: {over_end['status']} ({over_end.get('reason')}), peak {over_peak} MiB, "
              f"ended {time.monotonic() - t0:.1f} s after its submission: {over_end.get('message')}")  # fmt: skip
        assert over_end["reason"] == "gpu_memory_exceeded", over_end
        assert fill_end["status"] == "succeeded" and jax_end["status"] == "succeeded", (fill_end, jax_end)
    finally:
        up.kill()

    if not shutil.which("nvidia-cuda-mps-control"):
        print("  MPS: nvidia-cuda-mps-control is not installed here")
        return
    up = stack(tmp_path, "mps", mps="on")
    try:
        api = started(up, 4 * len(gpus))
        print("  with GPUDECK_MPS=on:")
        mps, together_mps = four_shares(api)
        print(f"  4 shares under MPS / without: {together_mps / together:.2f}; MPS pipes {mps[0]['mps']}, "
              f"thread percentage {mps[0]['threads']}")  # fmt: skip
        assert all(r["mps"] for r in mps), mps
        # MPS holds a share to its gpu_memory itself (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT): 12 GiB of a 10G share fails
        grabber = api.submit(inline(HOLD, 12288, 5), gpu_memory="10G")
        grab = api.wait(grabber)
        said = api.log(grabber).strip().splitlines()
        print(f"  a 10G share taking 12 GiB under MPS: {grab['status']} ({grab.get('reason')}); {said[-1:]}")
        assert grab["status"] == "failed", (grab, said)
    finally:
        if up.proc.poll() is None:
            up.stop()  # (as Ctrl-C stops it: the daemon quits, its folder goes)
        up.kill()


CNN_STEPS = int(os.environ.get("GPUDECK_GPU_BENCH_CNN_STEPS", "1500"))


def test_resnet20s_sharing_one_gpu_with_and_without_mps(gpus, tmp_path):
    """What the CIFAR ResNets this product was made for do on a GPU of today: ResNet-20 (PyTorch, batch 128), one
    job alone, then 4 and 8 at once as 8G shares of one GPU (8 fit an H100), time-sliced and (GPUDECK_MPS=on)
    under MPS: each job's images/s, and all of them together."""
    rows = []
    for mode in ("off", "on") if shutil.which("nvidia-cuda-mps-control") else ("off",):
        up = stack(tmp_path, f"mps-{mode}", mps=mode, jobs_per_gpu="8")
        try:
            api = started(up, 8)
            for n in (1, 4, 8):
                ids = [api.submit(inline(CNN, CNN_STEPS, 128), gpu_memory="8G") for _ in range(n)]
                got = [api.result(i) for i in ids]
                assert all(r["count"] == 1 and r["learned"] and bool(r["mps"]) == (mode == "on") for r in got), got
                span = max(r["t1"] for r in got) - min(r["t0"] for r in got)
                together = n * CNN_STEPS * 128 / span
                overlap = min(r["t1"] for r in got) - max(r["t0"] for r in got)
                rows.append((mode, n, sum(r["images_per_s"] for r in got) / n, together, overlap))
        finally:
            if up.proc.poll() is None:
                up.stop()
            up.kill()
    print(f"\nResNet-20 (PyTorch, batch 128, {CNN_STEPS} steps each) as 8G shares of one {gpus[0]['name']}:")
    print(f"{'MPS':>5} {'jobs':>5} {'images/s each':>14} {'together':>10} {'vs one alone':>13} {'all at once':>12}")
    alone = {mode: each for mode, n, each, _, _ in rows if n == 1}
    for mode, n, each, together, overlap in rows:
        print(f"{mode:>5} {n:>5} {each:>14,.0f} {together:>10,.0f} {together / alone[mode]:>12.2f}x {overlap:>11.1f}s")


FIRST_OP = """import time
import torch
x = torch.ones(1, device="cuda")
torch.cuda.synchronize()
print("CUDA-OP", time.time(), flush=True)
"""


def test_a_pytorch_script_submit_to_its_first_cuda_op_cold_and_warm(gpus, tmp_path):
    """Issue 65 #2 on a GPU box: `python first.py` (import torch, one op on the GPU) submitted GAP_S after the one
    before ended, cold (`exec python …`, which no warm interpreter takes) and warm, interleaved, 5 of each: submit
    -> the first CUDA op done, and submit -> ended (the job's record)."""
    source = tmp_path / "roots" / "first"
    source.mkdir(parents=True)
    (source / "first.py").write_text(FIRST_OP)
    up = stack(tmp_path, "warm", data_roots=str(tmp_path / "roots"), warm="on")
    try:
        api = started(up, 4)
        took: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
        for n in range(12):
            kind = "warm" if n % 2 else "cold"
            command = f"{'exec ' if kind == 'cold' else ''}python first.py"
            job_id = api.submit(command, source=str(source), gpus=1)
            ended = api.wait(job_id)
            assert ended["status"] == "succeeded", (ended, api.log(job_id)[-2000:])
            line = next(ln for ln in api.log(job_id).splitlines() if ln.startswith("CUDA-OP"))
            t0 = datetime.fromisoformat(ended["created_at"].replace("Z", "+00:00")).timestamp()
            t1 = datetime.fromisoformat(ended["ended_at"].replace("Z", "+00:00")).timestamp()
            if n >= 2:  # (the first warm job starts cold: nothing is warm yet, and records torch)
                assert ended["warm_start"] is (kind == "warm"), ended
                took[kind].append((float(line.split()[1]) - t0, t1 - t0))
            time.sleep(GAP_S)
    finally:
        if up.proc.poll() is None:
            up.stop()
        up.kill()
    print(f"\n`python first.py` (import torch, one CUDA op) on {gpus[0]['name']}, {GAP_S:.0f} s apart, medians:")
    for kind, rows in took.items():
        ops, ends = sorted(r[0] for r in rows), sorted(r[1] for r in rows)
        op, end = ops[len(ops) // 2], ends[len(ends) // 2]
        print(f"  {kind}: submit -> first CUDA op {op:.2f} s, submit -> ended {end:.2f} s")


GAP_S = 4.0
"""Between a job's end and the next one's submission (a warm interpreter is made as the job before it starts)."""
