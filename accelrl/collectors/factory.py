"""The collector factory: ``make_collector`` builds the collector ``CollectorConfig.kind`` names,
``run_collector`` builds it with a run's settings and watches it.

The kinds: TorchRL's ``Collector`` (simulators in the learner process) or ``MultiSyncCollector``
(``num_workers`` processes, each stepping its own batch of simulators with batched inference for
all of them), the alternating sampler, ``MultiAsyncCollector``, or the batched inference server,
with separate env / policy / storing devices: on a GPU machine each worker runs inference for
its simulators on the GPU while they step on CPU threads.
"""

from __future__ import annotations

import functools
import multiprocessing
import warnings
from dataclasses import dataclass, replace
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from torchrl.envs import EnvBase

from accelrl.collectors.alternating import AlternatingCollector
from accelrl.collectors.batched import BatchedInferenceCollector
from accelrl.collectors.lean import LeanCollector
from accelrl.collectors.threads import ThreadPlan
from accelrl.collectors.watchdog import WatchedCollector
from accelrl.config import (
    CollectorConfig,
    CompileConfig,
    EnvConfig,
    resolve_device,
    rows_per_batch,
)
from accelrl.envs import leave_ctrl_c_to_the_learner, make_env
from accelrl.models import DirectTensorDictModule


def _worker_env(
    env_cfg: EnvConfig,
    num_envs: int,
    seed: int,
    sim_threads: int,
    torch_threads: int,
    in_worker: bool = False,
    state: TensorDictBase | None = None,
) -> EnvBase:
    # Runs inside each collector worker: the thread budget must be set in that process.
    torch.set_num_threads(torch_threads)
    if in_worker:
        leave_ctrl_c_to_the_learner()
    if in_worker and multiprocessing.parent_process() is not None:
        # A worker process starts with randomly seeded generators, and its policy samples the
        # actions from torch's: seeded from its simulators' seed, the sampling follows the
        # run's seed. (Not in the learner's process, should a collector build an env there.)
        from accelrl.process import seed_everything  # here: accelrl.process imports this package

        seed_everything(seed)
    return make_env(env_cfg, seed=seed, num_envs=num_envs, sim_threads=sim_threads, state=state)


def env_factory(
    env_cfg: EnvConfig,
    seed: int,
    plan: ThreadPlan,
    *,
    in_worker: bool,
    num_envs: int | None = None,
    sim_threads: int | None = None,
    state: TensorDictBase | None = None,
):
    """A picklable zero-argument factory for one collector worker's batched env of
    ``num_envs`` simulators (default ``env_cfg.num_envs``) on ``sim_threads`` C++ threads
    (default the plan's), carrying a recurrent policy's ``state`` when given
    (``accelrl.envs.with_state``)."""
    torch_threads = plan.worker_torch if in_worker else plan.learner_torch
    return functools.partial(
        _worker_env,
        env_cfg,
        env_cfg.num_envs if num_envs is None else num_envs,
        seed,
        plan.sim_threads if sim_threads is None else sim_threads,
        torch_threads,
        in_worker,
        state,
    )


