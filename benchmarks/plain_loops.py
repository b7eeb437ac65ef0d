"""Plain PyTorch training loops over ale-py's ``AtariVectorEnv``: the throughput reference for
the recipes (``benchmarks.run``'s training rows).

Written the way a single-file implementation (CleanRL-style) would be: numpy arrays from the
simulator, torch tensors, one ``nn.Module``, no TensorDict, no TorchRL, no accelrl code (only
its game-name lookup). Each loop uses the same simulator settings as accelrl's ``ale_vec``
backend (frameskip 4 with max-pool, 84x84 grayscale, 4-frame stack, up to 30 no-ops, FIRE on
reset, sticky actions 0.25, SameStep autoreset), the same Nature CNN (conv 32x8s4, 64x4s2, 64x3s1,
512 units) and the defaults of the matching recipe, and does the same work per step and per
update as the recipe:

- ``plain_ppo``: T steps of every simulator (one forward pass per step gives actions,
  log-probabilities and values), GAE with lost lives as bootstrap boundaries (a truncated
  episode bootstraps from its final frame), then epochs x minibatches of the clipped policy
  loss, clipped value loss and entropy bonus, gradient-norm clipping, Adam; learning rate and clip
  range annealed; approximate KL and clip fraction per minibatch (logged by the recipes too).
- ``plain_a2c``: T steps, n-step returns, one RMSprop step (TensorFlow's form) on the batch.
- ``plain_dqn``: epsilon-greedy acting (the Q-network runs for every step, as accelrl's
  ``EGreedyModule`` does), a uniform replay of (obs, next obs) stacks in a ring per simulator, or
  with ``prioritized`` a numpy sum tree; ``double``, ``dueling``, ``n_step`` and
  ``distributional`` (C51; the online network always picks the bootstrap action, as TorchRL's
  ``DistributionalDQNLoss`` does) as the DQN recipe's flags; Huber loss, Adam, hard target
  copies, ``training_intensity`` replayed samples per collected sample.

Every loop returns one ``(frames, seconds)`` record per iteration (collection + update), counted
from after its setup, as the recipes' ``metrics.csv`` rows; ``steady_fps`` turns either into
frames/s excluding the first ``warmup`` iterations.

Run one alone: ``python -m benchmarks.plain_loops ppo --game Pong --iterations 5 [--device cuda]``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

FRAMESKIP = 4
Record = tuple[int, float]  # (emulator frames so far, seconds since the loop started)


def steady_fps(records: Sequence[Record], warmup: int) -> float:
    """Frames/s over the records after the first ``warmup`` (which hold setup and warm-up)."""
    if len(records) <= warmup:
        raise ValueError(f"need more than {warmup} records, got {len(records)}")
    (f0, t0), (f1, t1) = (records[warmup - 1] if warmup else (0, 0.0)), records[-1]
    return (f1 - f0) / max(t1 - t0, 1e-9)


# --- simulators -------------------------------------------------------------------------------


class VecAtari:
    """``AtariVectorEnv`` with DeepMind preprocessing in C++, plus life-loss and reward-sign
    bookkeeping in numpy. ``obs`` is the current uint8 batch ``[N, 4, 84, 84]``."""

    def __init__(self, game: str, num_envs: int, threads: int, seed: int, sticky: float = 0.25):
        from ale_py.vector_env import AtariVectorEnv

        from accelrl.envs.games import rom_id

        self.env = AtariVectorEnv(
            rom_id(game),
            num_envs,
            num_threads=threads,
            autoreset_mode="SameStep",
            repeat_action_probability=sticky,
            reward_clipping=False,
            episodic_life=False,
            noop_max=30,
            use_fire_reset=True,
            max_num_frames_per_episode=108_000,
        )
        self.num_envs = num_envs
        self.num_actions = int(self.env.single_action_space.n)
        obs, info = self.env.reset(seed=seed)
        self.obs = obs
        self.lives = info["lives"].copy()
        # Whole games, unclipped score (what accelrl's episodes.csv records): learning runs
        # read and clear ``finished`` after each iteration.
        self.ep_return = np.zeros(num_envs)
        self.ep_length = np.zeros(num_envs, dtype=np.int64)
        self.finished: list[tuple[float, int]] = []

    def step(self, actions: np.ndarray):
        """Returns (reward sign, terminated-or-life-lost, ended-or-life-lost, final obs of
        truncated rows or None, truncated mask)."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        ended = terminated | truncated
        lives = info["lives"]
        life_lost = (lives < self.lives) & ~ended
        self.lives = lives.copy()
        self.ep_return += reward
        self.ep_length += 1
        for i in np.flatnonzero(ended):
            self.finished.append((float(self.ep_return[i]), int(self.ep_length[i])))
        self.ep_return[ended], self.ep_length[ended] = 0.0, 0
        final = info["final_obs"][truncated] if truncated.any() else None
        self.obs = obs
        return np.sign(reward), terminated | life_lost, ended | life_lost, final, truncated

    def close(self) -> None:
        self.env.close()


