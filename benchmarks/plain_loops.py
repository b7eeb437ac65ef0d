"""Plain PyTorch training loops over ale-py's ``AtariVectorEnv``: the throughput reference for
the recipes (``benchmarks.run``'s training rows).

Written the way a single-file implementation (CleanRL-style) would be: numpy arrays from the
simulator, torch tensors, one ``nn.Module``, no TensorDict, no TorchRL, no accelrl runtime code
(only its game-name lookup and the config's batch arithmetic). Each loop uses the same simulator
settings as accelrl's ``ale_vec`` backend (by default frameskip 4 with max-pool, 84x84
grayscale, 4-frame stack, up to 30 no-ops, FIRE on reset, sticky actions 0.25; SameStep
autoreset), the same Nature CNN (conv 32x8s4, 64x4s2, 64x3s1, 512 units) and the matching
recipe's hyperparameters, and does the same work per step and per update as the recipe:

- ``plain_ppo``: T steps of every simulator (one forward pass per step gives actions,
  log-probabilities and values), GAE with lost lives as bootstrap boundaries (a truncated
  episode bootstraps from its final frame), then epochs x minibatches of the clipped policy
  loss, clipped value loss and entropy bonus, gradient-norm clipping, Adam; learning rate and clip
  range annealed; approximate KL and clip fraction per minibatch (logged by the recipes too).
- ``plain_a2c``: T steps, n-step returns, one Adam (or TensorFlow-form RMSprop) step on the batch.
- ``plain_dqn``: epsilon-greedy acting (the Q-network runs for every step, as accelrl's
  ``EGreedyModule`` does), a uniform replay of (obs, next obs) stacks in a ring per simulator, or
  with ``prioritized`` a numpy sum tree; ``double``, ``dueling``, ``n_step`` and
  ``distributional`` (C51; the online network always picks the bootstrap action, as TorchRL's
  ``DistributionalDQNLoss`` does) as the DQN recipe's flags; Huber loss, Adam, hard target
  copies, ``training_intensity`` replayed samples per collected sample.

Every loop takes the recipe's own ``Config`` (``recipes/<algo>_atari.py``; plain dataclasses)
and reads its hyperparameters there, so one config drives the recipe and its plain loop: the
simulators and preprocessing from ``cfg.env``, the batch from ``cfg.collector.steps_per_batch``
(over ``accelrl.config.rows_per_batch`` simulators), the algorithm's section (``cfg.ppo``, or
``cfg.appo`` with ``section="appo"``; ``cfg.a2c``; ``cfg.dqn``, resolved first by
``recipes.dqn_atari.resolve``, which applies presets), ``cfg.total_frames`` (annealing) and
``cfg.seed``. A renamed field fails here with ``AttributeError``; a setting the loop does not
implement (``life_loss_boundary=False``, A2C with Adam, APPO's V-trace, DQN's Polyak ``tau``)
raises ``ValueError``. Only what has no recipe counterpart is a parameter: ``iterations`` (stop
early), ``device``, the simulator ``threads``, an ``on_iteration`` hook and, for PPO and A2C, a
``Checkpoint`` (long learning runs that are stopped and resumed; the DQN loop's carries its replay).

Every loop returns one ``(frames, seconds)`` record per iteration (collection + update), counted
from after its setup, as the recipes' ``metrics.csv`` rows; ``steady_fps`` turns either into
frames/s excluding the first ``warmup`` iterations.

Run one alone: ``python -m benchmarks.plain_loops ppo --game Pong --iterations 5 [--device cuda]``.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from accelrl.config import rows_per_batch  # config arithmetic (accelrl.config is data only)

if TYPE_CHECKING:  # the recipes' config dataclasses, for annotations only
    from accelrl.algos.dqn import DQNConfig
    from accelrl.config import EnvConfig
    from recipes.a2c_atari import Config as A2CRecipeConfig
    from recipes.appo_atari import Config as APPORecipeConfig
    from recipes.dqn_atari import Config as DQNRecipeConfig
    from recipes.ppo_atari import Config as PPORecipeConfig

Record = tuple[int, float]  # (emulator frames so far, seconds since the loop started)


def steady_fps(records: Sequence[Record], warmup: int) -> float:
    """Frames/s over the records after the first ``warmup`` (which hold setup and warm-up)."""
    if len(records) <= warmup:
        raise ValueError(f"need more than {warmup} records, got {len(records)}")
    (f0, t0), (f1, t1) = (records[warmup - 1] if warmup else (0, 0.0)), records[-1]
    return (f1 - f0) / max(t1 - t0, 1e-9)


def batch_layout(cfg: Any) -> tuple[int, int]:
    """(simulators, steps of each) in one batch of a recipe's config: ``steps_per_batch`` agent
    steps over every env of every worker (one worker's envs with collector kind async), all in
    this process for a plain loop."""
    envs = rows_per_batch(cfg.env, cfg.collector)
    if cfg.collector.steps_per_batch % envs:
        raise ValueError(
            f"collector.steps_per_batch={cfg.collector.steps_per_batch} is not a multiple of the "
            f"{envs} simulators of a batch"
        )
    return envs, cfg.collector.steps_per_batch // envs


def iterations_for(cfg: Any) -> int:
    """Batches until ``cfg.total_frames`` (the recipe stops at the first batch that reaches it)."""
    envs, steps = batch_layout(cfg)
    return math.ceil(cfg.total_frames / (envs * steps * cfg.env.frameskip))


def require(section: str, values: Any, **implemented: Any) -> None:
    """``ValueError`` for a setting the plain loop does not implement (``section.name`` away from
    the one value it does)."""
    for name, value in implemented.items():
        if getattr(values, name) != value:
            raise ValueError(
                f"{section}.{name}={getattr(values, name)!r}: the plain loop implements only "
                f"{value!r}"
            )


# --- simulators -------------------------------------------------------------------------------


class VecAtari:
    """``AtariVectorEnv`` with DeepMind preprocessing in C++ as ``env`` (an ``EnvConfig``: the
    recipe's ``cfg.env``) describes it, plus life-loss and reward-sign bookkeeping in numpy.
    ``obs`` is the current uint8 batch ``[N, frame_stack, screen, screen]``."""

    def __init__(self, env: EnvConfig, num_envs: int, threads: int, seed: int):
        from ale_py.vector_env import AtariVectorEnv

        from accelrl.envs.games import rom_id
        from accelrl.envs.gym_atari import sticky_actions

        self.env = AtariVectorEnv(
            rom_id(env.game),
            num_envs,
            num_threads=threads,
            autoreset_mode="SameStep",
            frameskip=env.frameskip,
            stack_num=env.frame_stack,
            img_height=env.screen_size,
            img_width=env.screen_size,
            repeat_action_probability=sticky_actions(env),
            reward_clipping=False,
            episodic_life=False,
            noop_max=env.noop_max,
            use_fire_reset=env.fire_reset,
            max_num_frames_per_episode=env.max_episode_frames,
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
        # env.fire_on_life_loss: FIRE replaces the agent's action on the step after a lost life.
        self.fire = None
        if env.fire_on_life_loss:
            from accelrl.envs.ale_vec import fire_action_index

            self.fire = fire_action_index(env.game)
        self.fire_due = np.zeros(num_envs, dtype=bool)

    def step(self, actions: np.ndarray):
        """Returns (reward sign, terminated-or-life-lost, ended-or-life-lost, final obs of
        truncated rows or None, truncated mask)."""
        if self.fire is not None and self.fire_due.any():
            actions = np.where(self.fire_due, self.fire, actions)
        obs, reward, terminated, truncated, info = self.env.step(actions)
        ended = terminated | truncated
        lives = info["lives"]
        life_lost = (lives < self.lives) & ~ended
        self.fire_due = life_lost
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


def orth(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    """Orthogonal weights, zero bias: the Atari init of OpenAI baselines and CleanRL, and the
    recipes' (``accelrl.models``). With PyTorch's default init instead, the plain A2C loop
    (Adam) stayed at random play on Breakout for 1M frames while the recipe reached 5.5."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def nature_convs(frame_stack: int = 4) -> nn.Sequential:
    return nn.Sequential(
        orth(nn.Conv2d(frame_stack, 32, 8, stride=4)),
        nn.ReLU(),
        orth(nn.Conv2d(32, 64, 4, stride=2)),
        nn.ReLU(),
        orth(nn.Conv2d(64, 64, 3, stride=1)),
        nn.ReLU(),
        nn.Flatten(),
    )


def nature_features(screen_size: int) -> int:
    """Outputs of ``nature_convs`` for square frames (3136 at 84x84)."""
    for kernel, stride in ((8, 4), (4, 2), (3, 1)):
        screen_size = (screen_size - kernel) // stride + 1
    return 64 * screen_size * screen_size


class ActorCritic(nn.Module):
    def __init__(self, num_actions: int, frame_stack: int = 4, screen_size: int = 84) -> None:
        super().__init__()
        features = nature_features(screen_size)
        self.trunk = nn.Sequential(
            nature_convs(frame_stack), orth(nn.Linear(features, 512)), nn.ReLU()
        )
        self.pi = orth(nn.Linear(512, num_actions), 0.01)
        self.v = orth(nn.Linear(512, 1), 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs.to(self.pi.weight.dtype) / 255.0)
        return self.pi(h), self.v(h).squeeze(-1)


class QNet(nn.Module):
    """Nature convs, then a 512-unit advantage stream (and value stream when dueling) giving
    ``[B, A]`` Q-values or ``[B, A, atoms]`` logits."""

    def __init__(
        self,
        num_actions: int,
        dueling: bool,
        atoms: int,
        frame_stack: int = 4,
        screen_size: int = 84,
    ) -> None:
        super().__init__()
        self.num_actions, self.atoms = num_actions, atoms
        self.convs = nature_convs(frame_stack)
        features = nature_features(screen_size)

        def stream(out: int) -> nn.Module:
            return nn.Sequential(
                orth(nn.Linear(features, 512)), nn.ReLU(), orth(nn.Linear(512, out), 1.0)
            )

        self.adv = stream(num_actions * atoms)
        self.val = stream(atoms) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.convs(obs.float() / 255.0)
        q = self.adv(x).view(-1, self.num_actions, self.atoms)
        if self.val is not None:
            q = self.val(x).view(-1, 1, self.atoms) + q - q.mean(1, keepdim=True)
        return q.squeeze(-1) if self.atoms == 1 else q


# --- PPO and A2C ------------------------------------------------------------------------------


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


class Checkpoint:
    """Model, optimizer, frames done and torch's RNG of a plain loop (and what else the loop
    hands over: the DQN loop's target network, replay and numpy RNG), saved to ``path`` every
    ``every_frames`` (to a temporary file, then renamed: a kill leaves the previous one whole)
    and restored by a loop given this object. A vector env cannot be saved, so a resumed loop
    starts new episodes, its simulators seeded with ``seed + iterations done`` (what the recipes
    do on ``--resume``). ``settings`` (the config's text) must match on resume."""

    def __init__(self, path: Path, every_frames: int, settings: str, resume: bool) -> None:
        self.path, self.every, self.settings = Path(path), every_frames, settings
        self.state: dict[str, Any] | None = None
        if self.path.exists() and not resume:
            raise SystemExit(
                f"{self.path} exists: pass --resume to continue that run, or use a new run folder"
            )
        if resume:
            if not self.path.exists():
                raise SystemExit(f"--resume: no checkpoint at {self.path}; start without --resume")
            # mmap: the DQN loop's replay (5.6 GB at 100k transitions) is copied in, not read twice
            self.state = torch.load(self.path, map_location="cpu", weights_only=True, mmap=True)
            if self.state["settings"] != settings:
                raise SystemExit(
                    f"--resume: {self.path} was written with other settings:\n"
                    f"{self.state['settings']}\nnow:\n{settings}"
                )
        self.frames = int(self.state["frames"]) if self.state else 0
        self.saved = self.frames

    def restore(self, model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
        """Loads the saved state into ``model`` and ``opt``; returns the loop's own part (what
        ``step``'s ``extra`` gave; empty on a fresh start)."""
        if self.state is None:
            return {}
        model.load_state_dict(self.state["model"])
        opt.load_state_dict(self.state["optimizer"])
        torch.set_rng_state(self.state["rng"])
        extra, self.state = self.state.get("extra", {}), None
        return extra

    def step(
        self,
        frames: int,
        model: nn.Module,
        opt: torch.optim.Optimizer,
        extra: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """Saves when ``every_frames`` have passed since the last save, with ``extra()`` (the
        loop's own state) when given."""
        if frames - self.saved < self.every:
            return
        state = {"frames": frames, "model": model.state_dict(), "optimizer": opt.state_dict(),
                 "rng": torch.get_rng_state(), "settings": self.settings,
                 "extra": extra() if extra is not None else {}}  # fmt: skip
        tmp = self.path.with_name(self.path.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)
        self.saved = frames


def _setup(
    cfg: Any, num_envs: int, threads: int, device: str, done_iterations: int = 0
) -> tuple[VecAtari, torch.device]:
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)  # the DQN loop's replay samples with numpy
    env = VecAtari(cfg.env, num_envs, threads, cfg.seed + done_iterations)
    return env, torch.device(device)


def ppo_phase(
    model: ActorCritic,
    opt: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, ...],
    p: Any,
    clip: float,
) -> torch.Tensor:
    """PPO's epochs x minibatches on ``batch`` = (obs, actions, log-probs, advantages, returns,
    values) of ``[N]`` steps: clipped policy loss, (clipped) value loss, entropy bonus, grad-norm
    clipping, one optimizer step per minibatch. ``p``: the recipe's ``cfg.ppo`` (or ``cfg.appo``).
    Returns the summed (approximate KL, clip fraction, grad norm) over the minibatches."""
    b_obs, b_act, b_logp, b_adv, b_ret, b_val = batch
    n = b_act.shape[0]
    mb = n // p.minibatches
    stats = torch.zeros(3, dtype=b_adv.dtype, device=b_adv.device)
    for _ in range(p.epochs):
        order = torch.randperm(n, device=b_adv.device)
        for i in range(0, n, mb):
            idx = order[i : i + mb]
            logits, value = model(b_obs[idx])
            dist = torch.distributions.Categorical(logits=logits)
            logp = dist.log_prob(b_act[idx])
            log_ratio = logp - b_logp[idx]
            ratio = log_ratio.exp()
            a = b_adv[idx]
            if p.normalize_advantage:
                a = (a - a.mean()) / (a.std() + 1e-8)
            pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
            v_loss = (value - b_ret[idx]) ** 2
            if p.clip_value:
                v_clipped = b_val[idx] + (value - b_val[idx]).clamp(-clip, clip)
                v_loss = torch.max(v_loss, (v_clipped - b_ret[idx]) ** 2)
            v_loss = 0.5 * v_loss.mean()
            loss = pg - p.entropy_coef * dist.entropy().mean() + p.value_coef * v_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), p.max_grad_norm)
            opt.step()
            with torch.no_grad():
                kl = ((ratio - 1) - log_ratio).mean()
                clipped = ((ratio - 1).abs() > clip).float().mean()
                stats += torch.stack([kl, clipped, grad_norm])
    return stats


