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

from dataclasses import dataclass, field, replace

import torch

from accelrl import precision
from accelrl.algos.ppo import PPO, APPOConfig, validate_ppo
from accelrl.cli import run_recipe
from accelrl.collectors import PolicyLag, run_collector
from accelrl.config import CollectorConfig, RunConfig
from accelrl.envs import describe_env
from accelrl.models import make_actor_critic
from accelrl.process import lr_scale, setup_process
from accelrl.run_folder import RunFolder
from accelrl.validate import require_whole_trajectories, validate_common, validate_recurrent

ALGO = "appo"
"""The run folder's and checkpoints' name of this algorithm (``accelrl.agent.RECIPES``)."""


@dataclass
class Config(RunConfig):
    """APPO on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    appo: APPOConfig = field(default_factory=APPOConfig)
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(kind="async", num_workers=2, steps_per_batch=1024)
    )
    """Default: 2 worker processes; each batch is one worker's 8 envs x 128 steps."""


def validate(cfg: Config) -> None:
    """Every check, before any simulator or worker starts."""
    validate_common(cfg)
    validate_ppo(cfg.appo, cfg.collector.steps_per_batch, prefix="appo")
    validate_recurrent(cfg, cfg.appo.minibatches)
    require_whole_trajectories(cfg.env, "APPO")


def make_agent(cfg: Config, env_spec: dict, device: torch.device, lr_scale: float = 1.0) -> PPO:
    """The actor-critic (TorchRL's ``ActorValueOperator``: one Nature CNN shared by both heads
    on frames, two MLPs on vector inputs) and its APPO learner (PPO's ``ClipPPOLoss`` with
    ``GAE`` or ``VTrace`` targets, Adam at ``lr_scale`` x ``appo.lr``); ``accelrl.play``
    rebuilds a trained agent with it."""
    model = make_actor_critic(
        **env_spec,
        mlp_hidden=cfg.model.mlp_hidden,
        recurrent=None if cfg.model.recurrent == "none" else cfg.model.recurrent,
        lstm_hidden=cfg.model.lstm_hidden,
    ).to(device)
    appo_cfg = replace(cfg.appo, lr=cfg.appo.lr * lr_scale)
    return PPO(
        model,
        appo_cfg,
        device,
        on_nonfinite=cfg.on_nonfinite,
        compile_loss=cfg.compile.loss,
        precision=precision.plan(cfg, env_spec["obs_shape"], device),
    )


def train(cfg: Config) -> dict:
    """Train APPO; returns frames, updates, episodes, mean return of the last 100, frames/s."""
    validate(cfg)
    proc = setup_process(cfg)  # process group, device, thread plan, seeds, stop signals
    scale = lr_scale(proc.world_size, cfg.dist.lr_scaling)  # N data-parallel ranks
    with RunFolder(cfg, ALGO, proc, resolved={"lr_scale": scale}) as run:
        spec = describe_env(cfg.env)
        precision.announce(precision.plan(cfg, spec["obs_shape"], proc.device))
        appo = make_agent(cfg, spec, proc.device, lr_scale=scale)
        progress = run.restore(appo)  # --resume: weights, optimizer, counters
        if progress.done:
            return run.finish(progress)

        # Simulators: make_env's vector env (ale-py's AtariVectorEnv, preprocessing in C++) in
        # each worker of TorchRL's MultiAsyncCollector, which yields whichever worker's batch
        # is ready while the others keep stepping. Every step is stamped with the version
        # (update count) of the weights that took it.
        lag = PolicyLag(cfg.collector, progress.updates, proc.device)
        acting = lag.acting(appo.collect_policy)
        # A recurrent policy's state travels with the simulators, zeros at each episode's
        # start; a resumed run starts every simulator from zeros (new episodes).
        state = appo.initial_state(1)
        collector = run_collector(
            cfg.env, cfg.collector, cfg.compile, acting, proc, progress.updates, state=state
        )
        try:
            for batch in collector:  # [envs, T] agent steps of one worker
                if not lag.accept(batch, progress):
                    continue  # acted by weights more than --collector.max-policy-lag behind
                progress.collected(batch)
                run.episodes(batch, progress.frames)
                # A lagged batch's values are recomputed with the current critic (lag.fresh);
                # GAE or V-trace targets, then epochs x minibatches of clipped steps.
                with proc.update_threads():  # more cores while the simulators wait
                    metrics = appo.update(lag.fresh(batch), progress=progress.fraction)
                lag.bump()
                collector.update_policy_weights_()  # workers pick them up between batches
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
