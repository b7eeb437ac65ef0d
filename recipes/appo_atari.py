"""Asynchronous PPO on Atari: sampling and optimisation at the same time (Stooke & Abbeel 2018).

Worker processes keep stepping their simulators with the weights they hold while the learner
runs PPO epochs on the batch another worker just finished (TorchRL's ``MultiAsyncCollector``).
Batches lag the learner by a few updates: the lag is logged (``async/policy_lag_*``), bounded by
``--collector.max-policy-lag`` and optionally corrected with V-trace (``--appo.vtrace``).

    python recipes/appo_atari.py                               # Pong, 2 workers x 8 envs
    python recipes/appo_atari.py --collector.num-workers 4 --appo.vtrace
    python recipes/appo_atari.py --help                        # every knob

Import it to reuse: ``from recipes.appo_atari import Config, train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from accelrl.algos.ppo import PPO, APPOConfig, validate_ppo
from accelrl.cli import run_recipe
from accelrl.config import CollectorConfig, RunConfig, require_whole_trajectories, validate_common
from accelrl.models import make_actor_critic
from accelrl.runner import Run


@dataclass
class Config(RunConfig):
    """APPO on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    appo: APPOConfig = field(default_factory=APPOConfig)
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(kind="async", num_workers=2, frames_per_batch=1024)
    )
    """Default: 2 worker processes; each batch is one worker's 8 envs x 128 steps."""


def validate(cfg: Config) -> None:
    """Every check, before any simulator or worker starts."""
    validate_common(cfg)
    validate_ppo(cfg.appo, cfg.collector.frames_per_batch, prefix="appo")
    require_whole_trajectories(cfg.env, "APPO")


def make_agent(cfg: Config, env_spec: dict, device: torch.device) -> PPO:
    """The actor-critic (one Nature CNN shared by both heads on frames, two MLPs on vector
    inputs) and its APPO learner; ``accelrl.play`` rebuilds a trained agent with it."""
    model = make_actor_critic(**env_spec, mlp_hidden=cfg.model.mlp_hidden).to(device)
    return PPO(model, cfg.appo, device)


def train(cfg: Config) -> dict:
    """Train APPO; returns frames, updates, episodes, mean return of the last 100, frames/s."""
    validate(cfg)
    run = Run(cfg, algo="appo")

    appo = make_agent(cfg, run.env_spec, run.device)
    run.attach(policy=appo.actor, appo=appo)

    # Each iteration: take the next batch any worker finished (acted by weights up to
    # max_policy_lag updates old), recompute values with the current critic, GAE or V-trace
    # targets, epochs x minibatches of clipped updates; the new weights go to the workers
    # while they keep collecting.
    return run.train_on_policy(appo)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