def plain_ppo(
    cfg: PPORecipeConfig | APPORecipeConfig,
    iterations: int | None = None,
    *,
    section: str = "ppo",
    device: str = "cpu",
    threads: int = 1,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> list[Record]:
    """PPO with ``cfg``'s settings (``cfg.<section>``: ``ppo``, or ``appo`` for APPO's PPO
    objective) for ``iterations`` batches (default: until ``cfg.total_frames``; a resumed
    ``checkpoint`` counts the batches it has done)."""
    p = getattr(cfg, section)
    require(section, p, life_loss_boundary=True)
    if section == "appo":
        require(section, p, vtrace=False)
    num_envs, steps = batch_layout(cfg)
    iterations = iterations_for(cfg) if iterations is None else iterations
    per_iter = num_envs * steps * cfg.env.frameskip
    frames = checkpoint.frames if checkpoint else 0
    env, dev = _setup(cfg, num_envs, threads, device, frames // per_iter)
    model = ActorCritic(env.num_actions, cfg.env.frame_stack, cfg.env.screen_size).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=p.lr, eps=p.adam_eps)
    if checkpoint:
        checkpoint.restore(model, opt)
    rollout = Rollout(env, model, steps, dev)
    n = num_envs * steps
    records: list[Record] = []
    start = time.perf_counter()
    try:
        for _ in range(frames // per_iter, iterations):
            remaining = max(0.0, 1.0 - frames / cfg.total_frames)
            for group in opt.param_groups:
                group["lr"] = p.lr * (remaining if p.anneal_lr else 1.0)
            clip = max(p.clip_epsilon * (remaining if p.anneal_clip else 1.0), 1e-8)
            last_value = rollout.collect()
            adv = rollout.advantages(last_value, p.gamma, p.gae_lambda)
            returns = adv + rollout.values
            batch = (rollout.obs.reshape(n, *env.obs.shape[1:]), rollout.actions.reshape(n),
                     rollout.logp.reshape(n), adv.reshape(n), returns.reshape(n),
                     rollout.values.reshape(n))  # fmt: skip
            # The metrics reach the host once per update, as the recipe's.
            ppo_phase(model, opt, batch, p, clip).tolist()
            frames += n * cfg.env.frameskip
            records.append((frames, time.perf_counter() - start))
            if on_iteration is not None:
                on_iteration(frames, env)
            if checkpoint:
                checkpoint.step(frames, model, opt)
    finally:
        env.close()
    return records


def a2c_loss(
    model: ActorCritic, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, a: Any
) -> torch.Tensor:
    """A2C's loss on ``[N]`` steps: policy gradient with advantage ``returns - V`` (V from this
    forward pass, detached), ``a.value_coef`` x squared value error, ``a.entropy_coef`` x
    entropy bonus. ``a``: the recipe's ``cfg.a2c``."""
    logits, value = model(obs)
    dist = torch.distributions.Categorical(logits=logits)
    adv = returns - value.detach()
    if a.normalize_advantage:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = -(dist.log_prob(actions) * adv).mean()
    loss = pg + a.value_coef * ((returns - value) ** 2).mean()
    return loss - a.entropy_coef * dist.entropy().mean()


def plain_a2c(
    cfg: A2CRecipeConfig,
    iterations: int | None = None,
    *,
    device: str = "cpu",
    threads: int = 1,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> list[Record]:
    """A2C with ``cfg``'s settings (``cfg.a2c``) for ``iterations`` batches (default: until
    ``cfg.total_frames``; a resumed ``checkpoint`` counts the batches it has done)."""
    a = cfg.a2c
    require("a2c", a, life_loss_boundary=True)
    num_envs, steps = batch_layout(cfg)
    iterations = iterations_for(cfg) if iterations is None else iterations
    per_iter = num_envs * steps * cfg.env.frameskip
    frames = checkpoint.frames if checkpoint else 0
    env, dev = _setup(cfg, num_envs, threads, device, frames // per_iter)
    model = ActorCritic(env.num_actions, cfg.env.frame_stack, cfg.env.screen_size).to(dev)
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=a.eps)
    else:
        # TensorFlow's RMSprop (eps inside the square root, average from one), as OpenAI
        # baselines' A2C uses; PyTorch's form takes far larger early steps.
        from benchmarks.plain_classic import RMSpropTF

        opt = RMSpropTF(model.parameters(), lr=a.lr, alpha=a.rms_alpha, eps=a.eps)
    if checkpoint:
        checkpoint.restore(model, opt)
    rollout = Rollout(env, model, steps, dev)
    n = num_envs * steps
    records: list[Record] = []
    start = time.perf_counter()
    try:
        for _ in range(frames // per_iter, iterations):
            remaining = max(0.0, 1.0 - frames / cfg.total_frames)
            for group in opt.param_groups:
                group["lr"] = a.lr * (remaining if a.anneal_lr else 1.0)
            last_value = rollout.collect()
            adv = rollout.advantages(last_value, a.gamma, a.gae_lambda)
            returns = (adv + rollout.values).reshape(n)
            obs = rollout.obs.reshape(n, *env.obs.shape[1:])
            loss = a2c_loss(model, obs, rollout.actions.reshape(n), returns, a)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm)
            opt.step()
            float(loss.detach()), float(grad_norm)  # logged per update by the recipe too
            frames += n * cfg.env.frameskip
            records.append((frames, time.perf_counter() - start))
            if on_iteration is not None:
                on_iteration(frames, env)
            if checkpoint:
                checkpoint.step(frames, model, opt)
    finally:
        env.close()
    return records


# --- DQN family -------------------------------------------------------------------------------


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
    """(obs, action, reward, next obs, terminal, boundary) in a ring of ``replay_capacity / N``
    steps per simulator; n-step returns are summed when sampling. ``d``: the recipe's
    ``cfg.dqn``."""

    def __init__(self, num_envs: int, d: DQNConfig, obs_shape: Sequence[int]) -> None:
        self.n, self.s = num_envs, d
        self.len = max(d.n_step + 1, d.replay_capacity // num_envs)
        shape = (self.len, num_envs)
        self.obs = torch.zeros((*shape, *obs_shape), dtype=torch.uint8)
        self.next_obs = torch.zeros_like(self.obs)
        self.action = torch.zeros(shape, dtype=torch.int64)
        self.reward = torch.zeros(shape)
        self.term = torch.zeros(shape, dtype=torch.bool)
        self.done = torch.zeros(shape, dtype=torch.bool)
        self.written = 0
        self.tree = SumTree(self.len * num_envs) if d.prioritized else None
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
                value = self.max_priority**self.s.priority_alpha
                self.tree.set(q * self.n + envs, np.full(self.n, value))

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

    def state_dict(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in self._ARRAYS}
        state.update(written=self.written, max_priority=self.max_priority)
        if self.tree is not None:
            state["tree"] = torch.from_numpy(self.tree.tree)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._ARRAYS:
            getattr(self, name).copy_(state[name])
        self.written, self.max_priority = int(state["written"]), float(state["max_priority"])
        if self.tree is not None:
            self.tree.tree[:] = state["tree"].numpy()
        if self.written:
            # The resumed simulators start new episodes: an n-step sum stops at the last stored
            # step and bootstraps from its stored next obs (a truncation, not a terminal).
            self.done[(self.written - 1) % self.len] = True

    _ARRAYS = ("obs", "next_obs", "action", "reward", "term", "done")

    def update_priority(self, flat: np.ndarray, priority: np.ndarray) -> None:
        if self.tree is None:
            return
        priority = np.maximum(priority, 1e-6)
        self.max_priority = max(self.max_priority, float(priority.max()))
        self.tree.set(flat, priority**self.s.priority_alpha)


def plain_dqn(
    cfg: DQNRecipeConfig,
    iterations: int | None = None,
    *,
    device: str = "cpu",
    threads: int = 1,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> list[Record]:
    """The DQN family with ``cfg``'s settings (``cfg.dqn``, presets already applied by
    ``recipes.dqn_atari.resolve``) for ``iterations`` batches (default: until
    ``cfg.total_frames``; a resumed ``checkpoint`` counts the batches it has done and brings
    back the target network, the replay, the update count and numpy's RNG)."""
    s = cfg.dqn
    require("dqn", s, tau=0.0, life_loss_boundary=True)
    n, steps = batch_layout(cfg)
    iterations = iterations_for(cfg) if iterations is None else iterations
    per_iter = n * steps * cfg.env.frameskip
    frames = checkpoint.frames if checkpoint else 0
    env, dev = _setup(cfg, n, threads, device, frames // per_iter)
    atoms = s.atoms if s.distributional else 1
    online = QNet(env.num_actions, s.dueling, atoms, cfg.env.frame_stack, cfg.env.screen_size)
    online = online.to(dev)
    target = copy.deepcopy(online).requires_grad_(False)
    opt = torch.optim.Adam(online.parameters(), lr=s.lr, eps=s.adam_eps)
    replay = Replay(n, s, env.obs.shape[1:])
    support = torch.linspace(s.v_min, s.v_max, s.atoms, device=dev)
    dz = (s.v_max - s.v_min) / (s.atoms - 1)
    per_batch = s.training_intensity * n * steps / s.batch_size
    records: list[Record] = []
    updates, credit = 0, 0.0
    if checkpoint:
        saved = checkpoint.restore(online, opt)
        if saved:
            target.load_state_dict(saved["target"])
            replay.load_state_dict(saved["replay"])
            updates, credit = int(saved["updates"]), float(saved["credit"])
            np.random.set_state(("MT19937", saved["np_rng"].numpy().astype(np.uint32),
                                 int(saved["np_pos"]), 0, 0.0))  # fmt: skip

    def loop_state() -> dict[str, Any]:
        _, keys, pos, *_ = np.random.get_state()
        return {"target": target.state_dict(), "replay": replay.state_dict(),
                "updates": updates, "credit": credit,
                "np_rng": torch.from_numpy(keys.astype(np.int64)), "np_pos": int(pos)}  # fmt: skip

    start = time.perf_counter()

    def q_values(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        out = net(obs)
        return (out.softmax(-1) * support).sum(-1) if s.distributional else out

    def update() -> None:
        nonlocal updates
        beta = s.priority_beta + min(1.0, frames / cfg.total_frames) * (1.0 - s.priority_beta)
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
        for _ in range(frames // per_iter, iterations):
            eps = s.eps_start + min(1.0, frames / s.eps_decay_frames) * (s.eps_end - s.eps_start)
            for _ in range(steps):
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
            frames += per_iter
            if frames > s.learning_starts_frames:
                credit += per_batch
                while credit >= 1.0:
                    update()
                    credit -= 1.0
            records.append((frames, time.perf_counter() - start))
            if on_iteration is not None:
                on_iteration(frames, env)
            if checkpoint:
                checkpoint.step(frames, online, opt, loop_state)
    finally:
        env.close()
    return records


# --- command line -----------------------------------------------------------------------------


def recipe_config(algo: str, game: str) -> Any:
    """The recipe's default ``Config`` for ``game`` (resolved for DQN), with DQN learning from
    the first batch in a 50k-transition replay (the command line's short runs)."""
    import importlib

    recipe = importlib.import_module(f"recipes.{algo}_atari")
    cfg = recipe.Config()
    cfg.env.game = game
    if algo == "dqn":
        cfg.dqn.learning_starts_frames = 0
        cfg.dqn.replay_capacity = 50_000
        cfg = recipe.resolve(cfg)
    return cfg


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
    loop = {"ppo": plain_ppo, "a2c": plain_a2c, "dqn": plain_dqn}[args.algo]
    cfg = recipe_config(args.algo, args.game)
    recs = loop(cfg, args.iterations, device=args.device, threads=args.threads or cores())
    for frames, t in recs:
        print(f"{frames:>10,} frames  {t:8.2f} s")
    print(f"steady frames/s (after {args.warmup} warm-up): {steady_fps(recs, args.warmup):,.0f}")
    print(f"({math.nan if not recs else recs[-1][0] / recs[-1][1]:,.0f} including the first)")


if __name__ == "__main__":
    main()
