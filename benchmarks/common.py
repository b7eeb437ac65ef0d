"""Helpers shared by the benchmarks: interleaved timing rounds, medians, tables, JSON output.

Absolute timings on a shared machine drift by 2x from one second to the next, so every
benchmark runs the things it compares in short alternating segments within one process and
reports the median of per-round ratios, which cancels drift that is slow next to one round.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
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


def paired_rates(
    steppers: dict[str, Callable[[], Any]],
    steps_per_call: int,
    rounds: int,
    seconds: float,
    *,
    warmup_calls: int = 50,
    verbose: bool = False,
) -> dict[str, list[float]]:
    """Warm each stepper up, then time them in ``rounds`` alternating rounds (``seconds`` in
    all per stepper); returns per-round rates (steps/s) by name."""
    for step in steppers.values():  # first steps allocate and fill caches
        for _ in range(warmup_calls):
            step()
    segments = {
        name: (lambda s, st=step: time_steps(st, steps_per_call, s))
        for name, step in steppers.items()
    }
    return run_rounds(segments, rounds, seconds / rounds, verbose=verbose)


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


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU as results name their host: model, family and model numbers, widest vector
    instructions, cores; e.g. ``AMD EPYC (family 23, model 1; AVX2), 2 cores``. Reads
    ``/proc/cpuinfo`` (Linux); elsewhere, what ``platform`` knows."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return f"{platform.processor() or platform.machine()}, {cores()} cores"
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # the first processor's block is enough
            continue
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    model = fields.get("model name") or platform.processor() or platform.machine()
    numbers = ", ".join(
        f"{name} {fields[key]}" for key, name in (("cpu family", "family"), ("model", "model"))
        if key in fields
    )  # fmt: skip
    inside = f"{numbers}; {isa}" if numbers else isa
    return f"{model} ({inside}), {cores()} cores"


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "date": datetime.date.today().isoformat(),
        "cores": cores(),
        "cpu": cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def write_json(path: str, payload: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}")


def results_payload(json_path: str | None, results: list, **extra: Any) -> dict[str, Any]:
    """``machine_info()`` with ``extra`` and ``results``, written to ``json_path`` if given."""
    payload = {**machine_info(), **extra, "results": results}
    if json_path:
        write_json(json_path, payload)
    return payload


# --- the summary table of ``benchmarks.run`` -------------------------------------------------


@dataclasses.dataclass
class Row:
    """One line of the summary table: a measured rate, its reference and the target.

    ``ratio`` is ``rate / ref_rate`` as a median of per-round paired ratios where rounds exist
    (so it may differ slightly from the ratio of the two medians shown). ``target`` applies to
    the ratio (``target_on="ratio"``) or to the rate itself (``"rate"``), compared with ``op``.
    """

    section: str
    what: str
    rate: float | None
    unit: str
    frames_per_s: float | None = None
    reference: str = ""
    ref_rate: float | None = None
    ratio: float | None = None
    target: float | None = None
    op: str = ">="
    target_on: str = "ratio"
    note: str = ""

    @property
    def met(self) -> str:
        if self.target is None:
            return "-"
        value = self.ratio if self.target_on == "ratio" else self.rate
        if value is None or not math.isfinite(value):
            return "MISSED"
        ok = value >= self.target if self.op == ">=" else value <= self.target
        return "yes" if ok else "MISSED"

    def target_text(self) -> str:
        if self.target is None:
            return "-"
        what = "" if self.target_on == "ratio" else f" {self.unit}"
        return f"{self.op} {self.target:g}{what}"

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "met": self.met, "target_text": self.target_text()}


def _num(v: float | None, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-" if v is None else str(v)
    if digits:
        return f"{v:,.{digits}f}"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}"


def print_summary(rows: Sequence[Row]) -> None:
    """The one table ``benchmarks.run`` prints: rate, reference, ratio, target, met?"""
    headers = ["what", "rate", "unit", "frames/s", "reference", "ref rate", "ratio", "target"]
    headers.append("met?")
    table = [
        [
            r.what,
            _num(r.rate),
            r.unit,
            _num(r.frames_per_s),
            r.reference,
            _num(r.ref_rate),
            "-" if r.ratio is None else f"{r.ratio:.3f}",
            r.target_text(),
            r.met,
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    left = {0, 2, 4}  # text columns

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    print(line(headers))
    print(line(["-" * w for w in widths]))
    section = None
    for r, cells in zip(rows, table, strict=True):
        if section is not None and r.section != section:
            print()
        section = r.section
        print(line(cells))
