"""Plain PyTorch training loops over ale-py's ``AtariVectorEnv``: the throughput reference for
the recipes (``benchmarks.run``'s training rows) and the oracle of the parity tests. This module
holds what the Atari loops share (simulators, networks, checkpoints, the batch plan); the loops
are ``reference.atari_actor_critic`` (``plain_ppo``, ``plain_a2c``) and ``reference.atari_dqn``
(``plain_dqn``).

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
``accelrl.algos.catalog.resolve_dqn``, which applies presets), ``cfg.total_frames`` (annealing) and
``cfg.seed``. A renamed field fails here with ``AttributeError``; a setting the loop does not
implement (``life_loss_boundary=False``, APPO's V-trace, DQN's Polyak ``tau``) raises
``ValueError``. Only what has no recipe counterpart is a parameter: ``iterations`` (stop
early), ``device``, the simulator ``threads``, an ``on_iteration`` hook and a ``Checkpoint``
(long learning runs that are stopped and resumed; the DQN loop's carries its replay).

Every loop returns one ``(frames, seconds)`` record per iteration (collection + update), counted
from after its setup, as the recipes' ``metrics.csv`` rows; ``steady_fps`` turns either into
frames/s excluding the first ``warmup`` iterations.

Run one alone: ``python -m reference atari ppo --game Pong --iterations 5 [--device cuda]``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from reference.common import batch_layout, orth, seed_all

if TYPE_CHECKING:  # for annotations only
    from accelrl.config import EnvConfig

Record = tuple[int, float]  # (emulator frames so far, seconds since the loop started)


def steady_fps(records: Sequence[Record], warmup: int) -> float:
    """Frames/s over the records after the first ``warmup`` (which hold setup and warm-up)."""
    if len(records) <= warmup:
        raise ValueError(f"need more than {warmup} records, got {len(records)}")
    (f0, t0), (f1, t1) = (records[warmup - 1] if warmup else (0, 0.0)), records[-1]
    return (f1 - f0) / max(t1 - t0, 1e-9)


def iterations_for(cfg: Any) -> int:
    """Batches until ``cfg.total_frames`` (the recipe stops at the first batch that reaches it)."""
    envs, steps = batch_layout(cfg)
    return math.ceil(cfg.total_frames / (envs * steps * cfg.env.frameskip))


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
        self.ended = ended  # game over or truncated: the next step starts an episode
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


# --- the batch plan of a loop -----------------------------------------------------------------


def setup(
    cfg: Any, iterations: int | None, checkpoint: Checkpoint | None, threads: int, device: str
) -> tuple[VecAtari, torch.device, int, int, range]:
    """Seeds torch and numpy with ``cfg.seed`` and starts the simulators; returns them with the
    device, the steps of each simulator per batch, the frames done and the batches to run:
    ``iterations`` in all (default: until ``cfg.total_frames``), less those a resumed
    ``checkpoint`` has done. A resumed run's simulators start new episodes seeded with
    ``seed + batches done`` (what the recipes do on ``--resume``)."""
    num_envs, steps = batch_layout(cfg)
    iterations = iterations_for(cfg) if iterations is None else iterations
    per_iter = num_envs * steps * cfg.env.frameskip
    frames = checkpoint.frames if checkpoint else 0
    seed_all(cfg.seed)  # numpy: the DQN loop's replay samples with it
    env = VecAtari(cfg.env, num_envs, threads, cfg.seed + frames // per_iter)
    return env, torch.device(device), steps, frames, range(frames // per_iter, iterations)


class BatchLog:
    """What a loop does around its batches. Made (after the loop's model and optimizer), it
    restores a resumed ``checkpoint`` into ``model`` and ``opt`` (``restored``: the loop's own
    part, empty on a fresh start); after each batch, ``done`` keeps a ``(frames, seconds)``
    record (seconds since this object was made), calls the ``on_iteration`` hook and saves
    ``checkpoint`` when a save is due, with ``extra()`` (the loop's own state) when given."""

    def __init__(
        self,
        env: VecAtari,
        model: nn.Module,
        opt: torch.optim.Optimizer,
        on_iteration: Callable[[int, VecAtari], None] | None,
        checkpoint: Checkpoint | None,
        extra: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.env, self.model, self.opt, self.extra = env, model, opt, extra
        self.on_iteration, self.checkpoint = on_iteration, checkpoint
        self.restored = checkpoint.restore(model, opt) if checkpoint else {}
        self.records: list[Record] = []
        self.start = time.perf_counter()

    def done(self, frames: int) -> None:
        self.records.append((frames, time.perf_counter() - self.start))
        if self.on_iteration is not None:
            self.on_iteration(frames, self.env)
        if self.checkpoint:
            self.checkpoint.step(frames, self.model, self.opt, self.extra)
