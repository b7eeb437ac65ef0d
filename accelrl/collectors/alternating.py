"""The paper's alternating sampler: two groups of simulators alternate with the policy, so
inference for one group overlaps the other group's steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from tensordict import TensorDictBase
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type


@torch.no_grad()
def _act(policy: torch.nn.Module, root: TensorDictBase, device: torch.device) -> TensorDictBase:
    out = policy(root.to(device))
    return out if out.device == root.device else out.to(root.device)


class AlternatingCollector:
    """The paper's alternating sampler: the simulators form two groups; while one group steps
    on its C++ threads, the policy computes the other group's actions, so inference and
    simulation overlap instead of running one after the other.

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
        steps_per_batch: int,
        policy_device: str,
        storing_device: str,
    ) -> None:
        self.groups = [make_group(0), make_group(1)]
        self.policy = policy
        rows = sum(g.batch_size[0] for g in self.groups)
        self.steps = steps_per_batch // rows
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
