"""A plain LSTM actor-critic and its PPO phase over whole sequences: the oracle of the recurrent
parity test (``tests/test_recurrent.py``), written as a single-file implementation would be
(CleanRL's PPO-LSTM): one ``nn.Module``, torch tensors, no TensorDict, no TorchRL.

The network: a Tanh MLP trunk on vector observations (a CNN on frames would sit in the same
place), one ``nn.LSTM`` layer, a policy and a value head on its output. Episodes start from a
zero state: ``unroll`` multiplies the state by ``1 - start`` before each step whose ``start`` is
set (the first step of an episode), one step at a time. The PPO phase keeps each simulator's
sequence whole and in time order: its minibatches are sets of simulators, each unrolled from
the state it had at the start of the batch. A2C's loss runs on all simulators' sequences at
once (``a2c_sequence_loss``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from reference.atari_actor_critic import a2c_objective, ppo_minibatch
from reference.common import clipped_step, orth


class LSTMActorCritic(nn.Module):
    """MLP trunk -> LSTM -> policy and value heads (the recipes' parameter order)."""

    def __init__(self, obs_size: int, num_actions: int, hidden=(64, 64), lstm_hidden=128):
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [orth(nn.Linear(obs_size, width), math.sqrt(2)), nn.Tanh()]
            obs_size = width
        self.trunk = nn.Sequential(*layers)
        self.lstm = nn.LSTM(obs_size, lstm_hidden)
        for name, param in self.lstm.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)
        self.policy = orth(nn.Linear(lstm_hidden, num_actions), 0.01)
        self.value = orth(nn.Linear(lstm_hidden, 1), 1.0)

    def unroll(
        self,
        obs: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
        starts: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``obs`` ``[T, B, obs_size]`` from ``state`` (h, c of ``[1, B, lstm_hidden]``),
        zeroing the state before every step where ``starts`` ``[T, B]`` is 1. Returns logits
        ``[T, B, actions]``, values ``[T, B]`` and the state after the last step."""
        features = self.trunk(obs)
        h, c = state
        out = []
        for t in range(obs.shape[0]):
            keep = (1.0 - starts[t]).view(1, -1, 1)
            y, (h, c) = self.lstm(features[t : t + 1], (h * keep, c * keep))
            out.append(y)
        y = torch.cat(out)
        return self.policy(y), self.value(y).squeeze(-1), (h, c)


def ppo_sequence_phase(
    model: LSTMActorCritic,
    opt: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, ...],
    state: tuple[torch.Tensor, torch.Tensor],
    p: Any,
    clip: float,
) -> torch.Tensor:
    """PPO's epochs x minibatches on ``batch`` = (obs, starts, actions, log-probs, advantages,
    returns, values), each ``[T, B, ...]`` time first, from the batch-start ``state``: each
    minibatch is ``B / p.minibatches`` simulators (``torch.randperm(B)`` each epoch), unrolled
    over all ``T`` steps. Returns the summed (approximate KL, clip fraction, grad norm)."""
    obs, starts, *collected = batch
    envs = obs.shape[1]
    size = envs // p.minibatches
    stats = torch.zeros(3, dtype=obs.dtype)
    for _ in range(p.epochs):
        order = torch.randperm(envs)
        for i in range(0, envs, size):
            idx = order[i : i + size]
            mb_state = (state[0][:, idx], state[1][:, idx])
            logits, value, _ = model.unroll(obs[:, idx], mb_state, starts[:, idx])
            mb = tuple(x[:, idx] for x in collected)
            loss, kl, clipped = ppo_minibatch(logits, value, mb, p, clip)
            grad_norm = clipped_step(opt, loss, model.parameters(), p.max_grad_norm)
            stats += torch.stack([kl, clipped, grad_norm.detach()])
    return stats


def a2c_sequence_loss(
    model: LSTMActorCritic,
    batch: tuple[torch.Tensor, ...],
    state: tuple[torch.Tensor, torch.Tensor],
    a: Any,
) -> torch.Tensor:
    """A2C's loss on ``batch`` = (obs, starts, actions, returns), each ``[T, B, ...]``, every
    sequence unrolled whole from the batch-start ``state``. ``a``: the recipe's ``cfg.a2c``."""
    obs, starts, actions, returns = batch
    logits, value, _ = model.unroll(obs, state, starts)
    return a2c_objective(logits, value, actions, returns, a)