# --- networks ---------------------------------------------------------------------------------


def nature_convs() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(4, 32, 8, stride=4),
        nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1),
        nn.ReLU(),
        nn.Flatten(),
    )


class ActorCritic(nn.Module):
    def __init__(self, num_actions: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nature_convs(), nn.Linear(3136, 512), nn.ReLU())
        self.pi = nn.Linear(512, num_actions)
        self.v = nn.Linear(512, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs.float() / 255.0)
        return self.pi(h), self.v(h).squeeze(-1)


class QNet(nn.Module):
    """Nature convs, then a 512-unit advantage stream (and value stream when dueling) giving
    ``[B, A]`` Q-values or ``[B, A, atoms]`` logits."""

    def __init__(self, num_actions: int, dueling: bool, atoms: int) -> None:
        super().__init__()
        self.num_actions, self.atoms = num_actions, atoms
        self.convs = nature_convs()

        def stream(out: int) -> nn.Module:
            return nn.Sequential(nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, out))

        self.adv = stream(num_actions * atoms)
        self.val = stream(atoms) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.convs(obs.float() / 255.0)
        q = self.adv(x).view(-1, self.num_actions, self.atoms)
        if self.val is not None:
            q = self.val(x).view(-1, 1, self.atoms) + q - q.mean(1, keepdim=True)
        return q.squeeze(-1) if self.atoms == 1 else q


# --- PPO and A2C ------------------------------------------------------------------------------


@dataclass
class PPOSettings:
    """recipes/ppo_atari.py defaults."""

    num_envs: int = 8
    steps: int = 128
    epochs: int = 4
    minibatches: int = 4
    lr: float = 2.5e-4
    clip: float = 0.1
    gamma: float = 0.99
    lam: float = 0.95
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    total_frames: int = 10_000_000
    """For the learning-rate and clip annealing only."""


@dataclass
class A2CSettings:
    """recipes/a2c_atari.py defaults."""

    num_envs: int = 16
    steps: int = 5
    lr: float = 7e-4
    alpha: float = 0.99
    eps: float = 1e-5
    gamma: float = 0.99
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    total_frames: int = 10_000_000


class Rollout:
    """T steps of every simulator with the actor-critic; tensors on ``device``."""

    def __init__(self, env: VecAtari, model: ActorCritic, steps: int, device: torch.device):
        n, self.env, self.model, self.steps, self.device = env.num_envs, env, model, steps, device
        self.obs = torch.zeros((steps, n, 4, 84, 84), dtype=torch.uint8, device=device)
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


def _setup(game: str, num_envs: int, threads: int, seed: int, device: str, sticky: float):
    torch.manual_seed(seed)
    env = VecAtari(game, num_envs, threads, seed, sticky)
    return env, torch.device(device)


