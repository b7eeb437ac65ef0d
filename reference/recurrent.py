"""A plain LSTM actor-critic and its PPO phase over whole sequences: the oracle of the recurrent
parity test (``tests/test_recurrent.py``), written as a single-file implementation would be
(CleanRL's PPO-LSTM): one ``nn.Module``, torch tensors, no TensorDict, no TorchRL.

The network: a Tanh MLP trunk on vector observations (a CNN on frames would sit in the same
place), one ``nn.LSTM`` layer (``nn.GRU`` in ``GRUActorCritic``), a policy and a value head on
its output. Episodes start from a
zero state: ``unroll`` multiplies the state by ``1 - start`` before each step whose ``start`` is
set (the first step of an episode), one step at a time. The PPO phase keeps each simulator's
sequence whole and in time order: its minibatches are sets of simulators, each unrolled from
the state it had at the start of the batch. A2C's loss runs on all simulators' sequences at
once (``a2c_sequence_loss``).

On Atari frames (``AtariLSTMActorCritic``: the Nature CNN trunk of ``reference.atari``) the
same pieces make the plain PPO and A2C LSTM loops, ``plain_ppo_lstm`` and ``plain_a2c_lstm``
(what ``plain_ppo`` and ``plain_a2c`` run for a config with ``--model.recurrent lstm``):
``RecurrentRollout`` steps the simulators one step at a time, zeroing each simulator's state
at its episodes' first steps (a lost life carries it on, as the recipes do), keeps the state
from one batch to the next and stores each batch's first state for the updates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from reference.actor_critic_parts import Rollout, a2c_objective, ppo_minibatch
from reference.atari import BatchLog, Checkpoint, Record, VecAtari, nature_convs, nature_features
from reference.atari import setup as setup_loop
from reference.common import RMSpropTF, anneal_lr, clipped_step, orth, require

if TYPE_CHECKING:  # the recipes' config dataclasses, for annotations only
    from recipes.a2c_atari import Config as A2CRecipeConfig
    from recipes.ppo_atari import Config as PPORecipeConfig

State = tuple[torch.Tensor, ...]
"""A recurrent network's state: its RNN's tensors (the LSTM's h and c), each ``[1, B, hidden]``."""


def orthogonal_rnn(rnn: nn.RNNBase) -> nn.RNNBase:
    """``rnn`` with orthogonal weights (gain 1) and zero biases, as the recipes initialize it."""
    for name, param in rnn.named_parameters():
        if name.startswith("weight"):
            nn.init.orthogonal_(param, 1.0)
        else:
            nn.init.zeros_(param)
    return rnn


class LSTMActorCritic(nn.Module):
    """MLP trunk -> LSTM -> policy and value heads (the recipes' parameter order)."""

    def __init__(self, obs_size: int, num_actions: int, hidden=(64, 64), lstm_hidden=128):
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [orth(nn.Linear(obs_size, width), math.sqrt(2)), nn.Tanh()]
            obs_size = width
        self.build(nn.Sequential(*layers), obs_size, num_actions, lstm_hidden)

    def build(self, trunk: nn.Module, features: int, num_actions: int, lstm_hidden: int) -> None:
        """Trunk (``features`` outputs), LSTM and heads, in this order (the recipes')."""
        self.trunk = trunk
        self.lstm = orthogonal_rnn(nn.LSTM(features, lstm_hidden))
        self.add_heads(lstm_hidden, num_actions)

    def add_heads(self, lstm_hidden: int, num_actions: int) -> None:
        """The policy and value heads over the RNN's ``lstm_hidden`` outputs (after the RNN)."""
        self.policy = orth(nn.Linear(lstm_hidden, num_actions), 0.01)
        self.value = orth(nn.Linear(lstm_hidden, 1), 1.0)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The trunk's output ``[T, B, features]`` for observations ``[T, B, ...]``."""
        return self.trunk(obs)

    def unroll(
        self,
        obs: torch.Tensor,
        state: State,
        starts: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, State]:
        """``obs`` ``[T, B, obs_size]`` from ``state`` (h, c of ``[1, B, lstm_hidden]``),
        zeroing the state before every step where ``starts`` ``[T, B]`` is 1. Returns logits
        ``[T, B, actions]``, values ``[T, B]`` and the state after the last step."""
        features = self.features(obs)
        h, c = state
        out = []
        for t in range(obs.shape[0]):
            keep = (1.0 - starts[t]).view(1, -1, 1)
            y, (h, c) = self.lstm(features[t : t + 1], (h * keep, c * keep))
            out.append(y)
        y = torch.cat(out)
        return self.policy(y), self.value(y).squeeze(-1), (h, c)


class GRUActorCritic(LSTMActorCritic):
    """MLP trunk -> GRU -> policy and value heads (the recipes' ``--model.recurrent gru``, in
    their parameter order); its state is ``(h,)``, reset and unrolled as the LSTM's."""

    def build(self, trunk: nn.Module, features: int, num_actions: int, lstm_hidden: int) -> None:
        self.trunk = trunk
        self.gru = orthogonal_rnn(nn.GRU(features, lstm_hidden))
        self.add_heads(lstm_hidden, num_actions)

    def unroll(
        self, obs: torch.Tensor, state: State, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, State]:
        """As ``LSTMActorCritic.unroll``, with ``state`` = (h,)."""
        features = self.features(obs)
        (h,) = state
        out = []
        for t in range(obs.shape[0]):
            keep = (1.0 - starts[t]).view(1, -1, 1)
            y, h = self.gru(features[t : t + 1], h * keep)
            out.append(y)
        y = torch.cat(out)
        return self.policy(y), self.value(y).squeeze(-1), (h,)


def ppo_sequence_phase(
    model: LSTMActorCritic,
    opt: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, ...],
    state: State,
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
    stats = torch.zeros(3, dtype=collected[2].dtype, device=collected[2].device)
    for _ in range(p.epochs):
        order = torch.randperm(envs)
        for i in range(0, envs, size):
            idx = order[i : i + size]
            mb_state = tuple(x[:, idx] for x in state)
            logits, value, _ = model.unroll(obs[:, idx], mb_state, starts[:, idx])
            mb = tuple(x[:, idx] for x in collected)
            loss, kl, clipped = ppo_minibatch(logits, value, mb, p, clip)
            grad_norm = clipped_step(opt, loss, model.parameters(), p.max_grad_norm)
            stats += torch.stack([kl, clipped, grad_norm.detach()])
    return stats


def a2c_sequence_loss(
    model: LSTMActorCritic,
    batch: tuple[torch.Tensor, ...],
    state: State,
    a: Any,
) -> torch.Tensor:
    """A2C's loss on ``batch`` = (obs, starts, actions, returns), each ``[T, B, ...]``, every
    sequence unrolled whole from the batch-start ``state``. ``a``: the recipe's ``cfg.a2c``."""
    obs, starts, actions, returns = batch
    logits, value, _ = model.unroll(obs, state, starts)
    return a2c_objective(logits, value, actions, returns, a)


# --- Atari ------------------------------------------------------------------------------------


class AtariLSTMActorCritic(LSTMActorCritic):
    """Nature CNN (``reference.atari.ActorCritic``'s trunk: three convolutions and 512 units) ->
    LSTM -> heads, on uint8 frames scaled by 1/255."""

    def __init__(
        self, num_actions: int, frame_stack: int = 4, screen_size: int = 84, lstm_hidden=128
    ) -> None:
        nn.Module.__init__(self)
        fc = orth(nn.Linear(nature_features(screen_size), 512))
        trunk = nn.Sequential(nature_convs(frame_stack), fc, nn.ReLU())
        self.build(trunk, 512, num_actions, lstm_hidden)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        frames = obs.reshape(-1, *obs.shape[2:]).to(self.policy.weight.dtype) / 255.0
        return self.trunk(frames).reshape(*obs.shape[:2], -1)


class RecurrentRollout(Rollout):
    """``Rollout`` with an LSTM: one step of every simulator at a time from the carried state,
    zeroed at each episode's first step (``starts``: the first reset and the step after a game
    over or a truncation; a lost life carries it on). ``first_state`` is the state the batch
    started from, the state after the batch's last step goes on to the next batch."""

    def __init__(
        self, env: VecAtari, model: AtariLSTMActorCritic, steps: int, device: torch.device
    ) -> None:
        super().__init__(env, model, steps, device)
        n = env.num_envs
        self.starts = torch.zeros((steps, n), device=device)
        zeros = torch.zeros((1, n, model.lstm.hidden_size), device=device)
        self.state: State = (zeros, zeros.clone())
        self.first_state: State = self.state
        self.start = torch.ones(n, device=device)  # the first reset starts every episode

    @torch.no_grad()
    def collect(self) -> torch.Tensor:
        """Fills the buffers; returns the value of the observation after the last step."""
        self.trunc_values.clear()
        self.first_state = state = self.state
        for t in range(self.steps):
            obs = torch.from_numpy(self.env.obs).to(self.device)
            self.obs[t], self.starts[t] = obs, self.start
            logits, value, state = self.model.unroll(obs[None], state, self.start[None])
            dist = torch.distributions.Categorical(logits=logits[0])
            action = dist.sample()
            self.actions[t], self.logp[t], self.values[t] = action, dist.log_prob(action), value[0]
            reward, term, done, final, truncated = self.env.step(action.cpu().numpy())
            self.rewards[t] = torch.from_numpy(reward).to(self.device)
            self.terms[t] = torch.from_numpy(term).to(self.device)
            self.dones[t] = torch.from_numpy(done).to(self.device)
            self.start = torch.from_numpy(self.env.ended).to(self.device, torch.float32)
            if final is not None:  # truncated episodes bootstrap from their last frame
                rows = torch.from_numpy(np.flatnonzero(truncated)).to(self.device)
                last = tuple(x[:, rows] for x in state)
                frames = torch.from_numpy(final).to(self.device)[None]
                v = self.model.unroll(frames, last, self.start[None, rows] * 0)[1][0]
                self.trunc_values[t] = (rows, v)
        self.state = state
        obs = torch.from_numpy(self.env.obs).to(self.device)[None]
        # After a game over the next observation's value is not used (terminated); otherwise
        # it goes on from the state reached.
        return self.model.unroll(obs, state, torch.zeros_like(self.start)[None])[1][0]


def lstm_setup(
    cfg: Any,
    section: str,
    iterations: int | None,
    *,
    device: str = "cpu",
    threads: int = 1,
    checkpoint: Checkpoint | None = None,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
) -> tuple[VecAtari, torch.device, int, int, range, AtariLSTMActorCritic]:
    """``reference.atari.setup`` and the LSTM actor-critic of ``cfg.model.lstm_hidden`` units,
    for ``plain_ppo``'s and ``plain_a2c``'s keywords (``on_iteration`` is ``BatchLog``'s)."""
    require("model", cfg.model, recurrent="lstm")
    require(section, getattr(cfg, section), life_loss_boundary=True)
    env, dev, steps, frames, batches = setup_loop(cfg, iterations, checkpoint, threads, device)
    model = AtariLSTMActorCritic(env.num_actions, cfg.env.frame_stack, cfg.env.screen_size,
                                 cfg.model.lstm_hidden).to(dev)  # fmt: skip
    return env, dev, steps, frames, batches, model


def plain_ppo_lstm(
    cfg: PPORecipeConfig,
    iterations: int | None = None,
    **loop: Any,
) -> list[Record]:
    """PPO with an LSTM and ``cfg``'s settings (``cfg.ppo``, ``cfg.model.lstm_hidden``): the
    feed-forward loop's batch (GAE with lost lives as boundaries, annealing), learnt by
    ``ppo_sequence_phase`` (minibatches of whole simulators' sequences). ``loop``: ``plain_ppo``'s
    keywords (device, threads, on_iteration, checkpoint)."""
    p = cfg.ppo
    env, dev, steps, frames, batches, model = lstm_setup(cfg, "ppo", iterations, **loop)
    if env.num_envs % p.minibatches:
        raise ValueError(f"ppo.minibatches={p.minibatches} must divide the {env.num_envs} "
                         "simulators: a minibatch is a set of whole sequences")  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=p.lr, eps=p.adam_eps)
    # restores a resumed checkpoint
    log = BatchLog(env, model, opt, loop.get("on_iteration"), loop.get("checkpoint"))
    rollout = RecurrentRollout(env, model, steps, dev)
    try:
        for _ in batches:
            remaining = anneal_lr(opt, p, frames / cfg.total_frames)
            clip = max(p.clip_epsilon * (remaining if p.anneal_clip else 1.0), 1e-8)
            adv = rollout.advantages(rollout.collect(), p.gamma, p.gae_lambda)
            batch = (rollout.obs, rollout.starts, rollout.actions, rollout.logp, adv,
                     adv + rollout.values, rollout.values)  # fmt: skip
            # The metrics reach the host once per update, as the recipe's.
            ppo_sequence_phase(model, opt, batch, rollout.first_state, p, clip).tolist()
            frames += env.num_envs * steps * cfg.env.frameskip
            log.done(frames)
    finally:
        env.close()
    return log.records


