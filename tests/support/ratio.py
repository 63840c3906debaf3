"""Ratio benchmarks that a noisy machine cannot fool: both sides interleaved over several pairs, reported as the
median ratio with its spread, never decided from two samples."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable

PAIRS = int(os.environ.get("GPUDECK_BENCH_PAIRS", "5"))


def interleave(base: Callable[[], float], ours: Callable[[], float], pairs: int = PAIRS) -> list[tuple[float, float]]:
    """`pairs` (base, ours) samples, taken base-ours, ours-base, base-ours, ... so a machine that slows down or
    speeds up over the run hits both sides alike."""
    out = []
    for i in range(pairs):
        if i % 2 == 0:
            b = base()
            o = ours()
        else:
            o = ours()
            b = base()
        out.append((b, o))
    return out


def summary(samples: list[tuple[float, float]], what: str = "ratio") -> str:
    """`what` median M (min A, max B) over N pairs, with every pair's figures."""
    ratios = [o / b for b, o in samples]
    pairs = ", ".join(f"{b:.1f}/{o:.1f}" for b, o in samples)
    return (
        f"{what} median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) "
        f"over {len(samples)} pairs [base/ours: {pairs}]"
    )


def windows(points: list[dict]) -> str:
    """What a run's metric points say about stalls: the median and the slowest log window's images/s and the
    longest gap between points against the median gap (a stall shows as one slow window and a long gap;
    a uniformly slow machine as a low median)."""
    rates = [p["images_per_sec"] for p in points if p.get("images_per_sec")]
    times = [p["time"] for p in points if "time" in p and "images_per_sec" in p]
    gaps = [b - a for a, b in zip(times, times[1:])]
    if not rates or not gaps:
        return "no windows"
    return (
        f"windows {len(rates)}: median {statistics.median(rates):.1f} img/s, slowest {min(rates):.1f}; "
        f"longest gap {max(gaps):.2f} s vs median {statistics.median(gaps):.3f} s"
    )