def plain_ppo(
    game: str,
    s: PPOSettings,
    iterations: int,
    *,
    device: str = "cpu",
    threads: int = 1,
    seed: int = 0,
    sticky: float = 0.25,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
) -> list[Record]:
    env, dev = _setup(game, s.num_envs, threads, seed, device, sticky)
    model = ActorCritic(env.num_actions).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=s.lr, eps=s.adam_eps)
    rollout = Rollout(env, model, s.steps, dev)
    n = s.num_envs * s.steps
    mb = n // s.minibatches
    records: list[Record] = []
    frames, start = 0, time.perf_counter()
    try:
        for _ in range(iterations):
            remaining = max(0.0, 1.0 - frames / s.total_frames)
            for group in opt.param_groups:
                group["lr"] = s.lr * remaining
            clip = max(s.clip * remaining, 1e-8)
            last_value = rollout.collect()
            adv = rollout.advantages(last_value, s.gamma, s.lam)
            returns = adv + rollout.values
            b_obs = rollout.obs.reshape(n, 4, 84, 84)
            b_act, b_logp = rollout.actions.reshape(n), rollout.logp.reshape(n)
            b_adv, b_ret, b_val = adv.reshape(n), returns.reshape(n), rollout.values.reshape(n)
            stats = torch.zeros(3, device=dev)
            for _ in range(s.epochs):
                order = torch.randperm(n, device=dev)
                for i in range(0, n, mb):
                    idx = order[i : i + mb]
                    logits, value = model(b_obs[idx])
                    dist = torch.distributions.Categorical(logits=logits)
                    logp = dist.log_prob(b_act[idx])
                    log_ratio = logp - b_logp[idx]
                    ratio = log_ratio.exp()
                    a = b_adv[idx]
                    a = (a - a.mean()) / (a.std() + 1e-8)
                    pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
                    v_clipped = b_val[idx] + (value - b_val[idx]).clamp(-clip, clip)
                    v_loss = (
                        0.5
                        * torch.max((value - b_ret[idx]) ** 2, (v_clipped - b_ret[idx]) ** 2).mean()
                    )
                    loss = pg - s.ent_coef * dist.entropy().mean() + s.vf_coef * v_loss
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
                    opt.step()
                    with torch.no_grad():
                        kl = ((ratio - 1) - log_ratio).mean()
                        clipped = ((ratio - 1).abs() > clip).float().mean()
                        stats += torch.stack([kl, clipped, grad_norm])
            stats.tolist()  # the metrics reach the host once per update, as the recipe's
            frames += n * FRAMESKIP
            records.append((frames, time.perf_counter() - start))
            if on_iteration is not None:
                on_iteration(frames, env)
    finally:
        env.close()
    return records


def plain_a2c(
    game: str,
    s: A2CSettings,
    iterations: int,
    *,
    device: str = "cpu",
    threads: int = 1,
    seed: int = 0,
    sticky: float = 0.25,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
) -> list[Record]:
    env, dev = _setup(game, s.num_envs, threads, seed, device, sticky)
    model = ActorCritic(env.num_actions).to(dev)
    # TensorFlow's RMSprop (eps inside the square root, average from one), as OpenAI
    # baselines' A2C and the recipe use; PyTorch's form takes far larger early steps.
    from benchmarks.plain_classic import RMSpropTF

    opt = RMSpropTF(model.parameters(), lr=s.lr, alpha=s.alpha, eps=s.eps)
    rollout = Rollout(env, model, s.steps, dev)
    n = s.num_envs * s.steps
    records: list[Record] = []
    frames, start = 0, time.perf_counter()
    try:
        for _ in range(iterations):
            for group in opt.param_groups:
                group["lr"] = s.lr * max(0.0, 1.0 - frames / s.total_frames)
            last_value = rollout.collect()
            returns = (rollout.advantages(last_value, s.gamma, 1.0) + rollout.values).reshape(n)
            logits, value = model(rollout.obs.reshape(n, 4, 84, 84))
            dist = torch.distributions.Categorical(logits=logits)
            adv = returns - value.detach()
            pg = -(dist.log_prob(rollout.actions.reshape(n)) * adv).mean()
            loss = pg + s.vf_coef * ((returns - value) ** 2).mean()
            loss = loss - s.ent_coef * dist.entropy().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
            opt.step()
            float(loss.detach()), float(grad_norm)  # logged per update by the recipe too
            frames += n * FRAMESKIP
            records.append((frames, time.perf_counter() - start))
            if on_iteration is not None:
                on_iteration(frames, env)
    finally:
        env.close()
    return records


