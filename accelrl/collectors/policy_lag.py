"""How stale asynchronous batches are: the policy-version stamp written next to every action,
the lag it measures, and the rule that drops batches acted by weights too far behind."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential

from accelrl.config import CollectorConfig
from accelrl.run.progress import Progress

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

    def __init__(
        self, collector_cfg: CollectorConfig, start_version: int, device: torch.device
    ) -> None:
        self.max_lag = collector_cfg.max_policy_lag
        async_kind = collector_cfg.kind == "async"
        self.stamp = VersionStamp(start_version).to(device) if async_kind else None
        self.metrics: dict[str, float] = {}

    def acting(self, policy: torch.nn.Module) -> torch.nn.Module:
        """The module collectors act with: ``policy``, stamped with its version (async)."""
        if self.stamp is None:
            return policy
        return TensorDictSequential(policy, self.stamp)

    def accept(self, batch: TensorDictBase, progress: Progress) -> bool:
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
