"""What the plain Atari actor-critic loops share, feed-forward (``reference.atari_actor_critic``)
and recurrent (``reference.recurrent``): ``Rollout``'s T steps of every simulator and their GAE
advantages, PPO's minibatch loss and A2C's objective, from the network's logits and values."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from reference.atari import ActorCritic, VecAtari


class Rollout:
    """T steps of every simulator with the actor-critic; tensors on ``device``."""

    def __init__(self, env: VecAtari, model: ActorCritic, steps: int, device: torch.device):
        n, self.env, self.model, self.steps, self.device = env.num_envs, env, model, steps, device
        self.obs = torch.zeros((steps, *env.obs.shape), dtype=torch.uint8, device=device)
        self.actions = torch.zeros((steps, n), dtype=torch.int64, device=device)
        self.logp = torch.zeros((steps, n), device=device)
        self.values = torch.zeros((steps, n), device=device)
        self.rewards = torch.zeros((steps, n), device=device)
        self.terms = torch.zeros((steps, n), device=device)
        self.dones = torch.zeros((steps, n), device=device)
        self.trunc_values: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @torch.no_grad()
    def collect(self) -> torch.Tensor:
        """Fills the buffers; returns the value of the observation after the last step."""
        self.trunc_values.clear()
        for t in range(self.steps):
            obs = torch.from_numpy(self.env.obs).to(self.device)
            self.obs[t] = obs
            logits, value = self.model(obs)
            dist = torch.distributions.Categorical(logits=logits)
            action = dist.sample()
            self.actions[t], self.logp[t], self.values[t] = action, dist.log_prob(action), value
            reward, term, done, final, truncated = self.env.step(action.cpu().numpy())
            self.rewards[t] = torch.from_numpy(reward).to(self.device)
            self.terms[t] = torch.from_numpy(term).to(self.device)
            self.dones[t] = torch.from_numpy(done).to(self.device)
            if final is not None:  # truncated episodes bootstrap from their last frame
                rows = torch.from_numpy(np.flatnonzero(truncated)).to(self.device)
                self.trunc_values[t] = (
                    rows,
                    self.model(torch.from_numpy(final).to(self.device))[1],
                )
        return self.model(torch.from_numpy(self.env.obs).to(self.device))[1]

    def advantages(self, last_value: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
        adv = torch.zeros_like(self.rewards)
        running = torch.zeros_like(last_value)
        for t in reversed(range(self.steps)):
            next_value = last_value if t == self.steps - 1 else self.values[t + 1]
            if t in self.trunc_values:
                rows, v = self.trunc_values[t]
                next_value = next_value.clone()
                next_value[rows] = v
            delta = self.rewards[t] + gamma * next_value * (1 - self.terms[t]) - self.values[t]
            running = delta + gamma * lam * (1 - self.dones[t]) * running
            adv[t] = running
        return adv


def ppo_minibatch(
    logits: torch.Tensor,
    value: torch.Tensor,
    mb: tuple[torch.Tensor, ...],
    p: Any,
    clip: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's loss on one minibatch from the network's ``logits`` and ``value`` and ``mb`` =
    (actions, log-probs, advantages, returns, values) collected, any shape: clipped policy
    loss, (clipped) value loss, entropy bonus. Returns (loss, approximate KL, clip fraction)."""
    act, old_logp, a, ret, old_value = mb
    dist = torch.distributions.Categorical(logits=logits)
    log_ratio = dist.log_prob(act) - old_logp
    ratio = log_ratio.exp()
    if p.normalize_advantage:
        a = (a - a.mean()) / (a.std() + 1e-8)
    pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
    v_loss = (value - ret) ** 2
    if p.clip_value:
        v_clipped = old_value + (value - old_value).clamp(-clip, clip)
        v_loss = torch.max(v_loss, (v_clipped - ret) ** 2)
    v_loss = 0.5 * v_loss.mean()
    loss = pg - p.entropy_coef * dist.entropy().mean() + p.value_coef * v_loss
    with torch.no_grad():
        kl = ((ratio - 1) - log_ratio).mean()
        clipped = ((ratio - 1).abs() > clip).float().mean()
    return loss, kl, clipped


def a2c_objective(
    logits: torch.Tensor, value: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, a: Any
) -> torch.Tensor:
    """``a2c_loss`` from the network's ``logits`` and ``value`` (any shape)."""
    dist = torch.distributions.Categorical(logits=logits)
    adv = returns - value.detach()
    if a.normalize_advantage:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = -(dist.log_prob(actions) * adv).mean()
    loss = pg + a.value_coef * ((returns - value) ** 2).mean()
    return loss - a.entropy_coef * dist.entropy().mean()
