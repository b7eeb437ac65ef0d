"""The batched inference server: one server in the learner process batches the action
requests of every simulator (TorchRL's ``AsyncBatchedCollector``), regrouped here into
``[simulators, T]`` batches."""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import EnvBase, TransformedEnv
from torchrl.envs.transforms import BatchSizeTransform


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
        steps_per_batch: int,
        envs_per_worker: int,
        policy_device: str,
        storing_device: str,
        start_version: int,
    ) -> None:
        from torchrl.collectors import AsyncBatchedCollector
        from torchrl.modules.inference_server import InferenceDeviceConfig

        self.num_slots = len(env_fns)
        self.steps = steps_per_batch // self.num_slots
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
                frames_per_batch=steps_per_batch,  # TorchRL's name; it counts agent steps
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
        """Worker processes for ``accelrl.collectors.WatchedCollector`` to watch: none.
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
