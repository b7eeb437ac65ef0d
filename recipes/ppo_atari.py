"""PPO on Atari (Schulman et al. 2017), batched as in Stooke & Abbeel (2018).

    python recipes/ppo_atari.py                        # Pong, 10M frames
    python recipes/ppo_atari.py --env.game Breakout --env.num-envs 16 --collector.num-workers 2
    python recipes/ppo_atari.py --help                 # every knob

Import it to reuse: ``from recipes.ppo_atari import Config, train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelrl.algos.ppo import PPO, PPOConfig, validate_ppo
from accelrl.cli import run_recipe
from accelrl.collect import make_collector
from accelrl.config import (
    CollectorConfig,
    EnvConfig,
    LogConfig,
    ModelConfig,
    ThreadsConfig,
    require_whole_trajectories,
    validate_common,
)
from accelrl.models import make_actor_critic
from accelrl.runner import Run, describe_env


@dataclass
class Config:
    """PPO on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    env: EnvConfig = field(default_factory=EnvConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(frames_per_batch=1024)
    )
    """Default batch: 8 envs x 128 steps."""
    model: ModelConfig = field(default_factory=ModelConfig)
    threads: ThreadsConfig = field(default_factory=ThreadsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    total_frames: int = 10_000_000
    """Emulator frames to train for (agent steps x frameskip)."""
    device: str = "auto"
    """Learner device: auto (cuda if available), cpu, cuda, cuda:N."""
    seed: int = 0
    run_dir: str | None = None
    """Folder for config, metrics.csv, TensorBoard events and checkpoints (default runs/...)."""
    resume: bool = False
    """Continue the run in --run-dir from its latest checkpoint."""


def train(cfg: Config) -> dict:
    """Train PPO; returns final frames, updates, episodes, mean return of the last 100, frames/s."""
    validate_common(cfg)
    validate_ppo(cfg.ppo, cfg.collector.frames_per_batch)
    require_whole_trajectories(cfg.env, "PPO")
    run = Run(cfg, algo="ppo")

    # Actor-critic with a shared trunk (Nature CNN on frames, MLP on vector observations).
    spec = describe_env(cfg.env)
    model = make_actor_critic(
        spec["obs_key"], spec["obs_shape"], spec["num_actions"], mlp_hidden=cfg.model.mlp_hidden
    ).to(run.device)
    ppo = PPO(model, cfg.ppo, run.device)
    run.attach(policy=ppo.actor, ppo=ppo)

    # N simulators per worker step together; one batched forward pass gives all their actions
    # and state values.
    collector = make_collector(
        cfg.env,
        cfg.collector,
        ppo.policy,
        seed=run.collect_seed,
        plan=run.threads,
        learner_device=str(run.device),
    )
    try:
        for batch in collector:
            run.collected(batch)
            # GAE over the batch, then epochs x minibatches of clipped policy/value updates.
            metrics = ppo.update(batch, progress=run.progress)
            collector.update_policy_weights_()
            run.updated(metrics)
            if run.done:
                break
    finally:
        collector.shutdown()
    return run.finish()


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
