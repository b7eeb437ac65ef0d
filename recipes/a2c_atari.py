"""A2C on Atari (Mnih et al. 2016, synchronous), batched as in Stooke & Abbeel (2018).

    python recipes/a2c_atari.py                        # Pong, 10M frames, 16 envs x 5 steps
    python recipes/a2c_atari.py --env.num-envs 64 --collector.steps-per-batch 320 --a2c.lr 2.8e-3
    python recipes/a2c_atari.py --collector.kind async --collector.num-workers 2   # A3C-style
    python recipes/a2c_atari.py --help                 # every knob

Import it to reuse: ``from recipes.a2c_atari import Config, train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from accelrl import precision
from accelrl.algos.a2c import A2C, A2CConfig, validate_a2c
from accelrl.cli import run_recipe
from accelrl.collectors import PolicyLag, run_collector
from accelrl.config import CollectorConfig, EnvConfig, RunConfig
from accelrl.envs import describe_env
from accelrl.models import make_actor_critic
from accelrl.process import lr_scale, setup_process
from accelrl.run_folder import RunFolder
from accelrl.validate import require_whole_trajectories, validate_common

ALGO = "a2c"
"""The run folder's and checkpoints' name of this algorithm (``accelrl.agent.RECIPES``)."""


@dataclass
class Config(RunConfig):
    """A2C on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    env: EnvConfig = field(default_factory=lambda: EnvConfig(num_envs=16))
    a2c: A2CConfig = field(default_factory=A2CConfig)
    collector: CollectorConfig = field(default_factory=lambda: CollectorConfig(steps_per_batch=80))
    """Default batch: 80 agent steps = 16 envs x 5 steps."""


def validate(cfg: Config) -> None:
    """Every check, before any simulator or worker starts."""
    validate_common(cfg)
    validate_a2c(cfg.a2c)
    require_whole_trajectories(cfg.env, "A2C")


def make_agent(cfg: Config, env_spec: dict, device: torch.device, lr_scale: float = 1.0) -> A2C:
    """The actor-critic (TorchRL's ``ActorValueOperator``: one Nature CNN shared by both heads
    on frames, two MLPs on vector inputs) and its A2C learner (n-step returns through TorchRL's
    ``GAE`` at lambda 1, ``A2CLoss``, Adam (or RMSprop) at ``lr_scale`` x ``a2c.lr``);
    ``accelrl.play`` rebuilds a trained agent with it."""
    model = make_actor_critic(
        **env_spec,
        mlp_hidden=cfg.model.mlp_hidden,
        recurrent=None if cfg.model.recurrent == "none" else cfg.model.recurrent,
        lstm_hidden=cfg.model.lstm_hidden,
    ).to(device)
    a2c_cfg = replace(cfg.a2c, lr=cfg.a2c.lr * lr_scale)
    return A2C(
        model,
        a2c_cfg,
        device,
        on_nonfinite=cfg.on_nonfinite,
        compile_loss=cfg.compile.loss,
        precision=precision.plan(cfg, env_spec["obs_shape"], device),
    )


def train(cfg: Config) -> dict:
    """Train A2C; returns final frames, updates, episodes, mean return of the last 100, frames/s."""
    validate(cfg)
    proc = setup_process(cfg)  # process group, device, thread plan, seeds, stop signals
    scale = lr_scale(proc.world_size, cfg.dist.lr_scaling)  # N data-parallel ranks
    with RunFolder(cfg, ALGO, proc, resolved={"lr_scale": scale}) as run:
        spec = describe_env(cfg.env)
        precision.announce(precision.plan(cfg, spec["obs_shape"], proc.device))
        a2c = make_agent(cfg, spec, proc.device, lr_scale=scale)
        progress = run.restore(a2c)  # --resume: weights, optimizer, counters
        if progress.done:
            return run.finish(progress)

        # Simulators: make_env's vector env (ale-py's AtariVectorEnv, preprocessing in C++)
        # inside TorchRL's Collector, or its MultiSyncCollector with --collector.num-workers
        # (the other --collector.kind choices: accelrl.collectors.make_collector). One batched
        # forward pass acts for all simulators and records the state values the returns need.
        lag = PolicyLag(cfg.collector, progress.updates, proc.device)  # async kinds only
        acting = lag.acting(a2c.collect_policy)  # stamped with its version (kind async)
        # A recurrent policy's state travels with the simulators, zeros at each episode's
        # start; a resumed run starts every simulator from zeros (new episodes).
        state = a2c.initial_state(1)
        collector = run_collector(
            cfg.env, cfg.collector, cfg.compile, acting, proc, progress.updates, state=state
        )
        try:
            for batch in collector:  # [envs, T] (or [workers, envs, T]) agent steps
                if not lag.accept(batch, progress):
                    continue  # acted by weights more than --collector.max-policy-lag behind
                progress.collected(batch)
                run.episodes(batch, progress.frames)
                # n-step returns (or GAE) over the batch, then one gradient step on all of it.
                with proc.update_threads():  # more cores while the simulators wait
                    metrics = a2c.update(lag.fresh(batch), progress=progress.fraction)
                lag.bump()
                collector.update_policy_weights_()  # the workers act with the new weights
                metrics |= {**lag.metrics, **progress.updated()}
                run.log(progress, metrics)
                # Stop signal (checkpoint, then requeue or exit); evaluation, video, checkpoint
                # when due (--log.*-every-frames).
                run.on_schedule(progress)
                if progress.done:
                    break
        finally:
            collector.shutdown()
        return run.finish(progress)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
