"""Clocks of a run's process: seconds since its command started, and monotonic seconds that
leave out the time the process was not running (a timeout's clock)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def seconds_since_start() -> float:
    """Wall seconds since this process started (its command ran), from /proc; nan elsewhere.
    Measures time to the first batch, imports and worker start-up included."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return float("nan")
    return time.time() - (boot + start_ticks / os.sysconf("SC_CLK_TCK"))


class AwakeClock:
    """Monotonic seconds less the time this process was not running: stopped (Ctrl-Z, SIGSTOP,
    SLURM's ``scontrol suspend`` and gang scheduling) or on a machine that slept.

    A timeout that counts wall time fires as soon as a suspended job continues: found when a run
    stopped with SIGSTOP for four minutes was ended by the collector watchdog ("no batch for
    250 s") on SIGCONT. The owner calls ``tick()`` every ``tick_s`` (a watchdog loop, a sliced
    wait); a gap between ticks longer than ``tick_s + grace_s`` means nothing in the process ran,
    and only ``tick_s`` of it counts. A busy machine that delays a tick by less than ``grace_s``
    is not mistaken for a pause; one that starves a thread for longer only makes a timeout late.
    """

    def __init__(self, tick_s: float = 1.0, grace_s: float = 4.0) -> None:
        self.tick_s, self.grace_s = tick_s, grace_s
        self.lost = 0.0
        """Seconds not counted so far."""
        self._last_tick = time.monotonic()

    def _pending(self, now: float) -> float:
        gap = now - self._last_tick
        return gap - self.tick_s if gap > self.tick_s + self.grace_s else 0.0

    def tick(self) -> None:
        now = time.monotonic()
        self.lost += self._pending(now)
        self._last_tick = now

    def now(self) -> float:
        """Awake seconds (any origin), continuous across a ``tick()`` after a pause."""
        now = time.monotonic()
        return now - self.lost - self._pending(now)

    def wait_for(self, cond: Any, predicate: Callable[[], Any], timeout: float) -> Any:
        """``cond.wait_for(predicate, timeout)`` (``cond`` held by the caller) with ``timeout``
        counted in awake seconds: waits in ``tick_s`` slices, ticking after each."""
        end = self.now() + timeout
        while not (result := predicate()):
            left = end - self.now()
            if left <= 0:
                return result
            cond.wait(min(self.tick_s, left))
            self.tick()
        return result
