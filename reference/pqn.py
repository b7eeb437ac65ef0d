"""A plain single-file PQN loop for CartPole-v1 (Gallici et al. 2025): the learning reference
for ``recipes/pqn_atari.py``.

Written the way a single-file implementation (CleanRL's ``pqn.py``) would be: a gymnasium
vector env (SameStep autoreset, the final observation of an ended episode in
``info["final_obs"]``), numpy arrays, torch modules; no TorchRL, no TensorDict, nothing of
accelrl but the recipe's ``Config`` it reads its settings from (``cfg.env``,
``cfg.collector.steps_per_batch``, ``cfg.model.mlp_hidden``, ``cfg.pqn``, ``cfg.total_frames``:
an agent step outside Atari, ``cfg.seed``, ``cfg.log.eval_episodes``).

Per batch: every simulator takes ``T`` epsilon-greedy steps (epsilon set once per batch from
the part of the budget collected, as the recipe does); Q(lambda) targets over the rollout; then
epochs x minibatches of MSE steps with RAdam, the learning rate annealed to 0. Rollouts are
stored simulator-major, ``[envs, T]``, as the recipe's batches, so the same ``torch.randperm``
picks the same steps for a minibatch in both. A terminated step does not bootstrap; a truncated
one (CartPole's 500-step limit) bootstraps from its final observation; neither carries the
lambda trace across the episode's end.

    python -m reference cartpole pqn --seed 0
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from reference.classic import Episodes, greedy_eval, result, start, step_env
from reference.common import batch_layout

if TYPE_CHECKING:  # the recipe's config dataclasses, for annotations only
    from accelrl.algos.pqn import PQNConfig
    from recipes.pqn_atari import Config as PQNRecipeConfig


class LayerNormQNet(nn.Module):
    """Linear, LayerNorm, ReLU per hidden width (PyTorch's default init), a linear head: Q [B, A].
    Parameters in the order of the recipe's ``QNetwork(..., layer_norm=True)``."""

    def __init__(
        self, obs_dim: int, num_actions: int, hidden: Sequence[int], layer_norm: bool = True
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [nn.Linear(obs_dim, width)]
            layers += [nn.LayerNorm(width)] if layer_norm else []
            layers += [nn.ReLU()]
            obs_dim = width
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Linear(obs_dim, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(obs))


def epsilon_at(s: PQNConfig, done: float) -> float:
    """Epsilon after the part ``done`` of the budget: linear over eps_decay_fraction."""
    return s.eps_start + min(done / s.eps_decay_fraction, 1.0) * (s.eps_end - s.eps_start)


def q_lambda(
    reward: torch.Tensor,
    next_q: torch.Tensor,
    terminated: torch.Tensor,
    ended: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Q(lambda) targets [envs, T] from max_a Q(s'_t, a) ``next_q`` (s'_t: the final observation
    where the episode ended): G_t = r_t + gamma (1 - term_t) (V'_t + lam (G_{t+1} - V'_t)) while
    the episode goes on past t, r_t + gamma (1 - term_t) V'_t at its end and at the last step."""
    steps = reward.shape[1]
    bootstrap = next_q * (1 - terminated)
    returns = torch.zeros_like(reward)
    returns[:, -1] = reward[:, -1] + gamma * bootstrap[:, -1]
    for t in reversed(range(steps - 1)):
        carried = lam * returns[:, t + 1] + (1 - lam) * bootstrap[:, t]
        onward = torch.where(ended[:, t].bool(), bootstrap[:, t], carried)
        returns[:, t] = reward[:, t] + gamma * onward
    return returns


def pqn_update(
    net: nn.Module,
    opt: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    s: PQNConfig,
    lr: float,
) -> dict[str, float]:
    """One PQN phase on ``batch`` ([envs, T] tensors: obs, action, reward, next_obs,
    terminated, ended) at learning rate ``lr``: targets, then epochs x minibatches of MSE steps
    in ``torch.randperm`` order. Returns the mean loss and gradient norm."""
    for group in opt.param_groups:
        group["lr"] = lr
    with torch.no_grad():
        next_q = net(batch["next_obs"]).max(-1).values
        target = q_lambda(
            batch["reward"], next_q, batch["terminated"], batch["ended"], s.gamma, s.q_lambda
        )
    obs = batch["obs"].reshape(-1, batch["obs"].shape[-1])
    action, target = batch["action"].reshape(-1), target.reshape(-1)
    n = target.numel()
    size = n // s.minibatches
    losses, norms = [], []
    for _ in range(s.epochs):
        order = torch.randperm(n)
        for lo in range(0, n, size):
            mb = order[lo : lo + size]
            q = net(obs[mb]).gather(-1, action[mb].unsqueeze(-1)).squeeze(-1)
            loss = F.mse_loss(q, target[mb])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norms.append(float(nn.utils.clip_grad_norm_(net.parameters(), s.max_grad_norm)))
            opt.step()
            losses.append(float(loss.detach()))
    return {"loss": float(np.mean(losses)), "grad_norm": float(np.mean(norms))}


def plain_pqn(cfg: PQNRecipeConfig) -> dict:
    """PQN with ``cfg``'s settings (``cfg.pqn``) on ``cfg.env.game`` (a vector observation):
    a LayerNorm MLP of ``cfg.model.mlp_hidden``."""
    s, total_steps = cfg.pqn, cfg.total_frames
    started = time.perf_counter()
    env, obs_dim, num_actions = start(cfg)
    envs, steps = batch_layout(cfg)
    net = LayerNormQNet(obs_dim, num_actions, cfg.model.mlp_hidden)
    opt = torch.optim.RAdam(net.parameters(), lr=s.lr, eps=s.eps)
    episodes = Episodes(envs)
    obs_now, _ = env.reset(seed=cfg.seed)
    collected, epsilon = 0, s.eps_start
    try:
        while collected < total_steps:
            obs = np.zeros((envs, steps, obs_dim), np.float32)
            next_obs = np.zeros_like(obs)
            action = np.zeros((envs, steps), np.int64)
            reward = np.zeros((envs, steps), np.float32)
            terminated, ended = np.zeros((envs, steps), bool), np.zeros((envs, steps), bool)
            for t in range(steps):
                with torch.no_grad():
                    greedy = net(torch.from_numpy(obs_now)).argmax(-1).numpy()
                explore = np.random.random(envs) < epsilon
                a = np.where(explore, np.random.randint(num_actions, size=envs), greedy)
                obs[:, t], action[:, t] = obs_now, a
                obs_now, reward[:, t], terminated[:, t], ended[:, t], next_obs[:, t] = step_env(
                    env, a
                )
                collected += envs
                episodes.record(reward[:, t], ended[:, t], collected)
            done = collected / total_steps
            lr = s.lr * (max(0.0, 1.0 - done) if s.anneal_lr else 1.0)
            batch = {
                "obs": torch.from_numpy(obs),
                "action": torch.from_numpy(action),
                "reward": torch.from_numpy(reward),
                "next_obs": torch.from_numpy(next_obs),
                "terminated": torch.from_numpy(terminated).float(),
                "ended": torch.from_numpy(ended).float(),
            }
            pqn_update(net, opt, batch, s, lr)
            epsilon = epsilon_at(s, done)
    finally:
        env.close()
    greedy_return = greedy_eval(
        lambda o: net(o).argmax(-1), cfg.log.eval_episodes, cfg.seed, cfg.env.game
    )
    return result(episodes, greedy_return, started)
