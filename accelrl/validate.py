"""Checks on a recipe's config, run before any simulator or worker starts.

Each raises ``ConfigError`` naming the field, the value and what is allowed; ``accelrl.cli``
turns it into one line on stderr and exit code 2. The data they check is in ``accelrl.config``
(and each algorithm's section in ``accelrl.algos``).
"""

from __future__ import annotations

import os
from typing import Any

from accelrl.config import CollectorConfig, EnvConfig, rows_per_batch
from accelrl.envs import is_atari


class ConfigError(ValueError):
    """A config value that cannot work; the message names field, value and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"invalid --{name.replace('_', '-')}={value!r}: {allowed}")


def check_positive(name: str, value: int | float, *, zero_ok: bool = False) -> None:
    ok = value >= 0 if zero_ok else value > 0
    if not ok:
        raise ConfigError(name, value, "must be >= 0" if zero_ok else "must be > 0")


def check_device(name: str, value: str, *, auto_ok: bool = True) -> None:
    import torch

    if auto_ok and value == "auto":
        return
    try:
        dev = torch.device(value)
    except (RuntimeError, ValueError):
        raise ConfigError(name, value, "must be auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(name, value, "CUDA is not available on this machine; use cpu or auto")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigError(
            name, value, f"this machine has {count} CUDA device(s): cuda:0..{count - 1}"
        )
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(name, value, "must be auto, cpu, cuda or cuda:N")


def validate_env(env: EnvConfig, prefix: str = "env") -> None:
    if env.backend not in ("ale_vec", "gym"):
        raise ConfigError(f"{prefix}.backend", env.backend, "must be ale_vec or gym")
    check_positive(f"{prefix}.num_envs", env.num_envs)
    if not is_atari(env.game):
        import gymnasium as gym

        if env.game not in gym.registry:
            from accelrl.envs.games import rom_id

            try:
                rom_id(env.game)
            except ValueError as err:
                raise ConfigError(f"{prefix}.game", env.game, str(err).split(": ", 1)[-1]) from None
        if env.fire_on_life_loss:
            raise ConfigError(
                f"{prefix}.fire_on_life_loss", True, f"is for Atari games, not {env.game}"
            )
        return
    if not 0 <= env.async_batch_size < env.num_envs and env.async_batch_size != 0:
        raise ConfigError(
            f"{prefix}.async_batch_size",
            env.async_batch_size,
            f"must be 0 (sync) or between 1 and num_envs-1={env.num_envs - 1}",
        )
    if env.async_batch_size and env.backend != "ale_vec":
        raise ConfigError(
            f"{prefix}.async_batch_size", env.async_batch_size, "needs backend ale_vec"
        )
    check_positive(f"{prefix}.frameskip", env.frameskip)
    check_positive(f"{prefix}.frame_stack", env.frame_stack)
    if env.screen_size < 36:
        raise ConfigError(f"{prefix}.screen_size", env.screen_size, "must be >= 36 for the CNN")
    check_positive(f"{prefix}.noop_max", env.noop_max, zero_ok=True)
    if not 0.0 <= env.sticky_actions <= 1.0:
        raise ConfigError(f"{prefix}.sticky_actions", env.sticky_actions, "must be in [0, 1]")
    check_positive(f"{prefix}.max_episode_frames", env.max_episode_frames)
    if env.fire_on_life_loss:
        if env.backend != "ale_vec":
            raise ConfigError(f"{prefix}.fire_on_life_loss", True, "needs backend ale_vec")
        from accelrl.envs.ale_vec import fire_action_index

        if fire_action_index(env.game) is None:
            raise ConfigError(f"{prefix}.fire_on_life_loss", True, f"{env.game} has no FIRE action")


def require_whole_trajectories(env: EnvConfig, algo: str) -> None:
    """On-policy advantages need each batch row to follow one simulator through time."""
    if env.async_batch_size:
        raise ConfigError(
            "env.async_batch_size",
            env.async_batch_size,
            f"{algo} needs each batch row to follow one simulator; use 0 (synchronous stepping)",
        )


def validate_collector_kind(env: EnvConfig, c: CollectorConfig) -> None:
    """Combinations of ``collector.kind`` with workers, envs and backends that cannot work."""
    kinds = ("sync", "alternating", "async", "batched")
    if c.kind not in kinds:
        raise ConfigError("collector.kind", c.kind, f"must be one of {', '.join(kinds)}")
    if c.kind != "sync" and env.async_batch_size:
        raise ConfigError(
            "env.async_batch_size",
            env.async_batch_size,
            f"ale-py's async mode only works with collector.kind sync, not {c.kind}",
        )
    if c.kind == "alternating":
        if c.num_workers:
            raise ConfigError(
                "collector.num_workers",
                c.num_workers,
                "collector.kind alternating runs in the learner process; use 0",
            )
        if env.num_envs < 2 or env.num_envs % 2:
            raise ConfigError(
                "env.num_envs",
                env.num_envs,
                "collector.kind alternating splits the simulators in two halves: use an even "
                "number >= 2",
            )
    if c.kind == "async" and c.num_workers < 1:
        raise ConfigError(
            "collector.num_workers",
            c.num_workers,
            "collector.kind async collects in worker processes: use 1 or more (2+ to overlap "
            "several workers)",
        )
    if c.kind == "batched" and env.backend != "ale_vec":
        raise ConfigError(
            "env.backend", env.backend, "collector.kind batched runs simulators with ale_vec"
        )


def validate_compile(cfg: Any) -> None:
    """``--compile.policy`` and ``--compile.cudagraphs`` go through TorchRL's collectors (kinds
    sync and async); CUDA graphs need the acting policy on a GPU."""
    from accelrl.config import resolve_device

    c = cfg.collector
    for flag in ("policy", "cudagraphs"):
        if getattr(cfg.compile, flag) and c.kind not in ("sync", "async"):
            raise ConfigError(
                f"compile.{flag}",
                True,
                f"wraps the policy of TorchRL's collectors (collector.kind sync or async); "
                f"collector.kind {c.kind} runs its own inference loop",
            )
    if cfg.compile.cudagraphs:
        policy_device = resolve_device(cfg.device if c.policy_device == "auto" else c.policy_device)
        if not policy_device.startswith("cuda"):
            raise ConfigError(
                "compile.cudagraphs",
                True,
                f"CUDA graphs need the policy on a GPU, and it runs on {policy_device} here; "
                "drop the flag or use --device cuda",
            )


def validate_common(cfg: Any) -> None:
    """Checks the sections every recipe shares (env, collector, threads, log, top-level)."""
    validate_env(cfg.env)
    check_positive("total_frames", cfg.total_frames)
    check_device("device", cfg.device)
    check_positive("log.video_every_frames", cfg.log.video_every_frames, zero_ok=True)
    check_positive("log.video_max_steps", cfg.log.video_max_steps)
    if cfg.log.video_every_frames and not is_atari(cfg.env.game):
        raise ConfigError(
            "log.video_every_frames",
            cfg.log.video_every_frames,
            f"videos record Atari screens; {cfg.env.game} is not an Atari game (use 0)",
        )
    if cfg.log.trackers:
        from accelrl.trackers import missing_packages

        missing = missing_packages(tuple(cfg.log.trackers))
        if missing:
            raise ConfigError(
                "log.trackers",
                " ".join(cfg.log.trackers),
                f"needs {' and '.join(missing)}: pip install {' '.join(missing)}",
            )
    c = cfg.collector
    check_positive("collector.num_workers", c.num_workers, zero_ok=True)
    check_positive("collector.steps_per_batch", c.steps_per_batch)
    check_positive("collector.max_policy_lag", c.max_policy_lag, zero_ok=True)
    check_positive("collector.stall_timeout_s", c.stall_timeout_s)
    validate_collector_kind(cfg.env, c)
    validate_compile(cfg)
    rows = rows_per_batch(cfg.env, c)
    if c.steps_per_batch % rows:
        what = (
            "env.num_envs (each async batch comes from one worker)"
            if c.kind == "async"
            else "env.num_envs x max(1, collector.num_workers)"
        )
        raise ConfigError(
            "collector.steps_per_batch",
            c.steps_per_batch,
            f"must be a multiple of {what} = {rows}",
        )
    for name in ("env_device", "policy_device", "storing_device"):
        check_device(f"collector.{name}", getattr(c, name))
    check_positive("threads.torch_threads", cfg.threads.torch_threads, zero_ok=True)
    check_positive("threads.sim_threads", cfg.threads.sim_threads, zero_ok=True)
    check_positive("log.eval_every_frames", cfg.log.eval_every_frames, zero_ok=True)
    check_positive("log.eval_episodes", cfg.log.eval_episodes, zero_ok=True)
    check_positive("log.checkpoint_every_frames", cfg.log.checkpoint_every_frames)
    check_positive("log.keep_checkpoints", cfg.log.keep_checkpoints)
    if cfg.dist.lr_scaling not in ("none", "linear", "sqrt"):
        raise ConfigError("dist.lr_scaling", cfg.dist.lr_scaling, "must be none, linear or sqrt")
    check_positive("dist.check_sync_every", cfg.dist.check_sync_every, zero_ok=True)
    if cfg.on_nonfinite not in ("stop", "skip"):
        raise ConfigError("on_nonfinite", cfg.on_nonfinite, "must be stop or skip")
    if cfg.run_dir is not None and os.path.exists(cfg.run_dir) and not os.path.isdir(cfg.run_dir):
        raise ConfigError("run_dir", cfg.run_dir, "is a file; give a folder path")