# --- DQN family -------------------------------------------------------------------------------


@dataclass
class DQNSettings:
    """recipes/dqn_atari.py defaults (``preset`` values are applied by ``dqn_settings``)."""

    num_envs: int = 8
    steps: int = 4
    batch_size: int = 32
    lr: float = 1e-4
    adam_eps: float = 1.5e-4
    gamma: float = 0.99
    training_intensity: float = 8.0
    learning_starts: int = 80_000
    target_update_interval: int = 2_000
    eps_start: float = 1.0
    eps_end: float = 0.01
    eps_decay_frames: int = 1_000_000
    max_grad_norm: float = 10.0
    capacity: int = 1_000_000
    double: bool = False
    dueling: bool = False
    n_step: int = 1
    prioritized: bool = False
    distributional: bool = False
    atoms: int = 51
    v_min: float = -10.0
    v_max: float = 10.0
    alpha: float = 0.5
    beta: float = 0.4
    total_frames: int = 10_000_000
    """For the importance-sampling exponent's annealing only."""


def dqn_settings(dqn_cfg, num_envs: int, frames_per_batch: int, **overrides) -> DQNSettings:
    """Plain settings equal to an accelrl ``DQNConfig`` (after its preset is applied)."""
    names = {f.name for f in dataclasses.fields(DQNSettings)}
    values = {k: v for k, v in dataclasses.asdict(dqn_cfg).items() if k in names}
    values.update(
        capacity=dqn_cfg.replay_capacity,
        alpha=dqn_cfg.priority_alpha,
        beta=dqn_cfg.priority_beta,
        num_envs=num_envs,
        steps=frames_per_batch // num_envs,
    )
    values.update(overrides)
    return DQNSettings(**values)


