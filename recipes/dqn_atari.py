"""The DQN family on Atari: DQN, Double, Dueling, n-step, Prioritized, Categorical, eps-Rainbow.

    python recipes/dqn_atari.py                                  # DQN on Pong
    python recipes/dqn_atari.py --dqn.double --dqn.dueling --dqn.n-step 3 --dqn.prioritized
    python recipes/dqn_atari.py --dqn.preset rainbow             # all of them, no noisy nets
    python recipes/dqn_atari.py --dqn.preset cat-dqn-2048        # the paper's large batches
    python recipes/dqn_atari.py --help                           # every knob

Import it to reuse: ``from recipes.dqn_atari import Config, train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from accelrl.algos.dqn import DQN, DQNConfig, apply_preset, preset_num_envs, validate_dqn
from accelrl.cli import run_recipe
from accelrl.config import (
    CollectorConfig,
    EnvConfig,
    RunConfig,
    require_whole_trajectories,
    validate_common,
)
from accelrl.replay import FrameReplay, ReplayConfig
from accelrl.runner import Run


@dataclass
class Config(RunConfig):
    """DQN family on Atari. Frames are emulator frames (agent steps x frameskip)."""

    dqn: DQNConfig = field(default_factory=DQNConfig)
    collector: CollectorConfig = field(default_factory=lambda: CollectorConfig(frames_per_batch=32))
    """Default: 8 envs x 4 steps between update phases."""


def resolve(cfg: Config) -> Config:
    """Apply the preset: its hyperparameters, and simulators to match its batch size."""
    dqn = apply_preset(cfg.dqn)
    if cfg.dqn.preset == "none":
        return cfg
    env, collector = cfg.env, cfg.collector
    if env.num_envs == EnvConfig().num_envs:
        env = replace(env, num_envs=preset_num_envs(dqn))
        collector = replace(collector, frames_per_batch=env.num_envs * 4)
    return replace(cfg, dqn=dqn, env=env, collector=collector)


def train(cfg: Config) -> dict:
    """Train a DQN-family agent; returns final frames, episodes, mean return of the last 100."""
    cfg = resolve(cfg)
    validate_common(cfg)
    validate_dqn(cfg.dqn)
    require_whole_trajectories(cfg.env, "the replay's n-step targets")
    run = Run(cfg, algo="dqn")

    spec = run.env_spec
    dqn = DQN(
        cfg.dqn,
        obs_key=spec["obs_key"],
        obs_shape=spec["obs_shape"],
        num_actions=spec["num_actions"],
        device=run.device,
        mlp_hidden=cfg.model.mlp_hidden,
    )
    # Frames are stored once per step; stacks and n-step targets are rebuilt when sampled.
    replay = FrameReplay(
        ReplayConfig(
            capacity=cfg.dqn.replay_capacity,
            prioritized=cfg.dqn.prioritized,
            alpha=cfg.dqn.priority_alpha,
            beta=cfg.dqn.priority_beta,
            n_step=cfg.dqn.n_step,
            storage_dir=cfg.dqn.replay_dir,
        ),
        num_envs=cfg.env.num_envs * max(1, cfg.collector.num_workers),
        obs_key=spec["obs_key"],
        obs_shape=spec["obs_shape"],
        stack=spec["obs_shape"][0] if spec["obs_key"] == "pixels" else 1,
        gamma=cfg.dqn.gamma,
        life_loss_boundary=cfg.dqn.life_loss_boundary,
        device=run.device,
    )
    run.attach(policy=dqn.eval_policy, dqn=dqn)
    # After a resume the replay refills: updates wait for learning_starts new frames.
    learning_starts = run.frames + cfg.dqn.learning_starts
    per_batch = cfg.dqn.training_intensity * cfg.collector.frames_per_batch / cfg.dqn.batch_size
    credit = 0.0

    collector = run.make_collector(dqn.policy)
    try:
        for batch in collector:
            run.collected(batch)
            replay.extend(batch)
            metrics = {
                **dqn.no_update_metrics(),
                "train/epsilon": dqn.epsilon(run.frames),
                "train/replay": len(replay),
            }
            # Keep replayed / collected samples at the training intensity.
            if run.frames >= learning_starts:
                credit += per_batch
                while credit >= 1.0:
                    sample = replay.sample(cfg.dqn.batch_size, beta=dqn.beta(run.progress))
                    update_metrics, priority = dqn.update(sample)
                    replay.update_priority(sample.get("index"), priority)
                    credit -= 1.0
                metrics.update(update_metrics)
            dqn.set_epsilon(dqn.epsilon(run.frames))
            collector.update_policy_weights_()
            run.updated(metrics)
            if run.done:
                break
    finally:
        collector.shutdown()
    return run.finish()


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
