"""The algorithms accelrl trains, one registered record each (``accelrl.algos.registry``).

Each record is the algorithm's config (``RunConfig`` plus its section, with its defaults), its
checks, its agent factory and its family's loop. The recipes (``recipes/*_atari.py``) train
these records; ``accelrl.tools.play``, ``accelrl.tools.export`` and the plain reference loops look
them up by name (``algorithm``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from accelrl import precision
from accelrl.algos.a2c import A2C, A2CConfig, validate_a2c
from accelrl.algos.dqn import DQN, DQNConfig, apply_preset, preset_num_envs, validate_dqn
from accelrl.algos.ppo import PPO, APPOConfig, PPOConfig, validate_ppo
from accelrl.algos.pqn import PQN, PQNConfig, validate_pqn
from accelrl.algos.registry import ALGORITHMS, Algorithm, UnknownAlgorithm, register
from accelrl.config import CollectorConfig, EnvConfig, RunConfig, given_flags, rows_per_batch
from accelrl.envs import frames_per_step
from accelrl.models import make_actor_critic
from accelrl.validate import (
    ConfigError,
    require_whole_trajectories,
    validate_common,
    validate_recurrent,
)

# ----- the actor-critics: PPO, A2C, APPO (the on-policy loop) ---------------------------------


@dataclass
class PPORunConfig(RunConfig):
    """PPO on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    ppo: PPOConfig = field(default_factory=PPOConfig)
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(steps_per_batch=1024)
    )
    """Default batch: 1024 agent steps = 8 envs x 128 steps."""


@dataclass
class A2CRunConfig(RunConfig):
    """A2C on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    env: EnvConfig = field(default_factory=lambda: EnvConfig(num_envs=16))
    a2c: A2CConfig = field(default_factory=A2CConfig)
    collector: CollectorConfig = field(default_factory=lambda: CollectorConfig(steps_per_batch=80))
    """Default batch: 80 agent steps = 16 envs x 5 steps."""


@dataclass
class APPORunConfig(RunConfig):
    """APPO on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    appo: APPOConfig = field(default_factory=APPOConfig)
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(kind="async", num_workers=2, steps_per_batch=1024)
    )
    """Default: 2 worker processes; each batch is one worker's 8 envs x 128 steps."""


def _validate_ppo(cfg: PPORunConfig | APPORunConfig, section: str, name: str) -> None:
    validate_common(cfg)
    hyper = getattr(cfg, section)
    validate_ppo(hyper, cfg.collector.steps_per_batch, prefix=section)
    validate_recurrent(cfg, hyper.minibatches)
    require_whole_trajectories(cfg.env, name)


def validate_ppo_run(cfg: PPORunConfig) -> None:
    """Every check of a PPO run, before any simulator or worker starts."""
    _validate_ppo(cfg, "ppo", "PPO")


def validate_appo_run(cfg: APPORunConfig) -> None:
    """Every check of an APPO run, before any simulator or worker starts."""
    _validate_ppo(cfg, "appo", "APPO")


def validate_a2c_run(cfg: A2CRunConfig) -> None:
    """Every check of an A2C run, before any simulator or worker starts."""
    validate_common(cfg)
    validate_a2c(cfg.a2c)
    require_whole_trajectories(cfg.env, "A2C")


def _actor_critic_agent(learner: type, section: str) -> Any:
    def make_agent(cfg: Any, env_spec: dict, device: torch.device, **run: Any) -> Any:
        # run: lr_scale (default 1) and plan (the run's precision plan; made here when None);
        # an actor-critic's acting does not depend on world_size.
        lr_scale, plan = run.get("lr_scale", 1.0), run.get("plan")
        model = make_actor_critic(
            **env_spec,
            mlp_hidden=cfg.model.mlp_hidden,
            recurrent=None if cfg.model.recurrent == "none" else cfg.model.recurrent,
            lstm_hidden=cfg.model.lstm_hidden,
        ).to(device)
        hyper = getattr(cfg, section)
        return learner(
            model,
            replace(hyper, lr=hyper.lr * lr_scale),
            device,
            on_nonfinite=cfg.on_nonfinite,
            compile_loss=cfg.compile.loss,
            precision=plan or precision.plan(cfg, env_spec["obs_shape"], device),
        )

    make_agent.__doc__ = (
        f"The actor-critic (TorchRL's ``ActorValueOperator``: one trunk shared by both heads, "
        f"chosen by the observation shape; a recurrent core with ``--model.recurrent``) and its "
        f"{learner.__name__} learner at ``lr_scale`` x ``{section}.lr``."
    )
    return make_agent


def _on_policy(name: str, config: type, validate: Any, learner: type) -> Algorithm:
    """The record of an actor-critic whose config section is named after it."""
    make_agent = _actor_critic_agent(learner, name)
    return register(Algorithm(name, name, "on_policy", config, validate, make_agent))


PPO_ALGORITHM = _on_policy("ppo", PPORunConfig, validate_ppo_run, PPO)
A2C_ALGORITHM = _on_policy("a2c", A2CRunConfig, validate_a2c_run, A2C)
APPO_ALGORITHM = _on_policy("appo", APPORunConfig, validate_appo_run, PPO)

# ----- PQN: Q-learning on the on-policy loop's batches ------------------------------------------


@dataclass
class PQNRunConfig(RunConfig):
    """PQN on Atari. Frames are emulator frames (agent steps x frameskip), as in the paper."""

    env: EnvConfig = field(default_factory=lambda: EnvConfig(num_envs=32))
    pqn: PQNConfig = field(default_factory=PQNConfig)
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(steps_per_batch=1024)
    )
    """Default batch: 1024 agent steps = 32 envs x 32 steps (CleanRL's 1024 steps a batch, in
    the paper's many short rollouts: its Atari runs take 128 envs x 32 steps)."""


