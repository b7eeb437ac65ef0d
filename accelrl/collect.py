"""Collector factory and the thread budget every process follows.

``make_collector`` builds the collector ``CollectorConfig.kind`` names: TorchRL's ``Collector``
(simulators in the learner process) or ``MultiSyncCollector`` (``num_workers`` processes, each
stepping its own batch of simulators with batched inference for all of them), the alternating
sampler, ``MultiAsyncCollector``, or the batched inference server (``accelrl.samplers``), with
separate env / policy / storing devices: on a GPU machine each worker runs inference for its
simulators on the GPU while they step on CPU threads.
"""

from __future__ import annotations

import functools
import logging
import warnings
from dataclasses import dataclass, replace

import torch
from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from torchrl.envs import EnvBase

from accelrl.config import CollectorConfig, EnvConfig, ThreadsConfig, cpu_count, resolve_device
from accelrl.envs import make_env
from accelrl.samplers import AlternatingCollector, BatchedInferenceCollector

log = logging.getLogger("accelrl")


@dataclass(frozen=True)
class ThreadPlan:
    """Threads for each role; every process calls ``torch.set_num_threads`` with its share."""

    cores: int
    learner_torch: int
    worker_torch: int
    sim_threads: int

    def describe(self) -> str:
        return (
            f"threads: {self.cores} cores; learner torch={self.learner_torch}, "
            f"collector-worker torch={self.worker_torch}, simulator threads per env="
            f"{self.sim_threads}"
        )


def plan_threads(threads: ThreadsConfig, num_workers: int, cores: int | None = None) -> ThreadPlan:
    """Derive thread counts from the core count unless set explicitly.

    Measured on 2 cores: next to ALE's C++ threads, torch's default intra-op threads spin on
    OpenMP barriers; a batch-8 Nature-CNN forward took 114 ms with the default threads and 2.4 ms
    with one. So inference in collectors uses 1 thread, the learner a quarter of the cores (1 on
    small machines), and the simulators of each env get the cores divided among the workers.
    """
    cores = cores or cpu_count()
    learner = threads.torch_threads or (1 if cores <= 4 else max(1, cores // 4))
    worker = threads.torch_threads or 1
    sim = threads.sim_threads or max(1, cores // max(1, num_workers))
    return ThreadPlan(cores, learner, worker, sim)


def _worker_env(env_cfg: EnvConfig, seed: int, sim_threads: int, torch_threads: int) -> EnvBase:
    # Runs inside each collector worker: the thread budget must be set in that process.
    torch.set_num_threads(torch_threads)
    return make_env(env_cfg, seed=seed, sim_threads=sim_threads)


def env_factory(env_cfg: EnvConfig, seed: int, plan: ThreadPlan, *, in_worker: bool):
    """A picklable zero-argument factory for one collector worker's batched env."""
    torch_threads = plan.worker_torch if in_worker else plan.learner_torch
    return functools.partial(_worker_env, env_cfg, seed, plan.sim_threads, torch_threads)


def make_collector(
    env_cfg: EnvConfig,
    cfg: CollectorConfig,
    policy: torch.nn.Module,
    *,
    seed: int,
    plan: ThreadPlan,
    learner_device: str,
    start_version: int = 0,
):
    """An endless collector of ``cfg.kind`` yielding batches of agent steps, time last.

    - sync: ``[envs, T]`` (no workers, TorchRL ``Collector``) or ``[workers, envs, T]``
      (``MultiSyncCollector``), ``cfg.frames_per_batch`` steps in all.
    - alternating: ``[envs, T]`` from two halves of the simulators that take turns with the
      policy (``accelrl.samplers.AlternatingCollector``).
    - async: ``[envs, T]`` of ``cfg.frames_per_batch`` steps from whichever worker finished
      first (``MultiAsyncCollector``); wrap ``policy`` in a ``VersionStamp`` to measure lag.
    - batched: ``[envs x workers, T]``, every simulator in its own slot, one inference server
      (``accelrl.samplers.BatchedInferenceCollector``); carries ``policy_version`` from
      ``start_version`` on.

    Worker ``i`` seeds its simulators from ``seed + i * num_envs``. After each update call
    ``collector.update_policy_weights_()`` so the acting weights follow the learner's.
    """
    policy_device = (
        learner_device if cfg.policy_device == "auto" else resolve_device(cfg.policy_device)
    )
    storing_device = (
        learner_device if cfg.storing_device == "auto" else resolve_device(cfg.storing_device)
    )
    if cfg.kind == "alternating":
        half = replace(env_cfg, num_envs=env_cfg.num_envs // 2)
        group_plan = replace(plan, sim_threads=max(1, plan.sim_threads // 2))

        def make_group(g: int) -> EnvBase:
            return env_factory(half, seed + g * half.num_envs, group_plan, in_worker=False)()

        return AlternatingCollector(
            make_group,
            policy,
            frames_per_batch=cfg.frames_per_batch,
            policy_device=policy_device,
            storing_device=storing_device,
        )
    if cfg.kind == "batched":
        workers = max(1, cfg.num_workers)
        one = replace(env_cfg, num_envs=1)
        sims = env_cfg.num_envs * workers
        single_plan = replace(plan, sim_threads=1)
        return BatchedInferenceCollector(
            [env_factory(one, seed + i, single_plan, in_worker=True) for i in range(sims)],
            policy,
            frames_per_batch=cfg.frames_per_batch,
            envs_per_worker=env_cfg.num_envs,
            policy_device=policy_device,
            storing_device=storing_device,
            start_version=start_version,
        )
    common = dict(
        frames_per_batch=cfg.frames_per_batch,
        total_frames=-1,
        env_device=cfg.env_device,
        policy_device=policy_device,
        storing_device=storing_device,
    )
    with warnings.catch_warnings():
        # Feed-forward policies need no InitTracker; TorchRL warns about it regardless.
        warnings.simplefilter("ignore", FutureWarning)
        if cfg.num_workers == 0:
            return Collector(
                env_factory(env_cfg, seed, plan, in_worker=False)(),
                policy,
                **common,
            )
        factories = [
            env_factory(env_cfg, seed + i * env_cfg.num_envs, plan, in_worker=True)
            for i in range(cfg.num_workers)
        ]
        if cfg.kind == "async":
            return MultiAsyncCollector(factories, policy, **common)
        return MultiSyncCollector(factories, policy, cat_results="stack", **common)
