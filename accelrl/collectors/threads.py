"""The thread budget every process follows: how many torch and simulator threads each role
gets (``plan_threads``), and the learner's measured choice between two counts for its updates
and in-process collection (``UpdateThreads``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from accelrl.config import CollectorConfig, EnvConfig, ThreadsConfig, cpu_count

log = logging.getLogger("accelrl")


@dataclass(frozen=True)
class ThreadPlan:
    """Threads for each role; every process calls ``torch.set_num_threads`` with its share.

    ``learner_torch`` is the learner process's count while it collects (in-process inference
    next to the simulators' C++ threads); ``update_torch`` the most it may use while it updates
    (``UpdateThreads`` picks between the two by measurement).
    """

    cores: int
    learner_torch: int
    worker_torch: int
    sim_threads: int
    update_torch: int = 0

    def describe(self) -> str:
        updates = self.learner_torch
        if self.update_torch > self.learner_torch:
            updates = f"{self.learner_torch} or {self.update_torch}, measured"
        return (
            f"threads: {self.cores} cores; learner torch={self.learner_torch} "
            f"(updates: {updates}), collector-worker torch={self.worker_torch}, simulator "
            f"threads per env={self.sim_threads}"
        )


class UpdateThreads:
    """Torch threads for the learner's updates, and for its in-process collection, chosen by
    measurement.

    In a synchronous run the simulators wait while the learner updates, so the update may use
    every core; but next to another busy process more threads are slower
    (docs/performance.md#threads has the figures). So the first updates alternate between the
    candidates (``learner_torch`` and ``update_torch``), the one with the lower median time per
    unit of work wins, and every ``probe_every`` updates the probe runs again in case the
    machine's load changed.

    An update made of many short steps (DQN's gradient steps) goes through ``steps``: its probe
    times only the first ``probe_steps`` steps, then the update goes on at the current choice, so
    a probe of the slow count costs a few steps instead of a whole update (next to a busy
    process, a step on the slow count takes several times as long). Until the first window
    decides, updates run at the collection count.

    ``probe_collection`` (simulators stepped in the learner process, synchronously): the
    collection between two updates (the time from the end of one update to the start of the
    next: the simulators' steps, the policy's batched inference, logging) is probed the same
    way, with twice the probes per count from the second collection after the warm-up update
    on (``_collect_slot``), so the policy's forward passes use every core when the simulators'
    threads leave them idle and keep one next to a busy process.
    """

    def __init__(
        self,
        plan: ThreadPlan,
        probes: int = 2,
        probe_every: int = 500,
        probe_steps: int = 16,
        probe_collection: bool = False,
    ) -> None:
        self.collect = plan.learner_torch  # threads for the collection between updates
        self.candidates = sorted({plan.learner_torch, plan.update_torch or plan.learner_torch})
        self.probes, self.probe_every, self.probe_steps = probes, probe_every, probe_steps
        self.choice = self.collect
        self.count = 0
        self._times: dict[int, list[float]] = {c: [] for c in self.candidates}
        self._collect_candidates = self.candidates if probe_collection else [self.collect]
        # Collections are shorter and noisier than updates: twice the probes per count.
        self.collect_probes = 2 * probes
        self._collect_times: dict[int, list[float]] = {c: [] for c in self._collect_candidates}
        self._collecting: tuple[int, float] | None = None  # (threads, start) of a timed one

    def _slot(
        self, candidates: list[int], choice: int, probes: int, first: int
    ) -> tuple[int, bool]:
        """(threads for the phase at ``self.count``, whether it is a probe): phases ``first``
        to ``first + probes x candidates - 1`` of every ``probe_every`` alternate."""
        if len(candidates) == 1:
            return choice, False
        step = self.count % self.probe_every - first
        if 0 <= step < probes * len(candidates):
            return candidates[step % len(candidates)], True
        return choice, False

    def _update_slot(self) -> tuple[int, bool]:
        # Update 0 warms up (allocations, first-call overheads); then one probe window.
        return self._slot(self.candidates, self.choice, self.probes, 1)

    def _collect_slot(self) -> tuple[int, bool]:
        # From the second collection after the warm-up update on (the first still pays for
        # first calls: the first logged row, the first episode ends).
        return self._slot(self._collect_candidates, self.collect, self.collect_probes, 2)

    def probe_phase(self) -> int:
        """Updates from the start (warm-up included) until both choices are made."""
        updates = 1 + self.probes * len(self.candidates) if len(self.candidates) > 1 else 0
        n = len(self._collect_candidates)
        collections = 2 + self.collect_probes * n if n > 1 else 0
        return max(updates, collections)

    def _next(self) -> tuple[int, bool]:
        """(threads for this update, whether it is a probe); ends a timed collection."""
        if self._collecting is not None:
            threads, start = self._collecting
            self._collecting = None
            elapsed = time.perf_counter() - start
            self.collect = self._decide(
                "collection",
                self._collect_times,
                threads,
                elapsed,
                self.collect,
                self.collect_probes,
            )
        return self._update_slot()

    @contextlib.contextmanager
    def __call__(self, units: float = 1.0) -> Iterator[None]:
        """Around one update (``units``: its amount of work, e.g. gradient steps)."""
        threads, probe = self._next()
        self._set(threads)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self._record(threads, probe, elapsed / units if units > 0 else None)

    def steps(self, count: int) -> Iterator[int]:
        """``for _ in update_threads.steps(n):`` around an update of ``n`` steps (one unit of
        work each). A probe update runs its first ``1 + probe_steps`` steps at the probed
        count (the first untimed: a thread switch's first operation also starts the thread
        pool) and the rest at the current choice."""
        threads, probe = self._next()
        timed = min(count - 1, self.probe_steps) if probe else 0
        per_unit, start = None, 0.0
        self._set(threads)
        try:
            for i in range(count):
                yield i
                if i == 0:
                    start = time.perf_counter()
                elif i == timed:
                    per_unit = (time.perf_counter() - start) / timed
                    self._set(self.choice)
        finally:
            self._record(threads, probe, per_unit)  # None (not timed): no record

    def _set(self, threads: int) -> None:
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)

    def _record(self, threads: int, probe: bool, per_unit: float | None) -> None:
        """Ends an update: its timing (probes only; None: no work done, e.g. no DQN step due,
        no record), then the threads for the collection that follows."""
        self.count += 1
        if probe and per_unit is not None:
            self.choice = self._decide(
                "updates", self._times, threads, per_unit, self.choice, self.probes
            )
        collect, timed = self._collect_slot()
        self._set(collect)
        self._collecting = (collect, time.perf_counter()) if timed else None

    def _decide(
        self,
        what: str,
        times: dict[int, list[float]],
        threads: int,
        seconds: float,
        current: int,
        needed: int,
    ) -> int:
        """Adds one probe's time; once every candidate has ``needed`` of them, returns the one
        with the lowest median (and starts the next window); else ``current``."""
        times[threads].append(seconds)
        if not all(len(t) >= needed for t in times.values()):
            return current
        medians = {c: sorted(t)[len(t) // 2] for c, t in times.items()}
        choice = min(medians, key=medians.get)
        if choice != current:
            log.info(
                "%s: %d torch thread(s) (measured %s s)",
                what,
                choice,
                ", ".join(f"{c}: {m:.4f}" for c, m in medians.items()),
            )
        for t in times.values():
            t.clear()
        return choice


def plan_threads(
    threads: ThreadsConfig,
    num_workers: int,
    cores: int | None = None,
    *,
    overlapped: bool = False,
) -> ThreadPlan:
    """Derive thread counts from the core count unless set explicitly.

    Next to ALE's C++ threads, torch's default intra-op threads spin on OpenMP barriers and a
    forward pass takes many times as long (docs/performance.md#threads). So inference in
    collectors uses 1 thread, the learner a quarter of the cores (1 on small machines) while
    collection runs, and the simulators of each env get the cores divided among the workers. In
    a synchronous run (``overlapped`` False) the simulators and workers
    wait while the learner updates, so updates get every core (``update_torch``); when
    collection overlaps the updates (async or batched collectors, a replay feeder thread) they
    keep the learner's share. ``--threads.torch-threads`` fixes every torch count.
    """
    cores = cores or cpu_count()
    learner = threads.torch_threads or (1 if cores <= 4 else max(1, cores // 4))
    worker = threads.torch_threads or 1
    sim = threads.sim_threads or max(1, cores // max(1, num_workers))
    update = threads.torch_threads or (learner if overlapped else cores)
    return ThreadPlan(cores, learner, worker, sim, update)


def core_shortfall(cores: int, env_cfg: EnvConfig, collector_cfg: CollectorConfig) -> str | None:
    """One warning line when this rank's cores cannot give each of its busy processes (the
    learner and every collector worker, which steps its simulators and runs inference) a core
    of its own; None when they can. The run still works, only slower: the processes share the
    cores (e.g. a SLURM default of one CPU per task under a DGX-sized job)."""
    workers = collector_cfg.num_workers
    processes = 1 + workers
    if cores >= processes:
        return None
    sims = env_cfg.num_envs * max(1, workers)
    return (
        f"{cores} core(s) for 1 learner + {workers} collector worker process(es) "
        f"stepping {sims} simulators: each process gets less than a core; give this rank at "
        f"least {processes} (e.g. --cpus-per-task {processes}) or use fewer "
        f"--collector.num-workers"
    )
