"""A run's counters and cadences: frames, updates, phase timings, and "every N frames".

Frames are emulator frames (agent steps x frameskip) summed over data-parallel ranks, the unit
of ``--total-frames`` and of every ``--*-frames`` flag; ``Progress.frames_in`` converts a batch
of agent steps.
"""

from __future__ import annotations

import logging
import time

from tensordict import TensorDictBase

from accelrl.clock import seconds_since_start

log = logging.getLogger("accelrl")


class Progress:
    """Frames and updates so far, and how long collection and the update of the last batch took.

    The loop calls ``collected(batch)`` when a batch arrives and ``updated()`` after the update
    (its dict of ``perf/*`` and ``train/updates`` goes into the metrics row); ``restart_clock()``
    after evaluation and checkpoints keeps them out of the next batch's collection time.
    """

    def __init__(
        self,
        total_frames: int,
        frames_per_step: int,
        world_size: int = 1,
        *,
        frames: int = 0,
        updates: int = 0,
    ) -> None:
        self.total_frames = total_frames
        self.frames_per_step = frames_per_step
        self.world_size = world_size
        self.frames = frames
        self.updates = updates
        self.frames_at_start = frames
        self.dropped_frames = 0
        self.t_start = self._t_batch = time.perf_counter()
        self._t_collect = 0.0
        self.first_batch_s: float | None = None
        """Seconds from the command to the first batch (``accelrl.clock.seconds_since_start``)."""

    def frames_in(self, batch: TensorDictBase) -> int:
        """Emulator frames of a batch of agent steps collected by every rank."""
        return batch.numel() * self.frames_per_step * self.world_size

    def collected(self, batch: TensorDictBase) -> None:
        """Count a batch (every rank collects one of the same size)."""
        now = time.perf_counter()
        self._t_collect = now - self._t_batch
        self._t_batch = now
        self.frames += self.frames_in(batch)
        if self.first_batch_s is None:
            self.first_batch_s = seconds_since_start()
            log.info("first batch %.1f s after the command started", self.first_batch_s)

    def dropped(self, batch: TensorDictBase) -> None:
        """Count a batch thrown away unused (too stale under the policy-lag rule)."""
        self.dropped_frames += batch.numel() * self.frames_per_step

    def updated(self) -> dict[str, float]:
        """Count an update; returns its timings and throughput for the metrics row."""
        now = time.perf_counter()
        t_update, self._t_batch = now - self._t_batch, now
        self.updates += 1
        return {
            "perf/fps": self.fps,
            "perf/collect_s": self._t_collect,
            "perf/update_s": t_update,
            "perf/dropped_frames": self.dropped_frames,
            "train/updates": self.updates,
        }

    def restart_clock(self) -> None:
        self._t_batch = time.perf_counter()

    @property
    def fps(self) -> float:
        """Frames per second since this process started (or resumed) the run."""
        elapsed = time.perf_counter() - self.t_start
        return (self.frames - self.frames_at_start) / max(elapsed, 1e-9)

    @property
    def fraction(self) -> float:
        """Share of ``total_frames`` done, in [0, 1] (drives annealed schedules)."""
        return min(1.0, self.frames / self.total_frames)

    @property
    def done(self) -> bool:
        return self.frames >= self.total_frames


class Every:
    """True once each time the frame count crosses a multiple of ``period`` (0: never); a
    resumed run starts after the multiple it had reached."""

    def __init__(self, period: int, frames: int = 0) -> None:
        self.period = period
        self.next = (frames // period + 1) * period if period else None

    def __call__(self, frames: int) -> bool:
        if self.next is None or frames < self.next:
            return False
        while self.next <= frames:
            self.next += self.period
        return True
