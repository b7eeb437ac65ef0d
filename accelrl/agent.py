"""The agent contract: what the run folder, evaluation, ``accelrl.tools.play`` and
``accelrl.tools.export`` need of a learner.

Every learner (``accelrl.algos``: ``PPO``, ``A2C``, ``DQN``; APPO is a ``PPO``) has:

- ``collect_policy``: what collectors act with (TensorDict in; ``action`` and whatever the
  update reads, e.g. ``action_log_prob`` and ``state_value``, out);
- ``eval_policy``: what evaluation episodes, videos and ``accelrl.tools.play`` act with; greedy
  under ``InteractionType.DETERMINISTIC``, sampled under ``RANDOM`` (the DQN family: eps-greedy at
  ``--dqn.eval-eps``);
- ``export_module()``: a plain ``nn.Module``, observation tensor in, greedy action out, sharing
  the agent's weights (``accelrl.tools.export`` traces it); a recurrent policy's takes and returns
  its state too, ``(obs, h, c) -> (action, h, c)``, zeroed by the caller at an episode's start;
- ``networks()``: every module whose parameters and buffers the checkpoint holds, in a fixed
  order (rank 0's weights are broadcast over them; checksums and the non-finite check read
  them);
- ``state_dict()`` / ``load_state_dict()``: what a checkpoint holds of it (weights, optimizer,
  exploration schedule);
- ``initial_state(num_envs)``: the recurrent state a policy starts each episode from, or
  ``None`` for a feed-forward policy.

A new algorithm is a learner with these members, registered with its config, checks and family
(``accelrl.algos.registry.Algorithm``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase


@runtime_checkable
class Agent(Protocol):
    """What every learner provides (see the module docstring)."""

    collect_policy: torch.nn.Module
    eval_policy: torch.nn.Module

    def export_module(self) -> torch.nn.Module: ...
    def networks(self) -> list[torch.nn.Module]: ...
    def initial_state(self, num_envs: int) -> TensorDictBase | None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


def unique_parameters(modules: list[torch.nn.Module]) -> list[torch.nn.Parameter]:
    """The parameters of ``modules``, each once, in order (modules share parameters)."""
    found: dict[int, torch.nn.Parameter] = {}
    for module in modules:
        for p in module.parameters():
            found.setdefault(id(p), p)
    return list(found.values())
