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
built for CartPole by ``reference.cartpole_presets.cartpole_config``) and reads its settings
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

    python -m reference cartpole dqn --seed 0        # learning_cartpole's settings
    python -m reference cartpole rainbow --seed 1 --dqn.lr 1e-3 --total-frames 20000
    python -m reference cartpole ppo --help          # every recipe flag
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from reference.common import (
    Ring,
    RMSpropTF,
    anneal_lr,
    batch_layout,
    clipped_step,
    dqn_losses,
    orth,
    q_values,
    require,
    seed_all,
)

if TYPE_CHECKING:  # the recipes' config dataclasses, for annotations only
    from accelrl.algos.dqn import DQNConfig
    from recipes.a2c_atari import Config as A2CRecipeConfig
    from recipes.dqn_atari import Config as DQNRecipeConfig
    from recipes.ppo_atari import Config as PPORecipeConfig

EVAL_SEED_OFFSET = 10_000
"""Evaluation episode k of a run with seed s resets with seed s + 10_000 + k."""
PRIORITY_EPS = 1e-6
"""Added to every priority before the exponent (``accelrl.replay.memory.FrameReplay``'s default)."""


# --- shared pieces ----------------------------------------------------------------------------


def make_vec_env(num_envs: int, env_id: str) -> gym.vector.VectorEnv:
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )


def start(cfg: Any) -> tuple[gym.vector.VectorEnv, int, int]:
    """Seeds torch and numpy with ``cfg.seed`` and makes ``cfg.env``'s simulators: (env,
    observation size, number of actions)."""
    seed_all(cfg.seed)
    env = make_vec_env(cfg.env.num_envs, cfg.env.game)
    return env, env.single_observation_space.shape[0], int(env.single_action_space.n)


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
    act: Callable[[torch.Tensor], torch.Tensor], episodes: int, seed: int, env_id: str
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


