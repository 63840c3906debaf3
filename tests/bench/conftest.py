"""Benchmarks have a time budget of their own: pytest's 300 s (pyproject.toml, for `make test`) is far too short
for a benchmark that trains ResNet-20 ten times. A benchmark without its own `@pytest.mark.timeout` gets
BENCH_TIMEOUT_S; `make bench` prints how long each took (--durations)."""

from __future__ import annotations

import pytest

BENCH_TIMEOUT_S = 3600
"""The budget of a benchmark that names none (one hour: the longest here take about 15 minutes on 2 cores)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(BENCH_TIMEOUT_S))
