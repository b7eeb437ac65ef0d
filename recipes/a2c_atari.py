"""A2C on Atari (Mnih et al. 2016, synchronous), batched as in Stooke & Abbeel (2018).

    python recipes/a2c_atari.py                        # Pong, 10M frames, 16 envs x 5 steps
    python recipes/a2c_atari.py --env.num-envs 64 --collector.frames-per-batch 320 --a2c.lr 1.4e-3
    python recipes/a2c_atari.py --help                 # every knob

Import it to reuse: ``from recipes.a2c_atari import Config, train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from accelrl.algos.a2c import A2C, A2CConfig, validate_a2c
from accelrl.cli import run_recipe
from accelrl.config import (
    CollectorConfig,
    EnvConfig,
    RunConfig,
    require_whole_trajectories,
    validate_common,
)
from accelrl.models import make_actor_critic
from accelrl.runner import Run


@dataclass
class Config(RunConfig):
    """A2C on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    env: EnvConfig = field(default_factory=lambda: EnvConfig(num_envs=16))
    a2c: A2CConfig = field(default_factory=A2CConfig)
    collector: CollectorConfig = field(default_factory=lambda: CollectorConfig(frames_per_batch=80))
    """Default batch: 80 agent steps = 16 envs x 5 steps."""


def validate(cfg: Config) -> None:
    """Every check, before any simulator or worker starts."""
    validate_common(cfg)
    validate_a2c(cfg.a2c)
    require_whole_trajectories(cfg.env, "A2C")


def make_agent(cfg: Config, env_spec: dict, device: torch.device) -> A2C:
    """The actor-critic (one Nature CNN shared by both heads on frames, two MLPs on vector
    inputs) and its A2C learner; ``accelrl.play`` rebuilds a trained agent with it."""
    model = make_actor_critic(**env_spec, mlp_hidden=cfg.model.mlp_hidden).to(device)
    return A2C(model, cfg.a2c, device)


def train(cfg: Config) -> dict:
    """Train A2C; returns final frames, updates, episodes, mean return of the last 100, frames/s."""
    validate(cfg)
    run = Run(cfg, algo="a2c")

    a2c = make_agent(cfg, run.env_spec, run.device)
    run.attach(policy=a2c.actor, a2c=a2c)

    # Each iteration: every simulator steps T times with the current policy (one batched forward
    # pass gives all actions and state values), then n-step returns (or GAE) and one gradient
    # step on the whole batch (``A2C.update``).
    return run.train_on_policy(a2c)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