def _q_learner_args(
    cfg: RunConfig, env_spec: dict, device: torch.device, plan: precision.Plan | None
) -> dict[str, Any]:
    """What the Q-learners (DQN, PQN) build their networks and steps from."""
    return dict(
        obs_key=env_spec["obs_key"],
        obs_shape=env_spec["obs_shape"],
        num_actions=env_spec["num_actions"],
        device=device,
        mlp_hidden=cfg.model.mlp_hidden,
        on_nonfinite=cfg.on_nonfinite,
        compile_loss=cfg.compile.loss,
        precision=plan or precision.plan(cfg, env_spec["obs_shape"], device),
    )


def _feed_forward_in_step(cfg: RunConfig, why_not_async: str) -> None:
    """The Q-learners' shared refusals: no recurrent core, no asynchronous collector (whose
    batches come from one worker at a time, acted by older weights)."""
    if cfg.model.recurrent != "none":
        raise ConfigError(
            "model.recurrent", cfg.model.recurrent, "is for the actor-critics (PPO, A2C)"
        )
    if cfg.collector.kind == "async":
        raise ConfigError("collector.kind", "async", why_not_async)


def validate_pqn_run(cfg: PQNRunConfig) -> None:
    """Every check of a PQN run, before any simulator or worker starts."""
    validate_common(cfg)
    validate_pqn(cfg.pqn, cfg.collector.steps_per_batch, rows_per_batch(cfg.env, cfg.collector))
    require_whole_trajectories(cfg.env, "PQN")
    _feed_forward_in_step(
        cfg,
        "PQN's lambda returns and epsilon schedule take each batch as acted by the current "
        "weights; use sync, alternating or batched",
    )


def make_pqn_agent(cfg: PQNRunConfig, env_spec: dict, device: torch.device, **run: Any) -> PQN:
    """The LayerNorm Q-network (Nature CNN, MinAtar CNN or MLP trunk by the observation shape)
    in TorchRL's ``QValueActor``, epsilon-greedy acting and RAdam at ``lr_scale`` x
    ``pqn.lr``; ``run``: ``lr_scale`` and ``plan`` (epsilon follows the frame budget's
    fraction, whatever the number of ranks)."""
    lr_scale = run.get("lr_scale", 1.0)
    hyper = replace(cfg.pqn, lr=cfg.pqn.lr * lr_scale)
    return PQN(hyper, **_q_learner_args(cfg, env_spec, device, run.get("plan")))


# Algorithm(name, section, family, config, validate, make_agent[, resolve])
PQN_ALGORITHM = register(
    Algorithm("pqn", "pqn", "on_policy", PQNRunConfig, validate_pqn_run, make_pqn_agent)
)

# ----- the DQN family (the replay loop) -------------------------------------------------------


@dataclass
class DQNRunConfig(RunConfig):
    """DQN family on Atari. Frames are emulator frames (agent steps x frameskip)."""

    dqn: DQNConfig = field(default_factory=DQNConfig)
    collector: CollectorConfig = field(default_factory=lambda: CollectorConfig(steps_per_batch=32))
    """Default: 8 envs x 4 steps between update phases."""


def resolve_dqn(cfg: DQNRunConfig) -> DQNRunConfig:
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
        if free("collector.steps_per_batch", steps, DQNRunConfig().collector.steps_per_batch):
            collector = replace(collector, steps_per_batch=env.num_envs * 4)
    return replace(cfg, dqn=dqn, env=env, collector=collector)


def validate_dqn_run(cfg: DQNRunConfig) -> None:
    """Every check of a DQN-family run, before any simulator or worker starts (the preset
    applied first)."""
    cfg = resolve_dqn(cfg)
    validate_common(cfg)
    validate_dqn(cfg.dqn)
    require_whole_trajectories(cfg.env, "the replay's n-step targets")
    _feed_forward_in_step(
        cfg,
        "the replay stores every simulator's steps together; use sync, alternating or "
        "batched (with --dqn.asynchronous to overlap collection and updates)",
    )


def make_dqn_agent(
    cfg: DQNRunConfig,
    env_spec: dict,
    device: torch.device,
    *,
    lr_scale: float = 1.0,
    world_size: int = 1,
    plan: precision.Plan | None = None,
) -> DQN:
    """The Q-network (Nature CNN or MLP trunk; dueling and C51 heads as configured) in TorchRL's
    ``QValueActor`` / ``DistributionalQValueActor``, its target network, ``DQNLoss`` /
    ``DistributionalDQNLoss``, Adam at ``lr_scale`` x ``dqn.lr`` and epsilon-greedy acting whose
    schedule counts every rank's frames (``world_size`` ranks). Pass a resolved config."""
    return DQN(
        replace(cfg.dqn, lr=cfg.dqn.lr * lr_scale),
        **_q_learner_args(cfg, env_spec, device, plan),
        run_frames_per_step=frames_per_step(cfg.env) * world_size,
    )


DQN_ALGORITHM = register(
    Algorithm(
        name="dqn",
        section="dqn",
        family="replay",
        config=DQNRunConfig,
        validate=validate_dqn_run,
        make_agent=make_dqn_agent,
        resolve=resolve_dqn,
    )
)


def algorithm(name: str) -> Algorithm:
    """The record of ``name`` (built-in or registered); ``UnknownAlgorithm`` names the known."""
    if name not in ALGORITHMS:
        raise UnknownAlgorithm(f"algorithm {name!r}: accelrl knows {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[name]
