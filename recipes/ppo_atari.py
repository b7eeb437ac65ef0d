"""PPO on Atari (Schulman et al. 2017), batched as in Stooke & Abbeel (2018).

    python recipes/ppo_atari.py                        # Pong, 10M frames
    python recipes/ppo_atari.py --env.game Breakout --env.num-envs 16 --collector.num-workers 2
    python recipes/ppo_atari.py --help                 # every knob

Import it to reuse: ``from recipes.ppo_atari import Config, train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from accelrl.algos.ppo import PPO, PPOConfig, validate_ppo
from accelrl.cli import run_recipe
from accelrl.config import (
    CollectorConfig,
    RunConfig,
    require_whole_trajectories,
    validate_common,
)
from accelrl.models import make_actor_critic
from accelrl.runner import Run


@dataclass
class Config(RunConfig):
    """PPO on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    ppo: PPOConfig = field(default_factory=PPOConfig)
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(frames_per_batch=1024)
    )
    """Default batch: 1024 agent steps = 8 envs x 128 steps."""


def validate(cfg: Config) -> None:
    """Every check, before any simulator or worker starts."""
    validate_common(cfg)
    validate_ppo(cfg.ppo, cfg.collector.frames_per_batch)
    require_whole_trajectories(cfg.env, "PPO")


def make_agent(cfg: Config, env_spec: dict, device: torch.device) -> PPO:
    """The actor-critic (one Nature CNN shared by both heads on frames, two MLPs on vector
    inputs) and its PPO learner; ``accelrl.play`` rebuilds a trained agent with it."""
    model = make_actor_critic(**env_spec, mlp_hidden=cfg.model.mlp_hidden).to(device)
    return PPO(model, cfg.ppo, device)


def train(cfg: Config) -> dict:
    """Train PPO; returns final frames, updates, episodes, mean return of the last 100, frames/s."""
    validate(cfg)
    run = Run(cfg, algo="ppo")

    ppo = make_agent(cfg, run.env_spec, run.device)
    run.attach(policy=ppo.actor, ppo=ppo)

    # Each iteration: every simulator steps T times with the current policy (one batched forward
    # pass gives all actions and state values), then GAE over the batch and epochs x minibatches
    # of clipped policy/value updates (``PPO.update``).
    return run.train_on_policy(ppo)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
