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


def _set_next(root: TensorDictBase, nxt: TensorDictBase) -> None:
    """The env's step result under ``"next"``, next to what the policy wrote there (a
    recurrent policy's next state)."""
    if "next" in root.keys():
        root.get("next").update(nxt)
    else:
        root.set("next", nxt)


class AlternatingCollector:
    """The paper's alternating sampler: the simulators form two groups; while one group steps
    on its C++ threads, the policy computes the other group's actions, so inference and
    simulation overlap instead of running one after the other.

    Each group is a ``SameStepVectorEnv`` with a split step (``step_send`` / ``step_recv``);
    rows keep their simulator, so batches are ``[num_envs, T]`` like ``Collector``'s (group 0's
    rows first). The last step of each batch is not overlapped, so every step of a batch acts
    with the weights the learner had when the batch started (synchronous semantics).

    ``state``: a recurrent policy's (one simulator's entry of ``Agent.initial_state``). The
    split step bypasses TorchRL's env transforms, so the collector carries it itself, as
    ``accelrl.envs.with_state`` does for the other kinds: ``is_init`` True on each episode's
    first step (auto-resets included), the state zeros there and otherwise the ``("next",
    key)`` the policy wrote on the step before; ``("next", "is_init")`` False.
    """

    def __init__(
        self,
        make_group: Callable[[int], EnvBase],
        policy: torch.nn.Module,
        *,
        steps_per_batch: int,
        policy_device: str,
        storing_device: str,
        state: TensorDictBase | None = None,
    ) -> None:
        self.groups = [make_group(0), make_group(1)]
        self.policy = policy
        rows = sum(g.batch_size[0] for g in self.groups)
        self.steps = steps_per_batch // rows
        self.policy_device = torch.device(policy_device)
        self.storing_device = torch.device(storing_device)
        self.state = state
        self._roots = [self._carry(g.reset(), None) for g in self.groups]

    def _carry(self, root: TensorDictBase, acted: TensorDictBase | None) -> TensorDictBase:
        """``root`` (a group's next step, from a reset or an auto-reset) with a recurrent
        policy's ``is_init`` and state; ``acted``: the step before (None after ``reset``)."""
        if self.state is None:
            return root
        rows = root.batch_size[0]
        if acted is None:
            start = torch.ones(rows, 1, dtype=torch.bool, device=root.device)
        else:
            start = acted.get(("next", "done")).clone()
            acted.set(("next", "is_init"), torch.zeros_like(start))
        root.set("is_init", start)
        for key, zeros in self.state.items():
            carried = zeros.expand(rows, *zeros.shape[1:]).to(root.device)
            if acted is not None:
                carried = acted.get(("next", key)).masked_fill(
                    start.view(rows, *[1] * (zeros.ndim - 1)), 0
                )
            root.set(key, carried.clone())
        return root

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
            _set_next(roots[0], nxt)
            steps[0].append(roots[0])
            roots[0] = self._carry(new_root, steps[0][-1])
            if t + 1 < self.steps:
                roots[0] = _act(self.policy, roots[0], dev)  # ... the policy serves group 0
                groups[0].step_send(roots[0].get("action"))
            nxt, new_root = groups[1].step_recv()
            _set_next(roots[1], nxt)
            steps[1].append(roots[1])
            roots[1] = self._carry(new_root, steps[1][-1])
        batch = torch.cat([torch.stack(s, dim=-1) for s in steps], dim=0)
        return batch.to(self.storing_device)

    def update_policy_weights_(self) -> None:
        """Nothing to send: the policy lives in this process."""

    def shutdown(self) -> None:
        for g in self.groups:
            if not g.is_closed:
                g.close()
