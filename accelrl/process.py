"""Process setup, done once at the start of a run and returned as a frozen ``Process``.

    proc = setup_process(cfg)   # console log, process group, device, threads, seeds, signals

Everything a recipe needs to know about the process it runs in lives in that value: its rank
in a data-parallel job, the learner's device, the thread budget
(``accelrl.collectors.ThreadPlan``) and the stop signals it listens to. Nothing here is
module-level state.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from accelrl import distributed
from accelrl.collectors.threads import ThreadPlan, UpdateThreads, core_shortfall, plan_threads
from accelrl.config import cpu_count, resolve_device
from accelrl.distributed import DistInfo

log = logging.getLogger("accelrl")


class StopSignals:
    """SIGTERM / SIGUSR2 (SLURM's warnings before a time limit or preemption) and a first
    Ctrl-C (SIGINT) ask the run to stop at the next batch boundary; the recipe checks
    ``requested()`` once per batch, writes a checkpoint and calls ``hand_over()``, which runs the
    handler installed before ours for SIGTERM / SIGUSR2 (submitit's, which requeues the job).
    A second Ctrl-C stops at once (``KeyboardInterrupt``, no checkpoint). Collector worker
    processes ignore SIGINT (``accelrl.collectors.factory``), so a terminal's Ctrl-C, which
    reaches the whole process group, leaves them to finish the batch. Installed only from the
    main thread; ``install()`` puts ours in place and ``restore()`` the earlier handlers back:
    the run folder's ``with`` block does both (``accelrl.run.folder``)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Our handlers, in place of the current ones (main thread only; a no-op elsewhere)."""
        if threading.current_thread() is threading.main_thread() and not self._previous:
            for sig in (signal.SIGTERM, signal.SIGUSR2):
                self._previous[sig] = signal.signal(sig, self._on_signal)
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_interrupt)

    def _on_signal(self, signum: int, frame: Any) -> None:
        # submitit's preemption sends SIGTERM then USR2; USR2 is the one that requeues.
        if self.signum != signal.SIGUSR2:
            self.signum = signum

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # asked twice: stop now
        self.signum = signum
        print(
            "\naccelrl: Ctrl-C: stopping after this batch with a checkpoint "
            "(Ctrl-C again to stop at once, without one)",
            file=sys.stderr,
            flush=True,
        )

    def requested(self) -> bool:
        """True on every rank as soon as any rank received a stop signal (one all-reduce)."""
        return distributed.any_rank(self.signum is not None)

    def restore(self) -> None:
        """Put the handlers that were installed before ours back."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def hand_over(self) -> int:
        """Restore the earlier handlers and run the one for our signal (submitit: checkpoint
        and requeue, then exit); returns the signal number when that handler returns. Not for
        Ctrl-C: Python's own SIGINT handler would raise ``KeyboardInterrupt``."""
        signum = self.signum or signal.SIGTERM
        previous = self._previous.get(signum)
        self.restore()
        if callable(previous) and signum != signal.SIGINT:
            previous(signum, None)
        return signum


@dataclass(frozen=True)
class Process:
    """This process's place in the run: rank, learner device, thread budget, seed, signals."""

    dist: DistInfo
    device: torch.device
    threads: ThreadPlan
    seed: int
    signals: StopSignals
    update_threads: UpdateThreads
    """``with proc.update_threads():`` around each update, or ``for _ in
    proc.update_threads.steps(n):`` around an update of n short steps (threads chosen by
    measurement)."""

    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    @property
    def world_size(self) -> int:
        return self.dist.world_size

    def replicate(self, modules: list[torch.nn.Module], updates: int) -> None:
        """Data parallel: every rank takes rank 0's weights (fresh or resumed), then seeds its
        own action sampling and minibatch order. No-op in a single process."""
        if self.dist.world_size == 1:
            return
        for module in modules:
            distributed.broadcast_module(module)
        seed_everything(self.seed + 1_000_003 * self.dist.rank + updates)

    def collect_seed(self, updates: int) -> int:
        """Simulator seed for this (re)start: each rank plays its own episodes, and a resumed
        run new ones rather than replays of the first."""
        return self.seed * 1_000_003 + updates * 7_919 + self.dist.rank * 10_000_019


def flush_denormals() -> None:
    """Treat subnormal floats (below ~1.2e-38 in float32) as zero in this process's CPU math.

    Adam's first moment of a weight whose gradient is exactly zero (a dead ReLU unit) decays by
    0.9 per step and becomes subnormal after ~800 steps; x86 cores compute on subnormals through
    a slow microcode path, which slows a small network's optimizer step several times over;
    flushing leaves the losses unchanged to the printed digits (docs/performance.md#threads,
    docs/development-notes.md#pytorch-and-the-platform). Threads started afterwards inherit the
    setting (OpenMP's workers, when this comes before the first parallel region); no effect on GPUs.
    """
    torch.set_flush_denormal(True)


def setup_process(cfg: Any, *, overlapped: bool = False) -> Process:
    """Console logging, the data-parallel group (torchrun or SLURM; none otherwise), the
    learner's device, the thread plan (``torch.set_num_threads`` for the learner), seeds and
    stop-signal handlers, from a validated recipe config. ``overlapped``: collection runs while
    the learner updates even with a synchronous collector kind (DQN's replay feeder thread)."""
    setup_console_logging()
    dist = distributed.init_from_environment()
    device = torch.device(distributed.rank_device(resolve_device(cfg.device)))
    threads = plan_threads(
        cfg.threads,
        cfg.collector.num_workers,
        cores=cores_per_rank(dist),
        overlapped=overlapped or cfg.collector.kind in ("async", "batched"),
    )
    torch.set_num_threads(threads.learner_torch)
    flush_denormals()
    shortfall = core_shortfall(threads.cores, cfg.env, cfg.collector)
    if shortfall:
        log.warning("rank %d: %s", dist.rank, shortfall)
    seed_everything(cfg.seed)
    log.info("device %s, %s", device, threads.describe())
    update_threads = learner_threads(cfg, threads, overlapped)
    return Process(dist, device, threads, cfg.seed, StopSignals(), update_threads)


def learner_threads(cfg: Any, plan: ThreadPlan, overlapped: bool) -> UpdateThreads:
    """The learner's measured thread choice: for its updates, and for collection when the
    learner steps the simulators and acts for them itself (the in-process synchronous
    collector with nothing overlapping the updates)."""
    in_process = cfg.collector.kind == "sync" and cfg.collector.num_workers == 0
    return UpdateThreads(plan, probe_collection=in_process and not overlapped)


def cores_per_rank(dist: DistInfo) -> int:
    """Cores this rank may use: its affinity mask, split between the local ranks when torchrun
    started them all with the whole machine's (SLURM tasks usually get their own cores)."""
    cores = cpu_count()
    if dist.local_world_size > 1 and cores == (os.cpu_count() or cores):
        cores = max(1, cores // dist.local_world_size)
    return cores


def lr_scale(world_size: int, rule: str) -> float:
    """``--dist.lr-scaling``: the factor for a learning rate tuned on one rank when N ranks
    average their gradients over an N-times larger batch: none 1, linear N (Goyal et al.
    2017's rule for SGD), sqrt sqrt(N) (a common choice for Adam)."""
    if world_size == 1 or rule == "none":
        return 1.0
    factor = float(world_size) if rule == "linear" else world_size**0.5
    log.info("learning rate x %.3g (%s scaling, %d ranks)", factor, rule, world_size)
    return factor


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (redirected or captured later)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def setup_console_logging() -> None:
    """``[accelrl] ...`` lines on stderr for the package's logger (once per process)."""
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[accelrl] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
