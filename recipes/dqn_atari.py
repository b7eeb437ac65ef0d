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

import torch

from accelrl.algos.dqn import DQN, DQNConfig, apply_preset, preset_num_envs, validate_dqn
from accelrl.async_replay import ReplayFeeder, SyncReplay
from accelrl.cli import run_recipe
from accelrl.config import (
    CollectorConfig,
    ConfigError,
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


def validate(cfg: Config) -> None:
    """Every check, before any simulator or worker starts (presets applied first)."""
    cfg = resolve(cfg)
    validate_common(cfg)
    validate_dqn(cfg.dqn)
    require_whole_trajectories(cfg.env, "the replay's n-step targets")
    if cfg.collector.kind == "async":
        raise ConfigError(
            "collector.kind",
            "async",
            "the replay stores every simulator's steps together; use sync, alternating or "
            "batched (with --dqn.asynchronous to overlap collection and updates)",
        )


def make_agent(cfg: Config, env_spec: dict, device: torch.device) -> DQN:
    """The Q-network (Nature CNN or MLP trunk; dueling and C51 heads as configured), its target
    and the DQN loss; ``accelrl.play`` rebuilds a trained agent with it. Pass a resolved config."""
    return DQN(
        cfg.dqn,
        obs_key=env_spec["obs_key"],
        obs_shape=env_spec["obs_shape"],
        num_actions=env_spec["num_actions"],
        device=device,
        mlp_hidden=cfg.model.mlp_hidden,
    )


def train(cfg: Config) -> dict:
    """Train a DQN-family agent; returns final frames, episodes, mean return of the last 100."""
    validate(cfg)
    cfg = resolve(cfg)
    run = Run(cfg, algo="dqn")

    spec = run.env_spec
    dqn = make_agent(cfg, spec, run.device)
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
    # Updates per collected batch keep replayed / collected samples at the training intensity.
    per_batch = cfg.dqn.training_intensity * cfg.collector.frames_per_batch / cfg.dqn.batch_size
    # After a resume the replay refills: updates wait for learning_starts new frames.
    learning_starts = cfg.dqn.learning_starts // run.frame_skip

    if cfg.dqn.asynchronous:
        # Collection runs in a background thread (own policy copy, weights copied after
        # updates); the learner waits only when it would replay more than the intensity allows.
        source = ReplayFeeder(
            run.make_collector,
            dqn.policy,
            replay,
            intensity=cfg.dqn.training_intensity,
            frames_per_batch=cfg.collector.frames_per_batch,
            learning_starts=learning_starts,
            on_stream_break=replay.restart_streams,
        )
    else:
        source = SyncReplay(run.make_collector(dqn.policy), replay, learning_starts)
    credit = 0.0
    try:
        source.start()
        while not run.done:
            run.collected(source.wait_batch())
            metrics = {
                **dqn.no_update_metrics(),
                "train/epsilon": dqn.epsilon(run.frames),
                "train/replay": len(replay),
            }
            if source.learning():
                credit += per_batch
                while credit >= 1.0:
                    sample = source.sample(cfg.dqn.batch_size, beta=dqn.beta(run.progress))
                    with source.weights_changing():
                        update_metrics, priority = dqn.update(sample)
                    if priority is not None:  # None: a skipped non-finite step
                        source.update_priority(sample.get("index"), priority)
                    credit -= 1.0
                metrics.update(update_metrics)
            metrics["train/replay_ratio"] = source.ratio()
            dqn.set_epsilon(dqn.epsilon(run.frames))
            source.publish_weights()
            run.updated(metrics)
    finally:
        source.close()
    return run.finish()


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