class Replay(Ring):
    """(obs, action, reward, next obs, terminated, ended) in a ring of ``replay_capacity / N``
    steps per simulator (``reference.common.Ring``), numpy arrays; n-step returns are summed
    when sampling. ``d``: the recipe's ``cfg.dqn``."""

    def __init__(self, d: DQNConfig, num_envs: int, obs_dim: int) -> None:
        super().__init__(d, num_envs)
        shape = (self.len, self.n)
        self.obs = np.zeros((*shape, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros_like(self.obs)
        self.action = np.zeros(shape, dtype=np.int64)
        self.reward = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.ended = np.zeros(shape, dtype=bool)

    def add(self, obs, action, reward, next_obs, terminated, ended) -> None:
        p = self.next_slot()
        self.obs[p], self.action[p], self.reward[p] = obs, action, reward
        self.next_obs[p], self.terminated[p], self.ended[p] = next_obs, terminated, ended

    def sampleable(self) -> int:
        return max(0, min(self.written, self.len) - self.s.n_step + 1) * self.n

    def sample(self, batch: int, beta: float):
        """(obs, action, n-step return, bootstrap obs, bootstrap discount, IS weights, flat)."""
        s, rng = self.s, np.random
        if self.tree is None:
            flat = self.uniform(batch)
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


class DQNUpdate:
    """The plain DQN family's gradient step: a batch from ``replay`` (numpy), the losses of
    ``dqn_losses`` times the importance weights, Adam on the clipped gradient, the target
    network copied every ``target_update_interval`` steps (or Polyak-averaged by ``tau``), the
    sampled priorities written back. ``d``: the recipe's ``cfg.dqn``; ``obs_shape``: the shape
    the network takes each stored (flat) observation in. ``lap``, when given, is called with
    each phase's name as it ends (``benchmarks.dqn_update`` times them)."""

    def __init__(
        self,
        online: nn.Module,
        replay: Replay,
        d: DQNConfig,
        obs_shape: Sequence[int],
        fused_adam: bool = False,
    ) -> None:
        self.online, self.replay, self.s = online, replay, d
        self.target = copy.deepcopy(online).requires_grad_(False)
        self.opt = torch.optim.Adam(
            online.parameters(), lr=d.lr, eps=d.adam_eps, fused=fused_adam or None
        )
        self.support = torch.linspace(d.v_min, d.v_max, d.atoms)
        self.obs_shape = tuple(obs_shape)
        self.updates = 0

    def __call__(self, beta: float, lap: Callable[[str], None] | None = None) -> None:
        s, lap = self.s, lap or (lambda phase: None)
        obs, action, ret, next_obs, discount, weights, flat = self.replay.sample(s.batch_size, beta)
        obs = torch.from_numpy(obs).view(-1, *self.obs_shape)
        next_obs = torch.from_numpy(next_obs).view(-1, *self.obs_shape)
        action, ret = torch.from_numpy(action), torch.from_numpy(ret)
        discount, weights = torch.from_numpy(discount), torch.from_numpy(weights)
        batch = (obs, action, ret, next_obs, discount)
        lap("sample")
        per_sample, priority = dqn_losses(self.online, self.target, batch, self.support, s)
        loss = (per_sample * weights).mean()
        lap("forward and loss")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        lap("backward")
        nn.utils.clip_grad_norm_(self.online.parameters(), s.max_grad_norm)
        self.opt.step()
        lap("clip and optimizer step")
        self.updates += 1
        if s.tau > 0:
            with torch.no_grad():
                pairs = zip(self.target.parameters(), self.online.parameters(), strict=True)
                for pt, po in pairs:
                    pt.lerp_(po, s.tau)
        elif self.updates % s.target_update_interval == 0:
            self.target.load_state_dict(self.online.state_dict())
        lap("target update")
        self.replay.update_priority(flat, priority.numpy())
        lap("priority update")


def plain_dqn(
    cfg: DQNRecipeConfig, epsilon_per_batch: bool = False, fused_adam: bool = False
) -> dict:
    """The DQN family with ``cfg``'s settings (``cfg.dqn``, presets already applied by
    ``accelrl.algos.catalog.resolve_dqn``): ``learning_starts_frames``, ``eps_decay_frames`` and
    ``total_frames`` count agent steps here. Epsilon decays every step, as in the recipe since
    2026-12-01; with ``epsilon_per_batch`` it is set once per collected batch, as the recipe's
    collector did before. Adam is ``torch.optim.Adam``'s default (foreach) kernel; with
    ``fused_adam`` its fused one, as the recipe's (``accelrl.optim.adam``)."""
    s, seed, num_envs = cfg.dqn, cfg.seed, cfg.env.num_envs
    total_steps, steps_per_batch = cfg.total_frames, cfg.collector.steps_per_batch
    started = time.perf_counter()
    env, obs_dim, num_actions = start(cfg)
    atoms = s.atoms if s.distributional else 1
    online = QNet(obs_dim, num_actions, cfg.model.mlp_hidden, s.dueling, atoms)
    replay = Replay(s, num_envs, obs_dim)
    update = DQNUpdate(online, replay, s, (obs_dim,), fused_adam)
    support = update.support
    per_phase = s.training_intensity * steps_per_batch / s.batch_size
    steps_per_env = batch_layout(cfg)[1]
    episodes = Episodes(num_envs)
    collected, credit = 0, 0.0

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
                    q = q_values(online, torch.from_numpy(obs), support, s)
                greedy = q.argmax(-1).numpy()
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
        lambda o: q_values(online, o, support, s).argmax(-1),
        cfg.log.eval_episodes,
        seed,
        cfg.env.game,
    )
    return result(episodes, greedy, started)


# --- actor-critics ----------------------------------------------------------------------------


def tanh_mlp(in_features: int, hidden: Sequence[int], out: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [orth(nn.Linear(in_features, width), math.sqrt(2)), nn.Tanh()]
        in_features = width
    layers.append(orth(nn.Linear(in_features, out), out_gain))
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


def actor_critic(cfg: Any) -> tuple[gym.vector.VectorEnv, ActorCritic]:
    """``start(cfg)``'s simulators and an actor-critic of ``cfg.model.mlp_hidden`` for them."""
    env, obs_dim, num_actions = start(cfg)
    return env, ActorCritic(obs_dim, num_actions, cfg.model.mlp_hidden)


def actor_critic_result(cfg: Any, model: ActorCritic, rollout: Rollout, started: float) -> dict:
    """The loop's result after training, with the greedy evaluation of ``model``'s actor."""
    greedy = greedy_eval(
        lambda o: model.actor(o).argmax(-1), cfg.log.eval_episodes, cfg.seed, cfg.env.game
    )
    return result(rollout.episodes, greedy, started)


def entropy_step(
    opt: torch.optim.Optimizer,
    model: ActorCritic,
    loss: torch.Tensor,
    dist: torch.distributions.Categorical,
    s: Any,
) -> None:
    """One clipped optimizer step on ``loss`` less ``s.entropy_coef`` x ``dist``'s mean entropy
    (no entropy term at all when the coefficient is 0). ``s``: the recipe's ``cfg.ppo`` or
    ``cfg.a2c``."""
    if s.entropy_coef:
        loss = loss - s.entropy_coef * dist.entropy().mean()
    clipped_step(opt, loss, model.parameters(), s.max_grad_norm)


def plain_ppo(cfg: PPORecipeConfig) -> dict:
    """PPO with ``cfg``'s settings (``cfg.ppo``): separate actor and critic MLPs of
    ``cfg.model.mlp_hidden``."""
    s, seed, total_steps = cfg.ppo, cfg.seed, cfg.total_frames
    started = time.perf_counter()
    env, model = actor_critic(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=s.lr, eps=s.adam_eps)
    rollout = Rollout(env, model, batch_layout(cfg)[1], seed)
    try:
        while rollout.collected < total_steps:
            batch = rollout.collect()
            remaining = anneal_lr(opt, s, rollout.collected / total_steps)
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
                    entropy_step(opt, model, loss, dist, s)
    finally:
        env.close()
    return actor_critic_result(cfg, model, rollout, started)


def plain_a2c(cfg: A2CRecipeConfig) -> dict:
    """A2C with ``cfg``'s settings (``cfg.a2c``; TF-form RMSprop): the PPO loop's MLPs, one
    gradient step per batch."""
    s, seed, total_steps = cfg.a2c, cfg.seed, cfg.total_frames
    require("a2c", s, optimizer="rmsprop")
    started = time.perf_counter()
    env, model = actor_critic(cfg)
    opt = RMSpropTF(model.parameters(), lr=s.lr, alpha=s.rms_alpha, eps=s.eps)
    rollout = Rollout(env, model, batch_layout(cfg)[1], seed)
    try:
        while rollout.collected < total_steps:
            batch = rollout.collect()
            anneal_lr(opt, s, rollout.collected / total_steps)
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
            entropy_step(opt, model, loss, dist, s)
    finally:
        env.close()
    return actor_critic_result(cfg, model, rollout, started)