def make_collector(
    env_cfg: EnvConfig,
    collector_cfg: CollectorConfig,
    policy: torch.nn.Module,
    *,
    seed: int,
    plan: ThreadPlan,
    learner_device: str,
    start_version: int = 0,
    compile_cfg: CompileConfig | None = None,
    state: TensorDictBase | None = None,
):
    """An endless collector of ``collector_cfg.kind`` yielding batches of agent steps, time last.

    - sync: ``[envs, T]`` (no workers, TorchRL ``Collector``) or ``[workers, envs, T]``
      (``MultiSyncCollector``), ``steps_per_batch`` steps in all.
    - alternating: ``[envs, T]`` from two halves of the simulators that alternate with the
      policy (``accelrl.collectors.AlternatingCollector``).
    - async: ``[envs, T]`` of ``steps_per_batch`` steps from whichever worker finished first
      (``MultiAsyncCollector``); wrap ``policy`` in a ``VersionStamp`` to measure lag.
    - batched: ``[envs x workers, T]``, every simulator in its own slot, one inference server
      (``accelrl.collectors.BatchedInferenceCollector``); carries ``policy_version`` from
      ``start_version`` on.

    Worker ``i`` seeds its simulators from ``seed + i * num_envs``. After each update call
    ``collector.update_policy_weights_()`` so the acting weights follow the learner's.
    ``compile_cfg`` (its ``policy`` / ``cudagraphs``) hands the policy to TorchRL's
    ``torch.compile`` / ``CudaGraphModule`` wrapping (sync and async kinds only; validation
    refuses the others). ``state``: a recurrent policy's (``Agent.initial_state(1)``), which
    the simulators then carry from step to step and reset at episode starts.
    """
    sims = _Simulators(env_cfg, seed, plan, state)
    devices = _acting_devices(collector_cfg, learner_device)
    if collector_cfg.kind == "alternating":
        return _alternating(sims, collector_cfg, policy, devices)
    if collector_cfg.kind == "batched":
        return _batched(sims, collector_cfg, policy, devices, start_version)
    return _torchrl(sims, collector_cfg, policy, devices, compile_cfg)


@dataclass(frozen=True)
class _Simulators:
    """The simulators a collector steps: their section, the seed they start from, the threads."""

    env_cfg: EnvConfig
    seed: int
    plan: ThreadPlan
    state: TensorDictBase | None = None
    """A recurrent policy's state, carried by the simulators (None: feed-forward)."""

    def factory(self, first: int, **kwargs: Any) -> functools.partial[EnvBase]:
        """``env_factory`` (its keywords: ``in_worker``, ``num_envs``, ``sim_threads``) for
        simulators seeded from ``seed + first``."""
        return env_factory(self.env_cfg, self.seed + first, self.plan, state=self.state, **kwargs)


def _acting_devices(collector_cfg: CollectorConfig, learner_device: str) -> dict[str, str]:
    """``policy_device`` and ``storing_device``: the section's, or the learner's for auto."""

    def device(setting: str) -> str:
        return learner_device if setting == "auto" else resolve_device(setting)

    return dict(
        policy_device=device(collector_cfg.policy_device),
        storing_device=device(collector_cfg.storing_device),
    )


