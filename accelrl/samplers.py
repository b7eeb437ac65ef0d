"""Samplers beyond TorchRL's synchronous collectors: alternating groups, a batched inference
server, and the policy-version stamp that measures how stale asynchronous batches are.

All of them yield batches laid out like TorchRL's ``Collector`` (``[simulators, T]``, time last,
each row one simulator through time) and answer ``update_policy_weights_()`` and ``shutdown()``,
so recipes do not care which one runs. ``accelrl.collect.make_collector`` picks one from
``CollectorConfig.kind``.
"""

from __future__ import annotations

import copy
import functools
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torchrl.envs import EnvBase, TransformedEnv
from torchrl.envs.transforms import BatchSizeTransform
from torchrl.envs.utils import ExplorationType, set_exploration_type

log = logging.getLogger("accelrl")

VERSION_KEY = "policy_version"


class VersionStamp(TensorDictModuleBase):
    """Writes ``policy_version`` (the learner's update count when these weights were made) next
    to every action. The count is a buffer, so collectors ship it to their workers with the
    weights; the learner calls ``bump()`` after each update."""

    def __init__(self, start: int = 0) -> None:
        super().__init__()
        self.in_keys: list[str] = []
        self.out_keys = [VERSION_KEY]
        self.register_buffer("version", torch.tensor(int(start), dtype=torch.int64))

    def bump(self) -> None:
        self.version += 1

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(VERSION_KEY, self.version.expand(tensordict.batch_size).clone())
        return tensordict


def policy_lag(batch: TensorDictBase, version: int) -> tuple[int, float]:
    """(max, mean) updates between the weights that acted in ``batch`` and ``version``."""
    if VERSION_KEY not in batch.keys():
        return 0, 0.0
    acted = batch.get(VERSION_KEY)
    lag = version - acted
    return int(lag.max()), float(lag.float().mean())


class PolicyLag:
    """The policy-lag rule of asynchronous collection (``collector.kind`` async, batched).

    With kind async, ``acting(policy)`` appends a ``VersionStamp`` so every step records the
    learner's update count of the weights that took it (the batched server stamps its own).
    ``accept(batch, progress)`` measures how many updates behind the oldest step is, and refuses
    (and counts as dropped) a batch more than ``max_policy_lag`` behind; ``fresh(batch)`` drops
    the values collected with older weights, so the learner recomputes them with its current
    critic. With synchronous kinds every batch has lag 0 and passes unchanged.
    """

    def __init__(self, cfg: Any, start_version: int, device: torch.device) -> None:
        self.max_lag = cfg.max_policy_lag
        self.stamp = VersionStamp(start_version).to(device) if cfg.kind == "async" else None
        self.metrics: dict[str, float] = {}

    def acting(self, policy: torch.nn.Module) -> torch.nn.Module:
        """The module collectors act with: ``policy``, stamped with its version (async)."""
        if self.stamp is None:
            return policy
        return TensorDictSequential(policy, self.stamp)

    def accept(self, batch: TensorDictBase, progress: Any) -> bool:
        lag_max, lag_mean = policy_lag(batch, progress.updates)
        self.metrics = {"async/policy_lag_max": lag_max, "async/policy_lag_mean": lag_mean}
        if lag_max > self.max_lag:
            progress.dropped(batch)
            return False
        return True

    def fresh(self, batch: TensorDictBase) -> TensorDictBase:
        """``batch`` without what older weights computed (values, trunk features)."""
        if self.metrics.get("async/policy_lag_max", 0) > 0:
            return batch.exclude("state_value", "hidden")
        return batch

    def bump(self) -> None:
        """The learner's weights moved on by one update (call before sending them)."""
        if self.stamp is not None:
            self.stamp.bump()


@torch.no_grad()
def _act(policy: torch.nn.Module, root: TensorDictBase, device: torch.device) -> TensorDictBase:
    out = policy(root.to(device))
    return out if out.device == root.device else out.to(root.device)


class AlternatingCollector:
    """The paper's alternating sampler: the simulators form two groups; while one group steps
    on its C++ threads, the policy computes the other group's actions, so inference and
    simulation overlap instead of taking turns.

    Each group is a ``SameStepVectorEnv`` with a split step (``step_send`` / ``step_recv``);
    rows keep their simulator, so batches are ``[num_envs, T]`` like ``Collector``'s (group 0's
    rows first). The last step of each batch is not overlapped, so every step of a batch acts
    with the weights the learner had when the batch started (synchronous semantics).
    """

    def __init__(
        self,
        make_group: Callable[[int], EnvBase],
        policy: torch.nn.Module,
        *,
        frames_per_batch: int,
        policy_device: str,
        storing_device: str,
    ) -> None:
        self.groups = [make_group(0), make_group(1)]
        self.policy = policy
        rows = sum(g.batch_size[0] for g in self.groups)
        self.steps = frames_per_batch // rows
        self.policy_device = torch.device(policy_device)
        self.storing_device = torch.device(storing_device)
        self._roots = [g.reset() for g in self.groups]

    def __iter__(self) -> Iterator[TensorDictBase]:
        with set_exploration_type(ExplorationType.RANDOM):
            while True:
                yield self._batch()

    def _batch(self) -> TensorDictBase:
        groups, roots, dev = self.groups, self._roots, self.policy_device
        steps: list[list[TensorDictBase]] = [[], []]
        roots[0] = _act(self.policy, roots[0], dev)
        groups[0].step_send(roots[0].get("action"))
        for t in range(self.steps):
            roots[1] = _act(self.policy, roots[1], dev)
            groups[1].step_send(roots[1].get("action"))  # group 1 steps while ...
            nxt, new_root = groups[0].step_recv()
            roots[0].set("next", nxt)
            steps[0].append(roots[0])
            roots[0] = new_root
            if t + 1 < self.steps:
                roots[0] = _act(self.policy, roots[0], dev)  # ... the policy serves group 0
                groups[0].step_send(roots[0].get("action"))
            nxt, new_root = groups[1].step_recv()
            roots[1].set("next", nxt)
            steps[1].append(roots[1])
            roots[1] = new_root
        batch = torch.cat([torch.stack(s, dim=-1) for s in steps], dim=0)
        return batch.to(self.storing_device)

    def update_policy_weights_(self) -> None:
        """Nothing to send: the policy lives in this process."""

    def shutdown(self) -> None:
        for g in self.groups:
            if not g.is_closed:
                g.close()


