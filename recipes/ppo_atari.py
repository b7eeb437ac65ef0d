"""PPO on Atari (Schulman et al. 2017), batched as in Stooke & Abbeel (2018).

    python recipes/ppo_atari.py                        # Pong, 10M frames
    python recipes/ppo_atari.py --env.game Breakout --env.num-envs 16 --collector.num-workers 2
    python recipes/ppo_atari.py --env.game MinAtar/Breakout   # the MinAtar CNN, 1 frame a step
    python recipes/ppo_atari.py --help                 # every knob

Import it to reuse: ``from recipes.ppo_atari import Config, train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from accelrl import precision
from accelrl.algos.ppo import PPO, PPOConfig, validate_ppo
from accelrl.cli import run_recipe
from accelrl.collectors import PolicyLag, run_collector
from accelrl.config import CollectorConfig, RunConfig
from accelrl.envs import describe_env
from accelrl.models import make_actor_critic
from accelrl.process import lr_scale, setup_process
from accelrl.run_folder import RunFolder
from accelrl.validate import require_whole_trajectories, validate_common, validate_recurrent

ALGO = "ppo"
"""The run folder's and checkpoints' name of this algorithm (``accelrl.agent.RECIPES``)."""


@dataclass
class Config(RunConfig):
    """PPO on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    ppo: PPOConfig = field(default_factory=PPOConfig)
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(steps_per_batch=1024)
    )
    """Default batch: 1024 agent steps = 8 envs x 128 steps."""


def validate(cfg: Config) -> None:
    """Every check, before any simulator or worker starts."""
    validate_common(cfg)
    validate_ppo(cfg.ppo, cfg.collector.steps_per_batch)
    validate_recurrent(cfg, cfg.ppo.minibatches)
    require_whole_trajectories(cfg.env, "PPO")


def make_agent(cfg: Config, env_spec: dict, device: torch.device, lr_scale: float = 1.0) -> PPO:
    """The actor-critic (TorchRL's ``ActorValueOperator``: one Nature CNN shared by both heads
    on frames, two MLPs on vector inputs) and its PPO learner (``GAE``, ``ClipPPOLoss``, Adam at
    ``lr_scale`` x ``ppo.lr``); ``accelrl.play`` rebuilds a trained agent with it."""
    model = make_actor_critic(
        **env_spec,
        mlp_hidden=cfg.model.mlp_hidden,
        recurrent=None if cfg.model.recurrent == "none" else cfg.model.recurrent,
        lstm_hidden=cfg.model.lstm_hidden,
    ).to(device)
    ppo_cfg = replace(cfg.ppo, lr=cfg.ppo.lr * lr_scale)
    return PPO(
        model,
        ppo_cfg,
        device,
        on_nonfinite=cfg.on_nonfinite,
        compile_loss=cfg.compile.loss,
        precision=precision.plan(cfg, env_spec["obs_shape"], device),
    )


def train(cfg: Config) -> dict:
    """Train PPO; returns final frames, updates, episodes, mean return of the last 100, frames/s."""
    validate(cfg)
    proc = setup_process(cfg)  # process group, device, thread plan, seeds, stop signals
    scale = lr_scale(proc.world_size, cfg.dist.lr_scaling)  # N data-parallel ranks
    with RunFolder(cfg, ALGO, proc, resolved={"lr_scale": scale}) as run:
        spec = describe_env(cfg.env)
        precision.announce(precision.plan(cfg, spec["obs_shape"], proc.device))
        ppo = make_agent(cfg, spec, proc.device, lr_scale=scale)
        progress = run.restore(ppo)  # --resume: weights, optimizer, counters
        if progress.done:
            return run.finish(progress)

        # Simulators: make_env's vector env (ale-py's AtariVectorEnv, preprocessing in C++)
        # inside TorchRL's Collector, or its MultiSyncCollector with --collector.num-workers
        # (the other --collector.kind choices: accelrl.collectors.make_collector). One batched
        # forward pass acts for all simulators and records the state values GAE needs.
        lag = PolicyLag(cfg.collector, progress.updates, proc.device)  # async kinds only
        acting = lag.acting(ppo.collect_policy)  # stamped with its version (kind async)
        # A recurrent policy's state travels with the simulators, zeros at each episode's
        # start; a resumed run starts every simulator from zeros (new episodes).
        state = ppo.initial_state(1)
        collector = run_collector(
            cfg.env, cfg.collector, cfg.compile, acting, proc, progress.updates, state=state
        )
        try:
            for batch in collector:  # [envs, T] (or [workers, envs, T]) agent steps
                if not lag.accept(batch, progress):
                    continue  # acted by weights more than --collector.max-policy-lag behind
                progress.collected(batch)
                run.episodes(batch, progress.frames)
                # GAE over the batch, then epochs x minibatches of clipped policy/value steps.
                with proc.update_threads():  # more cores while the simulators wait
                    metrics = ppo.update(lag.fresh(batch), progress=progress.fraction)
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