def plain_a2c_lstm(
    cfg: A2CRecipeConfig,
    iterations: int | None = None,
    **loop: Any,
) -> list[Record]:
    """A2C with an LSTM and ``cfg``'s settings (``cfg.a2c``, ``cfg.model.lstm_hidden``): one
    step of ``a2c_sequence_loss`` on all simulators' sequences per batch. ``loop``: as
    ``plain_ppo_lstm``'s."""
    a = cfg.a2c
    env, dev, steps, frames, batches, model = lstm_setup(cfg, "a2c", iterations, **loop)
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=a.eps)
    else:
        opt = RMSpropTF(model.parameters(), lr=a.lr, alpha=a.rms_alpha, eps=a.eps)
    log = BatchLog(env, model, opt, loop.get("on_iteration"), loop.get("checkpoint"))
    rollout = RecurrentRollout(env, model, steps, dev)
    try:
        for _ in batches:
            anneal_lr(opt, a, frames / cfg.total_frames)
            adv = rollout.advantages(rollout.collect(), a.gamma, a.gae_lambda)
            batch = (rollout.obs, rollout.starts, rollout.actions, adv + rollout.values)
            loss = a2c_sequence_loss(model, batch, rollout.first_state, a)
            grad_norm = clipped_step(opt, loss, model.parameters(), a.max_grad_norm)
            float(loss.detach()), float(grad_norm)  # logged per update by the recipe too
            frames += env.num_envs * steps * cfg.env.frameskip
            log.done(frames)
    finally:
        env.close()
    return log.records