class SumTree:
    """Sums of priorities over a power-of-two leaf array; vectorised updates and lookups."""

    def __init__(self, size: int) -> None:
        self.leaves = 1 << max(0, (size - 1).bit_length())
        self.tree = np.zeros(2 * self.leaves)

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        pos = np.asarray(idx) + self.leaves
        self.tree[pos] = values
        pos = np.unique(pos // 2)
        while pos[0] >= 1:
            self.tree[pos] = self.tree[2 * pos] + self.tree[2 * pos + 1]
            if pos[0] == 1:
                break
            pos = np.unique(pos // 2)

    def get(self, idx: np.ndarray) -> np.ndarray:
        return self.tree[idx + self.leaves]

    def total(self) -> float:
        return float(self.tree[1])

    def find(self, mass: np.ndarray) -> np.ndarray:
        pos = np.ones(len(mass), dtype=np.int64)
        while pos[0] < self.leaves:
            left = 2 * pos
            right = mass > self.tree[left]
            mass = mass - right * self.tree[left]
            pos = left + right
        return pos - self.leaves


class Replay:
    """(obs, action, reward, next obs, terminal, boundary) in a ring of ``capacity / N`` steps
    per simulator; n-step returns are summed when sampling."""

    def __init__(self, num_envs: int, s: DQNSettings) -> None:
        self.n, self.s = num_envs, s
        self.len = max(s.n_step + 1, s.capacity // num_envs)
        shape = (self.len, num_envs)
        self.obs = torch.zeros((*shape, 4, 84, 84), dtype=torch.uint8)
        self.next_obs = torch.zeros_like(self.obs)
        self.action = torch.zeros(shape, dtype=torch.int64)
        self.reward = torch.zeros(shape)
        self.term = torch.zeros(shape, dtype=torch.bool)
        self.done = torch.zeros(shape, dtype=torch.bool)
        self.written = 0
        self.tree = SumTree(self.len * num_envs) if s.prioritized else None
        self.max_priority = 1.0

    def add(self, obs, action, reward, next_obs, term, done) -> None:
        p = self.written % self.len
        self.obs[p], self.action[p], self.next_obs[p] = obs, action, next_obs
        self.reward[p], self.term[p], self.done[p] = reward, term, done
        self.written += 1
        if self.tree is not None:
            envs = np.arange(self.n)
            self.tree.set(p * self.n + envs, np.zeros(self.n))  # not sampleable until n-step
            ready = self.written - self.s.n_step
            if ready >= 0:
                q = ready % self.len
                self.tree.set(q * self.n + envs, np.full(self.n, self.max_priority**self.s.alpha))

    def sample(self, batch: int, beta: float):
        n_step, rng = self.s.n_step, np.random
        if self.tree is None:
            lo, hi = max(0, self.written - self.len), self.written - n_step
            steps = rng.randint(lo, hi + 1, size=batch)
            flat = (steps % self.len) * self.n + rng.randint(0, self.n, size=batch)
            weights = None
        else:
            total = self.tree.total()
            mass = (np.arange(batch) + rng.random_sample(batch)) * (total / batch)
            flat = np.minimum(self.tree.find(mass), self.len * self.n - 1)
            prob = self.tree.tree[flat + self.tree.leaves] / total
            valid = min(self.written - n_step + 1, self.len) * self.n
            w = (valid * np.maximum(prob, 1e-12)) ** (-beta)
            weights = torch.from_numpy(w / w.max()).float()
        idx = torch.from_numpy(flat)
        p, e = idx // self.n, idx % self.n
        ret = torch.zeros(batch)
        alive = torch.ones(batch, dtype=torch.bool)
        last, bootstrap, k_used = p.clone(), torch.ones(batch), torch.zeros(batch)
        for k in range(n_step):
            q = (p + k) % self.len
            ret += alive * self.s.gamma**k * self.reward[q, e]
            last = torch.where(alive, q, last)
            bootstrap = torch.where(alive, (~self.term[q, e]).float(), bootstrap)
            k_used = torch.where(alive, torch.full_like(k_used, k + 1), k_used)
            alive = alive & ~self.done[q, e]
        discount = bootstrap * self.s.gamma**k_used
        return (
            self.obs[p, e],
            self.action[p, e],
            ret,
            self.next_obs[last, e],
            discount,
            weights,
            flat,
        )

    def update_priority(self, flat: np.ndarray, priority: np.ndarray) -> None:
        if self.tree is None:
            return
        priority = np.maximum(priority, 1e-6)
        self.max_priority = max(self.max_priority, float(priority.max()))
        self.tree.set(flat, priority**self.s.alpha)


def plain_dqn(
    game: str,
    s: DQNSettings,
    iterations: int,
    *,
    device: str = "cpu",
    threads: int = 1,
    seed: int = 0,
    sticky: float = 0.25,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
) -> list[Record]:
    env, dev = _setup(game, s.num_envs, threads, seed, device, sticky)
    atoms = s.atoms if s.distributional else 1
    online = QNet(env.num_actions, s.dueling, atoms).to(dev)
    target = copy.deepcopy(online).requires_grad_(False)
    opt = torch.optim.Adam(online.parameters(), lr=s.lr, eps=s.adam_eps)
    replay = Replay(s.num_envs, s)
    support = torch.linspace(s.v_min, s.v_max, s.atoms, device=dev)
    dz = (s.v_max - s.v_min) / (s.atoms - 1)
    n, per_batch = s.num_envs, s.training_intensity * s.num_envs * s.steps / s.batch_size
    records: list[Record] = []
    frames, updates, credit, start = 0, 0, 0.0, time.perf_counter()

    def q_values(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        out = net(obs)
        return (out.softmax(-1) * support).sum(-1) if s.distributional else out

    def update() -> None:
        nonlocal updates
        beta = s.beta + min(1.0, frames / s.total_frames) * (1.0 - s.beta)
        obs, action, ret, next_obs, discount, weights, flat = replay.sample(s.batch_size, beta)
        obs, action, ret = obs.to(dev), action.to(dev), ret.to(dev)
        next_obs, discount = next_obs.to(dev), discount.to(dev)
        rows = torch.arange(s.batch_size, device=dev)
        if s.distributional:
            with torch.no_grad():
                # As TorchRL's DistributionalDQNLoss: the online network picks the bootstrap
                # action (double Q-learning, whatever the double flag), the target scores it.
                best = q_values(online, next_obs).argmax(-1)
                p_next = target(next_obs).softmax(-1)[rows, best]
                tz = (ret[:, None] + discount[:, None] * support).clamp(s.v_min, s.v_max)
                b = (tz - s.v_min) / dz
                lo, hi = b.floor().long(), b.ceil().long()
                m = torch.zeros_like(p_next)
                m.scatter_add_(1, lo, p_next * (hi.float() - b + (lo == hi).float()))
                m.scatter_add_(1, hi, p_next * (b - lo.float()))
            log_p = online(obs)[rows, action].log_softmax(-1)
            per_sample = -(m * log_p).sum(-1)
            priority = per_sample.detach()
        else:
            with torch.no_grad():
                next_q = target(next_obs)
                if s.double:
                    best = online(next_obs).argmax(-1)
                    bootstrap = next_q[rows, best]
                else:
                    bootstrap = next_q.max(-1).values
                y = ret + discount * bootstrap
            q = online(obs)[rows, action]
            per_sample = F.smooth_l1_loss(q, y, reduction="none")
            priority = (q - y).detach().abs()
        w = weights.to(dev) if weights is not None else None
        loss = (per_sample * w).mean() if w is not None else per_sample.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(online.parameters(), s.max_grad_norm)
        opt.step()
        updates += 1
        if updates % s.target_update_interval == 0:
            target.load_state_dict(online.state_dict())
        replay.update_priority(flat, priority.cpu().numpy())
        float(loss.detach())  # logged per update by the recipe too

    try:
        for _ in range(iterations):
            eps = s.eps_start + min(1.0, frames / s.eps_decay_frames) * (s.eps_end - s.eps_start)
            for _ in range(s.steps):
                obs = torch.from_numpy(env.obs)
                with torch.no_grad():
                    greedy = q_values(online, obs.to(dev)).argmax(-1).cpu()
                explore = torch.rand(n) < eps
                action = torch.where(explore, torch.randint(env.num_actions, (n,)), greedy)
                obs = obs.clone()  # stored apart from the simulator's array
                reward, term, done, final, truncated = env.step(action.numpy())
                next_obs = torch.from_numpy(env.obs).clone()
                if final is not None:
                    next_obs[torch.from_numpy(truncated)] = torch.from_numpy(final)
                ended = torch.from_numpy(done)
                replay.add(obs, action, torch.from_numpy(reward).float(), next_obs,
                           torch.from_numpy(term), ended)  # fmt: skip
            frames += n * s.steps * FRAMESKIP
            if frames > s.learning_starts:
                credit += per_batch
                while credit >= 1.0:
                    update()
                    credit -= 1.0
            records.append((frames, time.perf_counter() - start))
            if on_iteration is not None:
                on_iteration(frames, env)
    finally:
        env.close()
    return records


# --- command line -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("algo", choices=["ppo", "a2c", "dqn"])
    p.add_argument("--game", default="Pong")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="simulator threads (0: core count)")
    args = p.parse_args(argv)
    from benchmarks.common import cores

    torch.set_num_threads(1)
    threads = args.threads or cores()
    if args.algo == "ppo":
        recs = plain_ppo(args.game, PPOSettings(), args.iterations, device=args.device,
                         threads=threads)  # fmt: skip
    elif args.algo == "a2c":
        recs = plain_a2c(args.game, A2CSettings(), args.iterations, device=args.device,
                         threads=threads)  # fmt: skip
    else:
        s = DQNSettings(learning_starts=0, capacity=50_000)
        recs = plain_dqn(args.game, s, args.iterations, device=args.device, threads=threads)
    for frames, t in recs:
        print(f"{frames:>10,} frames  {t:8.2f} s")
    print(f"steady frames/s (after {args.warmup} warm-up): {steady_fps(recs, args.warmup):,.0f}")
    print(f"({math.nan if not recs else recs[-1][0] / recs[-1][1]:,.0f} including the first)")


if __name__ == "__main__":
    main()
