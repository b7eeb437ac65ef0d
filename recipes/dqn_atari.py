"""The DQN family on Atari: DQN, Double, Dueling, n-step, Prioritized, Categorical, eps-Rainbow.

    python recipes/dqn_atari.py                                  # DQN on Pong
    python recipes/dqn_atari.py --dqn.double --dqn.dueling --dqn.n-step 3 --dqn.prioritized
    python recipes/dqn_atari.py --dqn.preset rainbow             # all of them, no noisy nets
    python recipes/dqn_atari.py --dqn.preset cat-dqn-2048        # the paper's large batches
    python recipes/dqn_atari.py --env.game MinAtar/Breakout --dqn.preset minatar  # MinAtar's DQN
    python recipes/dqn_atari.py --help                           # every knob

Import it to reuse: ``from recipes.dqn_atari import Config, train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from accelrl import precision
from accelrl.algos.dqn import DQN, DQNConfig, apply_preset, preset_num_envs, validate_dqn
from accelrl.async_replay import ReplayFeeder, SyncReplay
from accelrl.cli import given_flags, run_recipe
from accelrl.collectors import WatchedCollector, run_collector
from accelrl.config import CollectorConfig, EnvConfig, RunConfig, rows_per_batch
from accelrl.envs import describe_env, frames_per_step
from accelrl.process import lr_scale, setup_process
from accelrl.replay import FrameReplay
from accelrl.run_folder import RunFolder
from accelrl.validate import ConfigError, require_whole_trajectories, validate_common

ALGO = "dqn"
"""The run folder's and checkpoints' name of this algorithm (``accelrl.agent.RECIPES``)."""


@dataclass
class Config(RunConfig):
    """DQN family on Atari. Frames are emulator frames (agent steps x frameskip)."""

    dqn: DQNConfig = field(default_factory=DQNConfig)
    collector: CollectorConfig = field(default_factory=lambda: CollectorConfig(steps_per_batch=32))
    """Default: 8 envs x 4 steps between update phases."""


def resolve(cfg: Config) -> Config:
    """Apply the preset to every flag the user did not give (``accelrl.cli.given_flags``; a
    config built in Python without ``mark_given``: every field still at its default): its
    hyperparameters, and simulators (4 steps each a batch) to match its batch size."""
    if cfg.dqn.preset == "none":
        return cfg
    given = given_flags(cfg)

    def free(path: str, value: object, default: object) -> bool:
        return value == default if given is None else path not in given

    dqn_given = None if given is None else {p[4:] for p in given if p.startswith("dqn.")}
    dqn = apply_preset(cfg.dqn, dqn_given)
    env, collector = cfg.env, cfg.collector
    if free("env.num_envs", env.num_envs, EnvConfig().num_envs):
        env = replace(env, num_envs=preset_num_envs(dqn))
        steps = collector.steps_per_batch
        if free("collector.steps_per_batch", steps, Config().collector.steps_per_batch):
            collector = replace(collector, steps_per_batch=env.num_envs * 4)
    return replace(cfg, dqn=dqn, env=env, collector=collector)


def validate(cfg: Config) -> None:
    """Every check, before any simulator or worker starts (presets applied first)."""
    cfg = resolve(cfg)
    validate_common(cfg)
    validate_dqn(cfg.dqn)
    require_whole_trajectories(cfg.env, "the replay's n-step targets")
    if cfg.model.recurrent != "none":
        raise ConfigError(
            "model.recurrent", cfg.model.recurrent, "is for the actor-critics (PPO, A2C)"
        )
    if cfg.collector.kind == "async":
        raise ConfigError(
            "collector.kind",
            "async",
            "the replay stores every simulator's steps together; use sync, alternating or "
            "batched (with --dqn.asynchronous to overlap collection and updates)",
        )


def make_agent(
    cfg: Config, env_spec: dict, device: torch.device, lr_scale: float = 1.0, world_size: int = 1
) -> DQN:
    """The Q-network (Nature CNN or MLP trunk; dueling and C51 heads as configured) in TorchRL's
    ``QValueActor`` / ``DistributionalQValueActor``, its target network, ``DQNLoss`` /
    ``DistributionalDQNLoss``, Adam at ``lr_scale`` x ``dqn.lr`` and epsilon-greedy acting whose
    schedule counts every rank's frames (``world_size`` ranks); ``accelrl.play`` rebuilds a
    trained agent with it. Pass a resolved config."""
    return DQN(
        replace(cfg.dqn, lr=cfg.dqn.lr * lr_scale),
        obs_key=env_spec["obs_key"],
        obs_shape=env_spec["obs_shape"],
        num_actions=env_spec["num_actions"],
        device=device,
        mlp_hidden=cfg.model.mlp_hidden,
        on_nonfinite=cfg.on_nonfinite,
        compile_loss=cfg.compile.loss,
        precision=precision.plan(cfg, env_spec["obs_shape"], device),
        run_frames_per_step=frames_per_step(cfg.env) * world_size,
    )


def train(cfg: Config) -> dict:
    """Train a DQN-family agent; returns final frames, episodes, mean return of the last 100."""
    validate(cfg)
    cfg = resolve(cfg)
    # Process group, device, thread plan, seeds, stop signals; with --dqn.asynchronous a feeder
    # thread collects while the learner updates.
    proc = setup_process(cfg, overlapped=cfg.dqn.asynchronous)
    scale = lr_scale(proc.world_size, cfg.dist.lr_scaling)  # N data-parallel ranks
    with RunFolder(cfg, ALGO, proc, resolved={"lr_scale": scale}) as run:
        spec = describe_env(cfg.env)
        precision.announce(precision.plan(cfg, spec["obs_shape"], proc.device))
        dqn = make_agent(cfg, spec, proc.device, lr_scale=scale, world_size=proc.world_size)
        # Replay: each frame stored once per step; stacks and n-step targets rebuilt when
        # sampled; uniform or prioritized through TorchRL's PrioritizedSampler.
        replay = FrameReplay(
            capacity=cfg.dqn.replay_capacity,
            n_step=cfg.dqn.n_step,
            prioritized=cfg.dqn.prioritized,
            alpha=cfg.dqn.priority_alpha,
            beta=cfg.dqn.priority_beta,
            storage_dir=cfg.dqn.replay_dir,
            num_envs=rows_per_batch(cfg.env, cfg.collector),
            obs_key=spec["obs_key"],
            obs_shape=spec["obs_shape"],
            stack=spec["obs_shape"][0] if spec["obs_key"] == "pixels" else 1,
            gamma=cfg.dqn.gamma,
            life_loss_boundary=cfg.dqn.life_loss_boundary,
            device=proc.device,
        )
        # With --dqn.replay-dir the replay's frames live on disk and checkpoints hold its index
        # (kilobytes), so a resumed run samples from it at once (one process, synchronous
        # collection: a feeder thread would write while the checkpoint reads). A replay in RAM
        # is not saved (7 GB per 1M Atari transitions): a resumed run refills it first.
        keep = cfg.dqn.replay_dir and not cfg.dqn.asynchronous and proc.world_size == 1
        saved_replay = {"replay": replay} if keep else {}
        progress = run.restore(dqn, **saved_replay)  # --resume
        dqn.acted(progress.frames)  # epsilon's schedule, also after a resume
        if progress.done:
            return run.finish(progress)

        # Simulators: make_env's vector env inside TorchRL's Collector (MultiSyncCollector with
        # --collector.num-workers), acting epsilon-greedily with one batched forward pass.
        def collector_for(policy: torch.nn.Module) -> WatchedCollector:
            return run_collector(
                cfg.env, cfg.collector, cfg.compile, policy, proc, progress.updates
            )

        # Updates wait for learning_starts_frames of new frames (agent steps here), also after a
        # resume whose replay was not saved.
        learning_starts = cfg.dqn.learning_starts_frames // progress.frames_per_step
        if cfg.resume and saved_replay:
            learning_starts = 0
        if cfg.dqn.asynchronous:
            # Collection runs in a background thread (own policy copy, weights copied after
            # updates); the learner waits only when it would replay more than the intensity.
            source = ReplayFeeder(
                collector_for,
                dqn.collect_policy,
                replay,
                intensity=cfg.dqn.training_intensity,
                steps_per_batch=cfg.collector.steps_per_batch,
                learning_starts=learning_starts,
                on_stream_break=replay.restart_streams,
            )
        else:
            source = SyncReplay(collector_for(dqn.collect_policy), replay, learning_starts)
        # Updates per collected batch keep replayed / collected samples at the intensity; the
        # fractional part carries over as credit.
        per_batch = cfg.dqn.training_intensity * cfg.collector.steps_per_batch / cfg.dqn.batch_size
        credit = 0.0
        try:
            source.start()
            while not progress.done:
                batch = source.wait_batch()  # already written to the replay
                progress.collected(batch)
                run.episodes(batch, progress.frames)
                if source.learning():
                    credit += per_batch
                    due, credit = int(credit), credit - int(credit)
                    # More cores while the simulators wait (threads chosen by measurement).
                    beta = dqn.beta(progress.fraction)  # prioritized replay's IS exponent
                    for _ in proc.update_threads.steps(due):
                        sample = source.sample(cfg.dqn.batch_size, beta=beta)
                        with source.weights_changing():
                            priority = dqn.update(sample)  # target copy when due
                        if priority is not None:  # None: a skipped non-finite step
                            source.update_priority(sample.get("index"), priority)
                dqn.acted(progress.frames)  # epsilon falls per step; workers' counts race
                source.publish_weights()  # the collector acts with the new weights
                metrics = dqn.metrics() | {  # the batch's last gradient step; NaN before any
                    "train/epsilon": dqn.epsilon(progress.frames),
                    "train/replay": len(replay),
                    "train/replay_ratio": source.ratio(),
                    **progress.updated(),
                }
                run.log(progress, metrics)
                # Stop signal (checkpoint, then requeue or exit); evaluation, video, checkpoint
                # when due (--log.*-every-frames).
                run.on_schedule(progress)
        finally:
            source.close()
        return run.finish(progress)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