def _squeeze_rows(td: TensorDictBase) -> TensorDictBase:
    return td.squeeze(0)


def single_simulator(make_env: Callable[[], EnvBase]) -> EnvBase:
    """A one-simulator batched env seen with batch ``[]``, as ``AsyncEnvPool`` slots need."""
    return TransformedEnv(make_env(), BatchSizeTransform(reshape_fn=_squeeze_rows))


class BatchedInferenceCollector:
    """One inference server in the learner process batches the action requests of every
    simulator (TorchRL's ``AsyncBatchedCollector``): simulators live one per slot in
    ``num_workers`` processes and never wait for a whole batch of simulators to finish a step.

    TorchRL yields transitions in arrival order; this class regroups them per simulator and
    yields ``[simulators, T]`` batches once every simulator has ``T`` new steps. A simulator
    that runs more than ``4 T`` steps ahead of the slowest loses its oldest queued steps
    (counted in ``dropped``; ``stream_break`` tells replay buffers its row's stream has a gap).
    Batches carry ``policy_version``: the server's version, bumped at each weight update.
    """

    def __init__(
        self,
        env_fns: list[Callable[[], EnvBase]],
        policy: torch.nn.Module,
        *,
        frames_per_batch: int,
        envs_per_worker: int,
        policy_device: str,
        storing_device: str,
        start_version: int,
    ) -> None:
        from torchrl.collectors import AsyncBatchedCollector
        from torchrl.modules.inference_server import InferenceDeviceConfig

        self.num_slots = len(env_fns)
        self.steps = frames_per_batch // self.num_slots
        self.policy = policy
        self.dropped = 0
        self.stream_break = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            self._inner = AsyncBatchedCollector(
                [functools.partial(single_simulator, fn) for fn in env_fns],
                # The server acts with its own copy: the learner's optimizer must not change
                # weights under a forward pass; copies happen under the server's model lock.
                policy=copy.deepcopy(policy),
                frames_per_batch=frames_per_batch,
                total_frames=-1,
                env_backend="multiprocessing",
                envs_per_worker=envs_per_worker,
                max_batch_size=self.num_slots,
                device_config=InferenceDeviceConfig(
                    policy_device=policy_device,
                    output_device="cpu",
                    env_device="cpu",
                    storing_device=storing_device,
                ),
                policy_version=start_version,
                transport="driver",
            )
        self._queues: list[list[TensorDictBase]] = [[] for _ in range(self.num_slots)]
        self._queued = torch.zeros(self.num_slots, dtype=torch.int64)

    def __iter__(self) -> Iterator[TensorDictBase]:
        for chunk in self._inner:
            self._enqueue(chunk)
            while bool((self._queued >= self.steps).all()):
                yield self._emit()

    def _enqueue(self, chunk: TensorDictBase) -> None:
        chunk = chunk.to_tensordict() if not isinstance(chunk, TensorDict) else chunk
        slot = chunk.get("env_index").reshape(-1)
        chunk = chunk.exclude("env_index", "collector")
        for s in slot.unique().tolist():
            part = chunk[slot == s]
            self._queues[s].append(part)
            self._queued[s] += part.shape[0]

    def _emit(self) -> TensorDictBase:
        rows = []
        self.stream_break = False
        for s, queue in enumerate(self._queues):
            stream = torch.cat(queue, dim=0) if len(queue) > 1 else queue[0]
            rows.append(stream[: self.steps])
            rest = stream[self.steps :]
            # (A TensorDict's numel() is 1 for an empty batch: count rows with shape[0].)
            if rest.shape[0] > 4 * self.steps:
                self.dropped += rest.shape[0] - 4 * self.steps
                rest = rest[-4 * self.steps :]
                self.stream_break = True
            self._queues[s] = [rest] if rest.shape[0] else []
            self._queued[s] = rest.shape[0]
        return torch.stack(rows, dim=0)

    def update_policy_weights_(self) -> None:
        """Copy the learner's weights into the server's model between two forward passes; the
        server bumps its policy version."""
        # TorchRL snapshots the weights (a clone), then copies them in under the server's lock.
        self._inner.update_policy_weights_(TensorDict.from_module(self.policy).data)

    @property
    def procs(self) -> list[Any]:
        """Worker processes for ``accelrl.collect.WatchedCollector`` to watch: none.
        ``AsyncBatchedCollector`` lists no processes publicly; its env pool checks the liveness
        of its own workers and raises when one dies."""
        return []

    def pause(self, timeout: float | None = 30.0) -> AbstractContextManager[None]:
        """Context in which the server and simulators stay idle (``AsyncBatchedCollector.pause``);
        steps finished before it are yielded after."""
        return self._inner.pause(timeout=timeout)

    def shutdown(self, timeout: float | None = None, raise_on_error: bool = True) -> None:
        """Stop the server, coordinator threads and simulator processes (TorchRL's default
        ``timeout`` is 5 s)."""
        self._inner.shutdown(timeout=timeout, raise_on_error=raise_on_error)
