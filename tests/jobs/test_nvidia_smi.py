"""The nvidia-smi CSV parser on real-format output, [N/A] and [Not Supported] included."""

from jobs.gpus import APP_FIELDS, GPU_FIELDS, parse_csv

GPU_CSV = """\
0, GPU-5e1d2c3a-1111-2222-3333-444455556666, NVIDIA H100 80GB HBM3, 87, 40321, 81559, 61, 512.34, 700.00
1, GPU-0a0b0c0d-aaaa-bbbb-cccc-ddddeeeeffff, NVIDIA GeForce RTX 3090, 0, 1, 24576, [N/A], [Not Supported], [Not Supported]
"""
APPS_CSV = """\
4242, /usr/bin/python3, 40000, GPU-5e1d2c3a-1111-2222-3333-444455556666
4343, python, [N/A], GPU-5e1d2c3a-1111-2222-3333-444455556666
"""


def test_gpu_rows():
    rows = parse_csv(GPU_CSV, GPU_FIELDS)
    assert rows[0] == {
        "index": 0,
        "uuid": "GPU-5e1d2c3a-1111-2222-3333-444455556666",
        "name": "NVIDIA H100 80GB HBM3",
        "utilization": 87,
        "memory_used_mib": 40321,
        "memory_total_mib": 81559,
        "temperature_c": 61,
        "power_draw_w": 512.34,
        "power_limit_w": 700.0,
    }
    assert rows[1]["temperature_c"] is None and rows[1]["power_draw_w"] is None and rows[1]["power_limit_w"] is None
    assert rows[1]["memory_total_mib"] == 24576


def test_app_rows_and_unavailable_memory():
    rows = parse_csv(APPS_CSV, APP_FIELDS)
    assert rows[0] == {
        "pid": 4242,
        "name": "/usr/bin/python3",
        "used_memory_mib": 40000,
        "gpu_uuid": "GPU-5e1d2c3a-1111-2222-3333-444455556666",
    }
    assert rows[1]["used_memory_mib"] is None


def test_a_gpu_name_with_a_comma_and_blank_lines():
    rows = parse_csv("\n2, GPU-x, Tesla V100-SXM2-16GB, rev 2, 5, 10, 16160, 40, 60.1, 300.0\n\n", GPU_FIELDS)
    assert rows[0]["name"] == "Tesla V100-SXM2-16GB, rev 2" and rows[0]["utilization"] == 5
