"""Helpers shared by the benchmarks: interleaved timing rounds, medians, tables, JSON output.

Absolute timings on a shared machine drift by 2x from one second to the next, so every
benchmark runs the things it compares in short alternating segments within one process and
reports the median of per-round ratios, which cancels drift that is slow next to one round.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

# A segment runs for about the given number of seconds and returns (agent steps, seconds).
Segment = Callable[[float], tuple[int, float]]


def cores() -> int:
    """Cores this process may use (respects affinity masks)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def time_steps(step: Callable[[], Any], steps_per_call: int, seconds: float) -> tuple[int, float]:
    """Call ``step`` until ``seconds`` have passed; returns (agent steps, elapsed seconds)."""
    calls = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        step()
        calls += 1
        now = time.perf_counter()
        if now >= end:
            return calls * steps_per_call, now - start


def run_rounds(
    segments: dict[str, Segment], rounds: int, seconds: float, *, verbose: bool = False
) -> dict[str, list[float]]:
    """Run every segment once per round for ``seconds``; returns per-round rates (steps/s).

    The order rotates from round to round so that no segment always follows the same one.
    """
    names = list(segments)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            steps, elapsed = segments[name](seconds)
            rates[name].append(steps / elapsed)
        if verbose:
            line = ", ".join(f"{n}={rates[n][-1]:,.0f}" for n in names)
            print(f"  round {r + 1}/{rounds}: {line}", flush=True)
    return rates


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def median_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """Median of the per-round ratios ``num[r] / den[r]`` (paired within each round)."""
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def verdict(value: float, target: float) -> str:
    return "PASS" if value >= target else "MISS"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain fixed-width table (right-aligned numbers)."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):  # ratios get 3 decimals so that 0.897 does not print as 0.90
            return f"{v:.3f}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "date": datetime.date.today().isoformat(),
        "cores": cores(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def write_json(path: str, payload: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}")
