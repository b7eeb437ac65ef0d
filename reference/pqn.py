"""Plain single-file PQN loops (Gallici et al. 2025), for CartPole-v1 (``plain_pqn``) and for
Atari (``plain_pqn_atari``, on ``reference.atari``'s simulators): the learning references for
``recipes/pqn_atari.py``.

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
    python -m benchmarks.learning atari pqn --impl plain --game Breakout --run-dir DIR

The Atari loop takes the recipe's Atari ``Config`` as ``reference.atari``'s loops do (the
simulators of ``cfg.env``, 32 simulators x 32 steps by default) and a LayerNorm Nature CNN
(``LayerNormNatureQ``); a lost life ends the lambda trace and the bootstrap, as the recipe's
``life_loss_boundary``; exploration draws from torch's generator, so a checkpoint (model,
RAdam, frames, torch's RNG) resumes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from reference.atari import BatchLog, Checkpoint, Record, setup
from reference.classic import Episodes, greedy_eval, result, start, step_env
from reference.common import batch_layout, orth, require

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
    rollout = batch["reward"].shape  # [envs, T]; observations [envs, T, *obs_shape]
    with torch.no_grad():
        next_obs = batch["next_obs"]
        next_q = net(next_obs.reshape(-1, *next_obs.shape[2:])).max(-1).values.view(rollout)
        target = q_lambda(
            batch["reward"], next_q, batch["terminated"], batch["ended"], s.gamma, s.q_lambda
        )
    obs = batch["obs"].reshape(-1, *batch["obs"].shape[2:])
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


# --- Atari ------------------------------------------------------------------------------------


class LayerNormNatureQ(nn.Module):
    """The Nature CNN (conv 32x8s4, 64x4s2, 64x3s1, 512 units) with a LayerNorm before each ReLU
    (over a convolution's whole ``[C, H, W]`` output), orthogonal init (gain sqrt 2), then a
    linear head (gain 1): Q ``[B, A]`` of uint8 frames. Parameters in the order of the recipe's
    ``QNetwork(..., layer_norm=True)``."""

    def __init__(self, num_actions: int, frame_stack: int = 4, screen_size: int = 84) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels, size = frame_stack, screen_size
        for out, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            size = (size - kernel) // stride + 1
            layers += [orth(nn.Conv2d(channels, out, kernel, stride=stride))]
            layers += [nn.LayerNorm([out, size, size]), nn.ReLU()]
            channels = out
        self.trunk = nn.Sequential(
            *layers, nn.Flatten(), orth(nn.Linear(channels * size * size, 512)),
            nn.LayerNorm(512), nn.ReLU(),
        )  # fmt: skip
        self.head = orth(nn.Linear(512, num_actions), 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(obs.to(self.head.weight.dtype) / 255.0))


def plain_pqn_atari(
    cfg: PQNRecipeConfig,
    iterations: int | None = None,
    *,
    checkpoint: Checkpoint | None = None,
    on_iteration: Callable[[int, object], None] | None = None,
    device: str = "cpu",
    threads: int = 1,
) -> list[Record]:
    """PQN with ``cfg``'s settings (``cfg.pqn``, ``cfg.env``) on Atari for ``iterations``
    batches (default: until ``cfg.total_frames``): every simulator takes T epsilon-greedy steps
    (epsilon from the frames done before the batch), then ``pqn_update`` at the learning rate
    annealed by the frames done after it. Returns ``(frames, seconds)`` per batch."""
    s = cfg.pqn
    require("pqn", s, life_loss_boundary=True)
    env, dev, steps, frames, batches = setup(cfg, iterations, checkpoint, threads, device)
    n = env.num_envs
    per_iter = n * steps * cfg.env.frameskip
    net = LayerNormNatureQ(env.num_actions, cfg.env.frame_stack, cfg.env.screen_size).to(dev)
    opt = torch.optim.RAdam(net.parameters(), lr=s.lr, eps=s.eps)
    log = BatchLog(env, net, opt, on_iteration, checkpoint)  # restores a resumed checkpoint
    rollout = (n, steps)
    obs_buf = torch.zeros((*rollout, *env.obs.shape[1:]), dtype=torch.uint8)
    next_buf = torch.zeros_like(obs_buf)
    action = torch.zeros(rollout, dtype=torch.int64)
    reward, terminated, ended = (torch.zeros(rollout) for _ in range(3))
    try:
        for _ in batches:
            epsilon = epsilon_at(s, frames / cfg.total_frames)
            for t in range(steps):
                obs = torch.from_numpy(env.obs)
                with torch.no_grad():
                    greedy = net(obs.to(dev)).argmax(-1).cpu()
                explore = torch.rand(n) < epsilon
                a = torch.where(explore, torch.randint(env.num_actions, (n,)), greedy)
                obs_buf[:, t], action[:, t] = obs, a
                sign, term, end, final, truncated = env.step(a.numpy())
                next_buf[:, t] = torch.from_numpy(env.obs)
                if final is not None:  # a truncated episode bootstraps from its last frame
                    next_buf[torch.from_numpy(truncated), t] = torch.from_numpy(final)
                reward[:, t] = torch.from_numpy(sign).float()
                terminated[:, t] = torch.from_numpy(term).float()
                ended[:, t] = torch.from_numpy(end).float()
            frames += per_iter
            lr = s.lr * (max(0.0, 1.0 - frames / cfg.total_frames) if s.anneal_lr else 1.0)
            batch = dict(obs=obs_buf, action=action, reward=reward, next_obs=next_buf,
                         terminated=terminated, ended=ended)  # fmt: skip
            pqn_update(net, opt, {k: v.to(dev) for k, v in batch.items()}, s, lr)
            log.done(frames)
    finally:
        env.close()
    return log.records
