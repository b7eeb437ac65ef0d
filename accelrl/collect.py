"""Collector factory and the thread budget every process follows.

``make_collector`` builds the collector ``CollectorConfig.kind`` names: TorchRL's ``Collector``
(simulators in the learner process) or ``MultiSyncCollector`` (``num_workers`` processes, each
stepping its own batch of simulators with batched inference for all of them), the alternating
sampler, ``MultiAsyncCollector``, or the batched inference server (``accelrl.samplers``), with
separate env / policy / storing devices: on a GPU machine each worker runs inference for its
simulators on the GPU while they step on CPU threads.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from torchrl.envs import EnvBase

from accelrl.clock import AwakeClock
from accelrl.config import (
    CollectorConfig,
    EnvConfig,
    ThreadsConfig,
    cpu_count,
    resolve_device,
    rows_per_batch,
)
from accelrl.envs import leave_ctrl_c_to_the_learner, make_env
from accelrl.samplers import AlternatingCollector, BatchedInferenceCollector

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
    every core; but next to another busy process more threads are slower (measured on 2 cores,
    PPO on Atari: 2 threads 1.58x faster than 1 on an idle machine, 0.65x as fast next to one
    busy process). So the first updates alternate between the candidates (``learner_torch`` and
    ``update_torch``), the one with the lower median time per unit of work wins, and every
    ``probe_every`` updates the probe runs again in case the machine's load changed.

    An update made of many short steps (DQN's gradient steps) goes through ``steps``: its probe
    times only the first ``probe_steps`` steps, then the update goes on at the current choice, so
    a probe of the slow count costs a few steps instead of a whole update (CartPole DQN next to
    a busy process: 2 threads take 3.5x as long per step, and a whole-update probe cost ~7% of
    a 50k-step run). Until the first window decides, updates run at the collection count.

    ``probe_collection`` (simulators stepped in the learner process, synchronously): the
    collection between two updates (the time from the end of one update to the start of the
    next: the simulators' steps, the policy's batched inference, logging) is probed the same
    way, with twice the probes per count from the second collection after the warm-up update
    on (``_collect_slot``), so the policy's forward passes use every core when the simulators'
    threads leave them idle (PPO on SpaceInvaders, idle 2-core machine: 1,143 frames/s with 2
    threads for both phases vs 946 with collection at 1) and keep one next to a busy process.
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
        # Collections are shorter and noisier than updates (A2C on Pong: ~80 ms, +-10%): twice
        # the probes per count.
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

    Measured on 2 cores: next to ALE's C++ threads, torch's default intra-op threads spin on
    OpenMP barriers; a batch-8 Nature-CNN forward took 114 ms with the default threads and 2.4 ms
    with one. So inference in collectors uses 1 thread, the learner a quarter of the cores (1 on
    small machines) while collection runs, and the simulators of each env get the cores divided
    among the workers. In a synchronous run (``overlapped`` False) the simulators and workers
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


def core_shortfall(cores: int, env_cfg: EnvConfig, cfg: CollectorConfig) -> str | None:
    """One warning line when this rank's cores cannot give each of its busy processes (the
    learner and every collector worker, which steps its simulators and runs inference) a core
    of its own; None when they can. The run still works, only slower: the processes take turns
    on the cores (e.g. a SLURM default of one CPU per task under a DGX-sized job)."""
    processes = 1 + cfg.num_workers
    if cores >= processes:
        return None
    sims = env_cfg.num_envs * max(1, cfg.num_workers)
    return (
        f"{cores} core(s) for 1 learner + {cfg.num_workers} collector worker process(es) "
        f"stepping {sims} simulators: each process gets less than a core; give this rank at "
        f"least {processes} (e.g. --cpus-per-task {processes}) or use fewer "
        f"--collector.num-workers"
    )


def _worker_env(
    env_cfg: EnvConfig,
    num_envs: int,
    seed: int,
    sim_threads: int,
    torch_threads: int,
    in_worker: bool = False,
) -> EnvBase:
    # Runs inside each collector worker: the thread budget must be set in that process.
    torch.set_num_threads(torch_threads)
    if in_worker:
        leave_ctrl_c_to_the_learner()
    return make_env(env_cfg, seed=seed, num_envs=num_envs, sim_threads=sim_threads)


def env_factory(
    env_cfg: EnvConfig,
    seed: int,
    plan: ThreadPlan,
    *,
    in_worker: bool,
    num_envs: int | None = None,
    sim_threads: int | None = None,
):
    """A picklable zero-argument factory for one collector worker's batched env of
    ``num_envs`` simulators (default ``env_cfg.num_envs``) on ``sim_threads`` C++ threads
    (default the plan's)."""
    torch_threads = plan.worker_torch if in_worker else plan.learner_torch
    return functools.partial(
        _worker_env,
        env_cfg,
        env_cfg.num_envs if num_envs is None else num_envs,
        seed,
        plan.sim_threads if sim_threads is None else sim_threads,
        torch_threads,
        in_worker,
    )


def make_collector(
    env_cfg: EnvConfig,
    cfg: CollectorConfig,
    policy: torch.nn.Module,
    *,
    seed: int,
    plan: ThreadPlan,
    learner_device: str,
    start_version: int = 0,
    compile_policy: bool = False,
    cudagraph_policy: bool = False,
):
    """An endless collector of ``cfg.kind`` yielding batches of agent steps, time last.

    - sync: ``[envs, T]`` (no workers, TorchRL ``Collector``) or ``[workers, envs, T]``
      (``MultiSyncCollector``), ``cfg.steps_per_batch`` steps in all.
    - alternating: ``[envs, T]`` from two halves of the simulators that take turns with the
      policy (``accelrl.samplers.AlternatingCollector``).
    - async: ``[envs, T]`` of ``cfg.steps_per_batch`` steps from whichever worker finished
      first (``MultiAsyncCollector``); wrap ``policy`` in a ``VersionStamp`` to measure lag.
    - batched: ``[envs x workers, T]``, every simulator in its own slot, one inference server
      (``accelrl.samplers.BatchedInferenceCollector``); carries ``policy_version`` from
      ``start_version`` on.

    Worker ``i`` seeds its simulators from ``seed + i * num_envs``. After each update call
    ``collector.update_policy_weights_()`` so the acting weights follow the learner's.
    ``compile_policy`` / ``cudagraph_policy`` hand the policy to TorchRL's ``torch.compile`` /
    ``CudaGraphModule`` wrapping (sync and async kinds only; validation refuses the others).
    """
    policy_device = (
        learner_device if cfg.policy_device == "auto" else resolve_device(cfg.policy_device)
    )
    storing_device = (
        learner_device if cfg.storing_device == "auto" else resolve_device(cfg.storing_device)
    )
    if cfg.kind == "alternating":
        half = env_cfg.num_envs // 2
        group_threads = max(1, plan.sim_threads // 2)

        def make_group(g: int) -> EnvBase:
            return env_factory(
                env_cfg,
                seed + g * half,
                plan,
                in_worker=False,
                num_envs=half,
                sim_threads=group_threads,
            )()

        return AlternatingCollector(
            make_group,
            policy,
            frames_per_batch=cfg.steps_per_batch,
            policy_device=policy_device,
            storing_device=storing_device,
        )
    if cfg.kind == "batched":
        sims = rows_per_batch(env_cfg, cfg)
        one = dict(in_worker=True, num_envs=1, sim_threads=1)
        return BatchedInferenceCollector(
            [env_factory(env_cfg, seed + i, plan, **one) for i in range(sims)],
            policy,
            frames_per_batch=cfg.steps_per_batch,
            envs_per_worker=env_cfg.num_envs,
            policy_device=policy_device,
            storing_device=storing_device,
            start_version=start_version,
        )
    common = dict(
        frames_per_batch=cfg.steps_per_batch,
        total_frames=-1,
        env_device=cfg.env_device,
        policy_device=policy_device,
        storing_device=storing_device,
    )
    if compile_policy or cudagraph_policy:
        if cfg.kind not in ("sync", "async"):
            raise ValueError(f"compiled policies need collector kind sync or async, not {cfg.kind}")
        common |= dict(
            compile_policy=compile_policy or None, cudagraph_policy=cudagraph_policy or None
        )
    with warnings.catch_warnings():
        # Feed-forward policies need no InitTracker; TorchRL warns about it regardless.
        warnings.simplefilter("ignore", FutureWarning)
        if cfg.num_workers == 0:
            return Collector(
                env_factory(env_cfg, seed, plan, in_worker=False)(),
                policy,
                # Nothing here reads ("collector", "traj_ids") (the replay and the episode
                # log follow the done flags); tracking them is a few operations per step.
                # TorchRL's multi-process collectors have no such switch.
                track_traj_ids=False,
                **common,
            )
        factories = [
            env_factory(env_cfg, seed + i * env_cfg.num_envs, plan, in_worker=True)
            for i in range(cfg.num_workers)
        ]
        if cfg.kind == "async":
            return MultiAsyncCollector(factories, policy, **common)
        return MultiSyncCollector(factories, policy, cat_results="stack", **common)


def run_collector(cfg: Any, proc: Any, policy: torch.nn.Module, updates: int) -> WatchedCollector:
    """``make_collector`` with a run's settings, watched (``WatchedCollector``): ``cfg`` is the
    recipe's config, ``proc`` its ``accelrl.process.Process`` (thread plan, learner device,
    simulator seeds, which are new after a resume at ``updates``)."""
    collector = make_collector(
        cfg.env,
        cfg.collector,
        policy,
        seed=proc.collect_seed(updates),
        plan=proc.threads,
        learner_device=str(proc.device),
        start_version=updates,
        compile_policy=cfg.compile.policy,
        cudagraph_policy=cfg.compile.cudagraphs,
    )
    return WatchedCollector(
        collector, stall_timeout_s=cfg.collector.stall_timeout_s, learner_policy=policy
    )


def _alive(proc: Any) -> bool | None:
    """``proc.is_alive()``, or None for a process object TorchRL has closed already (it closes
    them in its own shutdown after it noticed a dead worker; ``is_alive`` then raises)."""
    try:
        return proc.is_alive()
    except ValueError:
        return None


class CollectorFailure(RuntimeError):
    """A collector worker died or stopped producing batches; the run stops."""


class WatchedCollector:
    """Wraps any collector so that a dead or silent worker stops the run instead of hanging it.

    TorchRL's ``MultiSyncCollector`` waits forever for a worker that was killed (found here:
    SIGKILL on a worker mid-run left the learner blocked with no CPU use). A watchdog thread
    checks the worker processes every second and how long the current wait for a batch has
    lasted (not the learner's time between batches, nor time the job spent suspended: an
    ``AwakeClock``); on a failure
    it records the reason and sends SIGUSR1 to the main thread, whose handler raises
    ``CollectorFailure`` there (a blocked wait is interrupted too). ``shutdown`` then kills the
    remaining workers before TorchRL's own shutdown, bounded in time, so nothing is left behind.

    ``learner_policy``: the module the learner updates. An in-process ``Collector`` that acts
    with that very module (no copy, no compiled wrapper) already acts with the new weights, so
    ``update_policy_weights_()`` skips TorchRL's copy of every weight onto itself (0.8 ms a
    batch, measured: ~0.6% of an A2C batch).
    """

    def __init__(
        self,
        collector: Any,
        *,
        stall_timeout_s: float,
        startup_timeout_s: float | None = None,
        learner_policy: Any = None,
    ) -> None:
        self.inner = collector
        self.acts_with_learner_weights = (
            learner_policy is not None
            and isinstance(collector, Collector)
            and getattr(collector, "policy", None) is learner_policy
        )
        self.stall_timeout_s = stall_timeout_s
        # The first batch includes starting the workers and their simulators.
        self.startup_timeout_s = startup_timeout_s or 5 * stall_timeout_s
        self.failure: str | None = None
        self._clock = AwakeClock(tick_s=1.0)  # ticked by the watchdog
        self._last = self._clock.now()  # since the wait for the next batch began
        self._waiting = True  # start-up counts: the first wait begins now
        self._batches = 0
        self._stop = threading.Event()
        self._pids: dict[int, int] = {}  # worker index -> pid, as last seen alive
        self._main = threading.main_thread().ident
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGUSR1, self._raise_failure)
        self._thread = threading.Thread(target=self._watch, name="accelrl-watchdog", daemon=True)
        self._thread.start()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def procs(self) -> list[Any]:
        return list(getattr(self.inner, "procs", []) or [])

    def __iter__(self):
        # Only the time spent waiting for a batch counts: a learner that holds one for longer
        # than the limit (a first compiled update takes minutes on a CPU) is not a stall.
        batches = iter(self.inner)
        try:
            while True:
                self._last = self._clock.now()
                self._waiting = True
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                finally:
                    self._waiting = False
                self._batches += 1
                yield batch
        except (Exception, KeyboardInterrupt) as err:
            # TorchRL may notice the dead worker first, or wrap our exception in its own.
            reason = self.failure or self._dead_worker(err)
            if reason is None or isinstance(err, CollectorFailure):
                raise
            self.failure = reason
            raise CollectorFailure(reason) from err

    def _dead_worker(self, err: BaseException | None = None) -> str | None:
        closed = False
        for i, proc in enumerate(self.procs()):
            alive = _alive(proc)
            if alive:
                self._pids[i] = proc.pid
            elif alive is False:
                return f"collector worker {i} (pid {proc.pid}) died (exit code {proc.exitcode})"
            else:
                closed = True
        if closed and err is not None:
            # TorchRL saw the failure first and closed the process objects; its message names
            # the worker and exit code, the pids are the ones the watchdog saw alive.
            first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
            named = re.search(r"worker (\d+)", first)
            if named and int(named.group(1)) in self._pids:
                i = int(named.group(1))
                return f"collector worker {i} (pid {self._pids[i]}) died ({first})"
            return f"a collector worker died ({first})"
        return None

    def _watch(self) -> None:
        while not self._stop.wait(self._clock.tick_s):
            self._clock.tick()
            reason = self._dead_worker()
            limit = self.stall_timeout_s if self._batches else self.startup_timeout_s
            silent = self._clock.now() - self._last if self._waiting else 0.0
            if reason is None and silent > limit:
                reason = f"the collector produced no batch for {silent:.0f} s (limit {limit:.0f} s)"
            if reason is not None:
                self.failure = reason
                log.error("%s; stopping the run", reason)
                if self._previous is not None:
                    signal.pthread_kill(self._main, signal.SIGUSR1)
                return

    def _raise_failure(self, signum: int, frame: Any) -> None:
        if self.failure is not None:
            raise CollectorFailure(self.failure)

    def update_policy_weights_(self, *args: Any, **kwargs: Any) -> None:
        if self.acts_with_learner_weights and not args and not kwargs:
            return
        self.inner.update_policy_weights_(*args, **kwargs)

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            # No daemon thread of ours may be running when the interpreter exits: one woken
            # during finalization is ended by pthread_exit, which aborts the process when C++
            # frames are on its stack (pytorch/pytorch#38228).
            self._thread.join(timeout=5.0)
        try:
            if self.failure is None:
                self.inner.shutdown()
                return
            for proc in self.procs():
                if _alive(proc):
                    proc.kill()
            # TorchRL's shutdown talks to every worker; bound it so a broken one cannot hang us.
            done = threading.Thread(target=self._shutdown_broken, daemon=True)
            done.start()
            done.join(timeout=30.0)
        finally:
            main = threading.current_thread() is threading.main_thread()
            if self._previous is not None and main:
                signal.signal(signal.SIGUSR1, self._previous)
                self._previous = None

    def _shutdown_broken(self) -> None:
        try:
            if hasattr(self.inner, "procs"):
                self.inner.shutdown(timeout=5.0, raise_on_error=False)
            else:
                self.inner.shutdown()
        except Exception as err:  # noqa: BLE001 - the run is already stopping for a reason
            log.warning("collector shutdown after a failure: %r", err)