def _alternating(
    sims: _Simulators,
    collector_cfg: CollectorConfig,
    policy: torch.nn.Module,
    devices: dict[str, str],
) -> AlternatingCollector:
    """Two groups of half the simulators each, on half the simulator threads, in-process."""
    half = sims.env_cfg.num_envs // 2
    group_threads = max(1, sims.plan.sim_threads // 2)

    plain = replace(sims, state=None)  # the collector carries the state itself

    def make_group(g: int) -> EnvBase:
        group = plain.factory(g * half, in_worker=False, num_envs=half, sim_threads=group_threads)
        return group()

    return AlternatingCollector(
        make_group,
        policy,
        steps_per_batch=collector_cfg.steps_per_batch,
        state=sims.state,
        **devices,
    )


def _batched(
    sims: _Simulators,
    collector_cfg: CollectorConfig,
    policy: torch.nn.Module,
    devices: dict[str, str],
    start_version: int,
) -> BatchedInferenceCollector:
    """One simulator per slot (seeded ``seed + slot``, one C++ thread each), ``num_envs`` slots
    per worker process."""
    slots = rows_per_batch(sims.env_cfg, collector_cfg)
    one = dict(in_worker=True, num_envs=1, sim_threads=1)
    return BatchedInferenceCollector(
        [sims.factory(i, **one) for i in range(slots)],
        policy,
        steps_per_batch=collector_cfg.steps_per_batch,
        envs_per_worker=sims.env_cfg.num_envs,
        start_version=start_version,
        **devices,
    )


def _torchrl(
    sims: _Simulators,
    collector_cfg: CollectorConfig,
    policy: torch.nn.Module,
    devices: dict[str, str],
    compile_cfg: CompileConfig | None,
) -> Collector | MultiSyncCollector | MultiAsyncCollector:
    """TorchRL's ``Collector`` in-process (no workers), else ``num_workers`` processes of
    ``num_envs`` simulators each: ``MultiAsyncCollector`` (kind async) or ``MultiSyncCollector``."""
    options = dict(
        frames_per_batch=collector_cfg.steps_per_batch,  # TorchRL's name; it counts agent steps
        total_frames=-1,
        env_device=collector_cfg.env_device,
        **devices,
        **_compile_options(collector_cfg.kind, compile_cfg),
    )
    with warnings.catch_warnings():
        # Feed-forward policies need no InitTracker; TorchRL warns about it regardless.
        warnings.simplefilter("ignore", FutureWarning)
        if collector_cfg.num_workers == 0:
            # TorchRL's Collector with its rollout replaced where that is exact
            # (``LeanCollector``: TorchRL's rollout cost several times a plain loop's step).
            # It captures a network that acts directly (``DirectTensorDictModule``) as a CUDA
            # graph itself; other policies get TorchRL's graphs.
            graphs = "off" if compile_cfg is None else compile_cfg.cudagraphs
            own_graph = isinstance(policy, DirectTensorDictModule) and not (
                compile_cfg is not None and compile_cfg.policy
            )
            if own_graph:
                options.pop("cudagraph_policy", None)
            return LeanCollector(
                sims.factory(0, in_worker=False)(),
                policy,
                # Nothing here reads ("collector", "traj_ids") (the replay and the episode
                # log follow the done flags); tracking them is a few operations per step.
                # TorchRL's multi-process collectors have no such switch.
                track_traj_ids=False,
                acting_graph=graphs if own_graph else "off",
                compact_obs=collector_cfg.compact_obs,
                **options,
            )
        factories = [
            sims.factory(i * sims.env_cfg.num_envs, in_worker=True)
            for i in range(collector_cfg.num_workers)
        ]
        if collector_cfg.kind == "async":
            return MultiAsyncCollector(factories, policy, **options)
        return MultiSyncCollector(factories, policy, cat_results="stack", **options)


def _compile_options(kind: str, compile_cfg: CompileConfig | None) -> dict[str, Any]:
    """TorchRL's ``compile_policy`` / ``cudagraph_policy`` for ``--compile.policy`` /
    ``--compile.cudagraphs`` (none when both are off)."""
    graphs = compile_cfg is not None and compile_cfg.cudagraphs == "on"
    if compile_cfg is None or not (compile_cfg.policy or graphs):
        return {}
    if kind not in ("sync", "async"):
        raise ValueError(f"compiled policies need collector kind sync or async, not {kind}")
    return dict(compile_policy=compile_cfg.policy or None, cudagraph_policy=graphs or None)


def run_collector(
    env_cfg: EnvConfig,
    collector_cfg: CollectorConfig,
    compile_cfg: CompileConfig,
    policy: torch.nn.Module,
    proc: Any,
    updates: int,
    state: TensorDictBase | None = None,
) -> WatchedCollector:
    """``make_collector`` with a run's settings, watched (``WatchedCollector``): the recipe's
    config sections, the ``policy`` to act with, and its ``accelrl.process.Process`` (thread
    plan, learner device, simulator seeds, which are new after a resume at ``updates``), and
    a recurrent policy's ``state`` (``Agent.initial_state(1)``; None: feed-forward)."""
    collector = make_collector(
        env_cfg,
        collector_cfg,
        policy,
        seed=proc.collect_seed(updates),
        plan=proc.threads,
        learner_device=str(proc.device),
        start_version=updates,
        compile_cfg=compile_cfg,
        state=state,
    )
    return WatchedCollector(
        collector, stall_timeout_s=collector_cfg.stall_timeout_s, learner_policy=policy
    )
