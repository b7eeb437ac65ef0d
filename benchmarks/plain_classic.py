"""Plain single-file PyTorch loops for CartPole-v1: the learning reference for the recipes.

Written the way a single-file implementation (CleanRL-style) would be: a gymnasium vector env
(``SyncVectorEnv``, SameStep autoreset: the last observation of an ended episode is
``info["final_obs"][i]``), numpy arrays, torch modules; no TorchRL, no TensorDict, no accelrl.
``benchmarks.learning_cartpole`` runs each loop next to the matching accelrl recipe with the
same settings and seeds.

- ``plain_dqn``: the DQN family with flags that combine (``double``, ``dueling``, ``n_step``,
  ``prioritized``, ``distributional`` C51); epsilon-greedy acting, a numpy ring per simulator
  with n-step returns summed at sample time, ``training_intensity`` replayed samples per
  collected sample, Huber loss (cross-entropy for C51), Adam, hard or Polyak target updates.
- ``plain_ppo``: separate actor and critic MLPs, GAE, epochs x minibatches of the clipped
  objective with a clipped value loss, learning rate and clip range annealed to 0.
- ``plain_a2c``: the same MLPs, n-step returns over each rollout segment, one step of
  TensorFlow-form RMSprop per batch.

Every loop takes the recipe's own ``Config`` (``recipes/<algo>_atari.py``: plain dataclasses,
built for CartPole by ``benchmarks.learning_cartpole.cartpole_config``) and reads its settings
there, as the recipe does: ``cfg.env`` (game, simulators), ``cfg.collector.steps_per_batch``,
``cfg.model.mlp_hidden``, the algorithm's section (``cfg.dqn``, ``cfg.ppo``, ``cfg.a2c``),
``cfg.total_frames`` (a frame is an agent step outside Atari), ``cfg.seed`` and
``cfg.log.eval_episodes``. A renamed field fails here with ``AttributeError``; a setting the loop
does not implement (A2C with Adam) raises ``ValueError``.

An ended episode is ``terminated | truncated``: a terminated one does not bootstrap, a truncated
one (CartPole's 500-step limit) bootstraps from its final observation. Each loop returns
``{"last100", "greedy_eval", "episodes", "seconds", "curve"}`` (``curve``: (env steps, return)
per finished training episode; ``greedy_eval``: mean return of ``cfg.log.eval_episodes`` greedy
episodes on a separate env after training).

    python -m benchmarks.plain_classic dqn --seed 0        # learning_cartpole's settings
    python -m benchmarks.plain_classic rainbow --seed 1 --dqn.lr 1e-3 --total-frames 20000
    python -m benchmarks.plain_classic ppo --help          # every recipe flag
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# The same numpy sum tree as the Atari plain DQN, and the batch layout of a recipe config.
from benchmarks.plain_loops import SumTree, batch_layout, require

if TYPE_CHECKING:  # the recipes' config dataclasses, for annotations only
    from accelrl.algos.dqn import DQNConfig
    from recipes.a2c_atari import Config as A2CRecipeConfig
    from recipes.dqn_atari import Config as DQNRecipeConfig
    from recipes.ppo_atari import Config as PPORecipeConfig

ENV_ID = "CartPole-v1"
EVAL_SEED_OFFSET = 10_000
"""Evaluation episode k of a run with seed s resets with seed s + 10_000 + k."""
PRIORITY_EPS = 1e-6
"""Added to every priority before the exponent (``accelrl.replay.FrameReplay``'s default)."""


# --- shared pieces ----------------------------------------------------------------------------


def make_vec_env(num_envs: int, env_id: str = ENV_ID) -> gym.vector.VectorEnv:
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def step_env(env: gym.vector.VectorEnv, action: np.ndarray):
    """One vector step: (obs to act on next, reward, terminated, ended, next obs of this step).

    With SameStep autoreset ``obs`` already holds the first observation of a new episode where
    one ended; this step's own next observation there is ``info["final_obs"][i]``.
    """
    obs, reward, terminated, truncated, info = env.step(action)
    ended = terminated | truncated
    next_obs = obs.copy()
    for i in np.flatnonzero(ended):
        next_obs[i] = info["final_obs"][i]
    return obs, reward.astype(np.float32), terminated, ended, next_obs


class Episodes:
    """Running return per simulator; a (env steps, return) point per finished episode."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs)
        self.curve: list[tuple[int, float]] = []

    def record(self, reward: np.ndarray, ended: np.ndarray, steps: int) -> None:
        self.returns += reward
        for i in np.flatnonzero(ended):
            self.curve.append((steps, float(self.returns[i])))
            self.returns[i] = 0.0


@torch.no_grad()
def greedy_eval(
    act: Callable[[torch.Tensor], torch.Tensor], episodes: int, seed: int, env_id: str = ENV_ID
) -> float:
    """Mean return of ``episodes`` episodes on a separate env with the greedy action."""
    env = gym.make(env_id)
    returns = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + EVAL_SEED_OFFSET + k)
            total, done = 0.0, False
            while not done:
                action = int(act(torch.as_tensor(obs, dtype=torch.float32)[None])[0])
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns)) if returns else math.nan


def result(episodes: Episodes, greedy: float, start: float) -> dict:
    returns = [r for _, r in episodes.curve]
    return {
        "last100": float(np.mean(returns[-100:])) if returns else math.nan,
        "greedy_eval": greedy,
        "episodes": len(returns),
        "seconds": time.perf_counter() - start,
        "curve": episodes.curve,
    }


# --- DQN family -------------------------------------------------------------------------------


class QNet(nn.Module):
    """ReLU MLP trunk (PyTorch default init), linear head(s): Q [B, A] or logits [B, A, atoms]."""

    def __init__(
        self, obs_dim: int, num_actions: int, hidden: Sequence[int], dueling: bool, atoms: int
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [nn.Linear(obs_dim, width), nn.ReLU()]
            obs_dim = width
        self.trunk = nn.Sequential(*layers)
        self.num_actions, self.atoms = num_actions, atoms
        self.advantage = nn.Linear(obs_dim, num_actions * atoms)
        self.value = nn.Linear(obs_dim, atoms) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.trunk(obs)
        out = self.advantage(x).view(-1, self.num_actions, self.atoms)
        if self.value is not None:
            out = self.value(x).view(-1, 1, self.atoms) + out - out.mean(1, keepdim=True)
        return out.squeeze(-1) if self.atoms == 1 else out


class Replay:
    """(obs, action, reward, next obs, terminated, ended) in a ring of ``replay_capacity / N``
    steps per simulator; n-step returns are summed when sampling. ``d``: the recipe's
    ``cfg.dqn``.

    Step ``p`` of simulator ``e`` is flat index ``(p % L) * N + e``. A step is sampled only once
    its n - 1 successors are stored; with ``prioritized`` its leaf stays 0 until then and gets
    the largest priority seen so far.
    """

    def __init__(self, d: DQNConfig, num_envs: int, obs_dim: int) -> None:
        self.s, self.n = d, num_envs
        self.len = max(d.n_step + 1, d.replay_capacity // num_envs)
        shape = (self.len, self.n)
        self.obs = np.zeros((*shape, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros_like(self.obs)
        self.action = np.zeros(shape, dtype=np.int64)
        self.reward = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.ended = np.zeros(shape, dtype=bool)
        self.written = 0  # vector steps stored so far
        self.tree = SumTree(self.len * self.n) if d.prioritized else None
        self.max_priority = 1.0

    def add(self, obs, action, reward, next_obs, terminated, ended) -> None:
        p = self.written % self.len
        self.obs[p], self.action[p], self.reward[p] = obs, action, reward
        self.next_obs[p], self.terminated[p], self.ended[p] = next_obs, terminated, ended
        self.written += 1
        if self.tree is not None:
            envs = np.arange(self.n)
            self.tree.set(p * self.n + envs, np.zeros(self.n))  # not sampleable until n-step
            ready = self.written - self.s.n_step
            if ready >= 0:
                q = ready % self.len
                value = self.max_priority**self.s.priority_alpha
                self.tree.set(q * self.n + envs, np.full(self.n, value))

    def sampleable(self) -> int:
        return max(0, min(self.written, self.len) - self.s.n_step + 1) * self.n

    def sample(self, batch: int, beta: float):
        """(obs, action, n-step return, bootstrap obs, bootstrap discount, IS weights, flat)."""
        s, rng = self.s, np.random
        if self.tree is None:
            lo, hi = max(0, self.written - self.len), self.written - s.n_step
            steps = rng.randint(lo, hi + 1, size=batch)
            flat = (steps % self.len) * self.n + rng.randint(0, self.n, size=batch)
            weights = np.ones(batch, dtype=np.float32)
        else:
            total = self.tree.total()
            mass = (np.arange(batch) + rng.random_sample(batch)) * (total / batch)
            flat = np.minimum(self.tree.find(np.minimum(mass, total)), self.len * self.n - 1)
            leaf = self.tree.get(flat)
            if (leaf <= 0).any():  # float rounding on the way down: take the leaf's neighbour
                flat = np.where(leaf > 0, flat, flat[np.argmax(leaf)])
                leaf = self.tree.get(flat)
            prob = leaf / total
            w = (self.sampleable() * prob) ** (-beta)
            weights = (w / w.max()).astype(np.float32)
        p, e = flat // self.n, flat % self.n
        ret = np.zeros(batch, dtype=np.float32)
        alive = np.ones(batch, dtype=bool)
        last, bootstrap = p.copy(), np.ones(batch, dtype=bool)
        k_used = np.zeros(batch)
        for k in range(s.n_step):
            q = (p + k) % self.len
            ret += alive * np.float32(s.gamma**k) * self.reward[q, e]
            last = np.where(alive, q, last)
            bootstrap = np.where(alive, ~self.terminated[q, e], bootstrap)
            k_used = np.where(alive, k + 1, k_used)
            alive = alive & ~self.ended[q, e]
        discount = (bootstrap * s.gamma**k_used).astype(np.float32)
        obs, action, next_obs = self.obs[p, e], self.action[p, e], self.next_obs[last, e]
        return obs, action, ret, next_obs, discount, weights, flat

    def update_priority(self, flat: np.ndarray, priority: np.ndarray) -> None:
        if self.tree is None:
            return
        priority = priority + PRIORITY_EPS
        self.max_priority = max(self.max_priority, float(priority.max()))
        self.tree.set(flat, priority**self.s.priority_alpha)


def plain_dqn(
    cfg: DQNRecipeConfig, epsilon_per_batch: bool = False, fused_adam: bool = False
) -> dict:
    """The DQN family with ``cfg``'s settings (``cfg.dqn``, presets already applied by
    ``recipes.dqn_atari.resolve``): ``learning_starts_frames``, ``eps_decay_frames`` and
    ``total_frames`` count agent steps here. Epsilon decays every step, as in the recipe since
    2026-12-01; with ``epsilon_per_batch`` it is set once per collected batch, as the recipe's
    collector did before. Adam is ``torch.optim.Adam``'s default (foreach) kernel; with
    ``fused_adam`` its fused one, as the recipe's (``accelrl.optim.adam``)."""
    s, seed, num_envs = cfg.dqn, cfg.seed, cfg.env.num_envs
    total_steps, steps_per_batch = cfg.total_frames, cfg.collector.steps_per_batch
    start = time.perf_counter()
    seed_all(seed)
    env = make_vec_env(num_envs, cfg.env.game)
    obs_dim = env.single_observation_space.shape[0]
    num_actions = int(env.single_action_space.n)
    atoms = s.atoms if s.distributional else 1
    online = QNet(obs_dim, num_actions, cfg.model.mlp_hidden, s.dueling, atoms)
    target = copy.deepcopy(online).requires_grad_(False)
    opt = torch.optim.Adam(online.parameters(), lr=s.lr, eps=s.adam_eps, fused=fused_adam or None)
    replay = Replay(s, num_envs, obs_dim)
    support = torch.linspace(s.v_min, s.v_max, s.atoms)
    dz = (s.v_max - s.v_min) / (s.atoms - 1)
    rows = torch.arange(s.batch_size)
    per_phase = s.training_intensity * steps_per_batch / s.batch_size
    steps_per_env = batch_layout(cfg)[1]
    episodes = Episodes(num_envs)
    collected, updates, credit = 0, 0, 0.0

    def q_values(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        out = net(obs)
        return (out.softmax(-1) * support).sum(-1) if s.distributional else out

    def update(beta: float) -> None:
        nonlocal updates
        obs, action, ret, next_obs, discount, weights, flat = replay.sample(s.batch_size, beta)
        obs, next_obs = torch.from_numpy(obs), torch.from_numpy(next_obs)
        action, ret = torch.from_numpy(action), torch.from_numpy(ret)
        discount, weights = torch.from_numpy(discount), torch.from_numpy(weights)
        if s.distributional:
            with torch.no_grad():
                p_target = target(next_obs).softmax(-1)  # [B, A, atoms]
                # As TorchRL's DistributionalDQNLoss (the recipe's): the online network picks
                # the bootstrap action whatever ``double`` says; the target scores it.
                best = q_values(online, next_obs).argmax(-1)
                p_next = p_target[rows, best]
                tz = (ret[:, None] + discount[:, None] * support).clamp(s.v_min, s.v_max)
                b = ((tz - s.v_min) / dz).clamp(0, s.atoms - 1)
                lo, hi = b.floor().long(), b.ceil().long()
                m = torch.zeros_like(p_next)
                # b on an atom (lo == hi): all of its mass goes to that atom.
                m.scatter_add_(1, lo, p_next * (hi.float() - b + (lo == hi).float()))
                m.scatter_add_(1, hi, p_next * (b - lo.float()))
            log_p = online(obs)[rows, action].log_softmax(-1)
            per_sample = -(m * log_p).sum(-1)
            priority = per_sample.detach()
        else:
            with torch.no_grad():
                next_q = target(next_obs)
                if s.double:
                    bootstrap = next_q[rows, online(next_obs).argmax(-1)]
                else:
                    bootstrap = next_q.max(-1).values
                y = ret + discount * bootstrap
            q = online(obs)[rows, action]
            per_sample = F.smooth_l1_loss(q, y, reduction="none")
            priority = (q - y).detach().abs()
        loss = (per_sample * weights).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(online.parameters(), s.max_grad_norm)
        opt.step()
        updates += 1
        if s.tau > 0:
            with torch.no_grad():
                for pt, po in zip(target.parameters(), online.parameters(), strict=True):
                    pt.lerp_(po, s.tau)
        elif updates % s.target_update_interval == 0:
            target.load_state_dict(online.state_dict())
        replay.update_priority(flat, priority.numpy())

    obs, _ = env.reset(seed=seed)
    try:
        while collected < total_steps:
            batch_start = collected
            for _ in range(steps_per_env):
                progress = min(
                    1.0, (batch_start if epsilon_per_batch else collected) / s.eps_decay_frames
                )
                eps = s.eps_start + progress * (s.eps_end - s.eps_start)
                with torch.no_grad():
                    greedy = q_values(online, torch.from_numpy(obs)).argmax(-1).numpy()
                explore = np.random.random_sample(num_envs) < eps
                action = np.where(explore, np.random.randint(num_actions, size=num_envs), greedy)
                new_obs, reward, terminated, ended, next_obs = step_env(env, action)
                replay.add(obs, action, reward, next_obs, terminated, ended)
                collected += num_envs
                episodes.record(reward, ended, collected)
                obs = new_obs
            if collected >= s.learning_starts_frames:
                beta = s.priority_beta + min(1.0, collected / total_steps) * (1.0 - s.priority_beta)
                credit += per_phase
                while credit >= 1.0:
                    update(beta)
                    credit -= 1.0
    finally:
        env.close()
    greedy = greedy_eval(
        lambda o: q_values(online, o).argmax(-1), cfg.log.eval_episodes, seed, cfg.env.game
    )
    return result(episodes, greedy, start)


# --- actor-critics ----------------------------------------------------------------------------


def orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def tanh_mlp(in_features: int, hidden: Sequence[int], out: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [orthogonal(nn.Linear(in_features, width), math.sqrt(2)), nn.Tanh()]
        in_features = width
    layers.append(orthogonal(nn.Linear(in_features, out), out_gain))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Separate actor and critic Tanh MLPs (CleanRL / Stable-Baselines3 for vector inputs)."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.actor = tanh_mlp(obs_dim, hidden, num_actions, 0.01)
        self.critic = tanh_mlp(obs_dim, hidden, 1, 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)


class Rollout:
    """``steps`` steps of every simulator with the current policy, and GAE over them."""

    def __init__(self, env: gym.vector.VectorEnv, model: ActorCritic, steps: int, seed: int):
        self.env, self.model, self.steps = env, model, steps
        self.n = env.num_envs
        self.obs_now, _ = env.reset(seed=seed)
        self.episodes = Episodes(self.n)
        self.collected = 0

    @torch.no_grad()
    def collect(self) -> dict[str, torch.Tensor]:
        T, n = self.steps, self.n
        obs, next_obs = [], []
        action, log_prob = np.zeros((T, n), np.int64), torch.zeros(T, n)
        reward = np.zeros((T, n), np.float32)
        terminated, ended = np.zeros((T, n), bool), np.zeros((T, n), bool)
        for t in range(T):
            o = torch.from_numpy(self.obs_now)
            dist = torch.distributions.Categorical(logits=self.model.actor(o))
            a = dist.sample()
            log_prob[t] = dist.log_prob(a)
            action[t] = a.numpy()
            new_obs, reward[t], terminated[t], ended[t], nxt = step_env(self.env, action[t])
            obs.append(o)
            next_obs.append(torch.from_numpy(nxt))
            self.collected += n
            self.episodes.record(reward[t], ended[t], self.collected)
            self.obs_now = new_obs
        obs_t, next_t = torch.stack(obs), torch.stack(next_obs)
        return {
            "obs": obs_t,
            "action": torch.from_numpy(action),
            "log_prob": log_prob,
            "value": self.model.value(obs_t),
            # One pass over every next observation (final ones where episodes ended).
            "next_value": self.model.value(next_t),
            "reward": torch.from_numpy(reward),
            "terminated": torch.from_numpy(terminated).float(),
            "ended": torch.from_numpy(ended).float(),
        }


def gae(batch: dict[str, torch.Tensor], gamma: float, lam: float) -> tuple[torch.Tensor, ...]:
    """(advantages, returns) [T, N]: terminated steps do not bootstrap, ended steps stop the
    recursion; lam = 1 gives the n-step returns of each segment."""
    value, next_value = batch["value"], batch["next_value"]
    adv = torch.zeros_like(value)
    last = torch.zeros_like(value[0])
    for t in reversed(range(value.shape[0])):
        delta = batch["reward"][t] + gamma * next_value[t] * (1 - batch["terminated"][t])
        last = delta - value[t] + gamma * lam * (1 - batch["ended"][t]) * last
        adv[t] = last
    return adv, adv + value


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def plain_ppo(cfg: PPORecipeConfig) -> dict:
    """PPO with ``cfg``'s settings (``cfg.ppo``): separate actor and critic MLPs of
    ``cfg.model.mlp_hidden``."""
    s, seed, total_steps = cfg.ppo, cfg.seed, cfg.total_frames
    start = time.perf_counter()
    seed_all(seed)
    env = make_vec_env(cfg.env.num_envs, cfg.env.game)
    obs_dim, num_actions = env.single_observation_space.shape[0], env.single_action_space.n
    model = ActorCritic(obs_dim, num_actions, cfg.model.mlp_hidden)
    opt = torch.optim.Adam(model.parameters(), lr=s.lr, eps=s.adam_eps)
    rollout = Rollout(env, model, batch_layout(cfg)[1], seed)
    try:
        while rollout.collected < total_steps:
            batch = rollout.collect()
            remaining = max(0.0, 1.0 - rollout.collected / total_steps)
            set_lr(opt, s.lr * (remaining if s.anneal_lr else 1.0))
            clip = max(s.clip_epsilon * (remaining if s.anneal_clip else 1.0), 1e-8)
            with torch.no_grad():
                adv, ret = gae(batch, s.gamma, s.gae_lambda)
            flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.items()}
            flat["advantage"], flat["return"] = adv.reshape(-1), ret.reshape(-1)
            n = flat["advantage"].numel()
            size = n // s.minibatches
            for _ in range(s.epochs):
                order = torch.randperm(n)
                for lo in range(0, n, size):
                    mb = {k: v[order[lo : lo + size]] for k, v in flat.items()}
                    dist = torch.distributions.Categorical(logits=model.actor(mb["obs"]))
                    log_ratio = dist.log_prob(mb["action"]) - mb["log_prob"]
                    ratio = log_ratio.exp()
                    a = mb["advantage"]
                    if s.normalize_advantage:
                        a = (a - a.mean()) / (a.std() + 1e-8)
                    pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
                    v = model.value(mb["obs"])
                    v_loss = (v - mb["return"]) ** 2
                    if s.clip_value:  # to the annealed clip range, as baselines' PPO2 and
                        # the recipe (``PPO.update`` anneals TorchRL's clip_value with it)
                        v_old = mb["value"]
                        v_clipped = v_old + (v - v_old).clamp(-clip, clip)
                        v_loss = torch.max(v_loss, (v_clipped - mb["return"]) ** 2)
                    loss = pg + s.value_coef * 0.5 * v_loss.mean()
                    if s.entropy_coef:
                        loss = loss - s.entropy_coef * dist.entropy().mean()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
                    opt.step()
    finally:
        env.close()
    greedy = greedy_eval(
        lambda o: model.actor(o).argmax(-1), cfg.log.eval_episodes, seed, cfg.env.game
    )
    return result(rollout.episodes, greedy, start)


class RMSpropTF(torch.optim.Optimizer):
    """RMSprop as TensorFlow computes it: ``g / sqrt(v + eps)`` with the running average ``v``
    of squared gradients initialised to one (the maths of ``accelrl.optim.RMSpropTF``)."""

    def __init__(
        self, params: Iterable[nn.Parameter], lr: float, alpha: float = 0.99, eps: float = 1e-5
    ) -> None:
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.ones_like(p)
                avg = state["square_avg"]
                avg.mul_(group["alpha"]).addcmul_(p.grad, p.grad, value=1 - group["alpha"])
                p.addcdiv_(p.grad, avg.add(group["eps"]).sqrt_(), value=-group["lr"])


def plain_a2c(cfg: A2CRecipeConfig) -> dict:
    """A2C with ``cfg``'s settings (``cfg.a2c``; TF-form RMSprop): the PPO loop's MLPs, one
    gradient step per batch."""
    s, seed, total_steps = cfg.a2c, cfg.seed, cfg.total_frames
    require("a2c", s, optimizer="rmsprop")
    start = time.perf_counter()
    seed_all(seed)
    env = make_vec_env(cfg.env.num_envs, cfg.env.game)
    obs_dim, num_actions = env.single_observation_space.shape[0], env.single_action_space.n
    model = ActorCritic(obs_dim, num_actions, cfg.model.mlp_hidden)
    opt = RMSpropTF(model.parameters(), lr=s.lr, alpha=s.rms_alpha, eps=s.eps)
    rollout = Rollout(env, model, batch_layout(cfg)[1], seed)
    try:
        while rollout.collected < total_steps:
            batch = rollout.collect()
            remaining = max(0.0, 1.0 - rollout.collected / total_steps)
            set_lr(opt, s.lr * (remaining if s.anneal_lr else 1.0))
            with torch.no_grad():
                adv, ret = gae(batch, s.gamma, s.gae_lambda)
            obs, action = batch["obs"].reshape(-1, batch["obs"].shape[-1]), batch["action"]
            adv, ret = adv.reshape(-1), ret.reshape(-1)
            if s.normalize_advantage:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            dist = torch.distributions.Categorical(logits=model.actor(obs))
            pg = -(dist.log_prob(action.reshape(-1)) * adv).mean()
            v_loss = ((model.value(obs) - ret) ** 2).mean()
            loss = pg + s.value_coef * v_loss
            if s.entropy_coef:
                loss = loss - s.entropy_coef * dist.entropy().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
            opt.step()
    finally:
        env.close()
    greedy = greedy_eval(
        lambda o: model.actor(o).argmax(-1), cfg.log.eval_episodes, seed, cfg.env.game
    )
    return result(rollout.episodes, greedy, start)


# --- command line -----------------------------------------------------------------------------

LOOPS = {"dqn": plain_dqn, "ppo": plain_ppo, "a2c": plain_a2c}


def main(argv: list[str] | None = None) -> None:
    # learning_cartpole builds the recipes' configs (it imports the recipes): only here.
    import tyro

    from benchmarks import learning_cartpole as lc

    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        add_help=False,
        epilog="Every other flag is the recipe's own (ALGO --help lists them), applied over "
        "benchmarks.learning_cartpole's settings for ALGO.",
    )
    p.add_argument("algo", choices=list(lc.KINDS))
    p.add_argument("--json", help="write the config and the result (with the curve) here")
    args, rest = p.parse_known_args(argv)
    kind = lc.KINDS[args.algo]
    cfg = lc.cartpole_config(args.algo)
    cfg = tyro.cli(type(cfg), default=cfg, args=rest, prog=f"plain_classic {args.algo}")
    if kind == "dqn":
        from recipes.dqn_atari import resolve

        cfg = resolve(cfg)
    torch.set_num_threads(1)
    out = LOOPS[kind](cfg)
    print(
        f"{args.algo} seed {cfg.seed}: last-100 {out['last100']:.1f}, greedy "
        f"{out['greedy_eval']:.1f}, {out['episodes']} episodes, {out['seconds']:.1f} s"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": dataclasses.asdict(cfg), "seed": cfg.seed, **out}, fh)


if __name__ == "__main__":
    main()
