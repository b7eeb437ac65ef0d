"""Checks on a recipe's config, run before any simulator or worker starts.

Each raises ``ConfigError`` naming the field, the value and what is allowed; ``accelrl.cli``
turns it into one line on stderr and exit code 2. The data they check is in ``accelrl.config``
(and each algorithm's section in ``accelrl.algos``); each env backend checks its own settings
(``accelrl.envs.backend.EnvBackend.check``, called by ``validate_env``).
"""

from __future__ import annotations

import os
from typing import Any

from accelrl import precision
from accelrl.config import CollectorConfig, EnvConfig, rows_per_batch
from accelrl.envs import UnknownGame, backend_for, selectable_backends
from accelrl.errors import ConfigError, check_finite, check_positive
from accelrl.recurrent import CORES

SEED_MAX = 2**32 - 1
"""The largest ``--seed``: NumPy's legacy generator and MinAtar's take seeds below 2**32."""


def check_seed(name: str, seed: int) -> None:
    """``seed`` is a whole number the run's generators take (0 to ``SEED_MAX``)."""
    if not 0 <= seed <= SEED_MAX:
        raise ConfigError(name, seed, "must be a whole number from 0 to 2**32 - 1")


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
    """The backend name, the game (the registry finds the backend that runs it) and the
    settings that backend checks."""
    names = selectable_backends()
    if env.backend not in names:
        raise ConfigError(
            f"{prefix}.backend",
            env.backend,
            f"must be one of {', '.join(names)} (for Atari games; other games choose their "
            "backend by name)",
        )
    check_positive(f"{prefix}.num_envs", env.num_envs)
    try:
        backend = backend_for(env)
    except UnknownGame as err:
        raise ConfigError(f"{prefix}.game", env.game, err.allowed) from None
    if env.kwargs and backend.name != "classic":
        raise ConfigError(
            f"{prefix}.kwargs",
            env.kwargs,
            f"is for gymnasium envs (CartPole-v1, module:Id-v0), not {env.game}",
        )
    backend.check(env, prefix)


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
    if c.kind == "batched" and not backend_for(env).in_process:
        raise ConfigError(
            "env.backend",
            env.backend,
            "collector.kind batched steps every simulator in its own slot in-process; this "
            "backend runs them in worker processes (use ale_vec)",
        )


def validate_compile(cfg: Any) -> None:
    """``--compile.policy`` and ``--compile.cudagraphs`` go through TorchRL's collectors (kinds
    sync and async); CUDA graphs need the acting policy on a GPU."""
    from accelrl.config import resolve_device

    c = cfg.collector
    graphs = cfg.compile.cudagraphs
    if graphs not in ("auto", "on", "off"):
        raise ConfigError("compile.cudagraphs", graphs, "must be auto, on or off")
    for flag, value in (("policy", cfg.compile.policy), ("cudagraphs", graphs == "on")):
        if value and c.kind not in ("sync", "async"):
            raise ConfigError(
                f"compile.{flag}",
                getattr(cfg.compile, flag),
                f"wraps the policy of TorchRL's collectors (collector.kind sync or async); "
                f"collector.kind {c.kind} runs its own inference loop",
            )
    if graphs == "on":
        policy_device = resolve_device(cfg.device if c.policy_device == "auto" else c.policy_device)
        if not policy_device.startswith("cuda"):
            raise ConfigError(
                "compile.cudagraphs",
                graphs,
                f"CUDA graphs need the policy on a GPU, and it runs on {policy_device} here; "
                "use auto (eager on a CPU) or --device cuda",
            )


def validate_recurrent(cfg: Any, minibatches: int = 1) -> None:
    """``--model.recurrent`` (a core of ``accelrl.recurrent.CORES``) runs where its state is
    carried: every collector kind, in process or in worker processes (the simulators carry it,
    ``accelrl.envs.with_state``), but every simulator in its own row (no ale-py async mode),
    eager loss, and ``minibatches`` dividing the simulators (minibatches hold whole sequences of
    whole simulators)."""
    m = cfg.model
    if m.recurrent != "none" and m.recurrent not in CORES:
        raise ConfigError("model.recurrent", m.recurrent, f"must be none or {' or '.join(CORES)}")
    if not m.mlp_hidden or min(m.mlp_hidden) < 1:
        raise ConfigError(
            "model.mlp_hidden", " ".join(map(str, m.mlp_hidden)), "must be one or more sizes > 0"
        )
    check_positive("model.lstm_hidden", m.lstm_hidden)
    if m.recurrent == "none":
        return
    if cfg.env.async_batch_size:
        raise ConfigError(
            "model.recurrent",
            m.recurrent,
            "needs every simulator in its own row (env.async_batch_size 0)",
        )
    if cfg.compile.loss or cfg.compile.policy or cfg.compile.cudagraphs == "on":
        raise ConfigError(
            "model.recurrent", m.recurrent, "runs uncompiled for now (no --compile.* flags)"
        )
    if cfg.env.num_envs % minibatches:
        raise ConfigError(
            "model.recurrent",
            m.recurrent,
            f"minibatches hold whole simulators: {minibatches} minibatches must divide "
            f"env.num_envs={cfg.env.num_envs}",
        )


def validate_common(cfg: Any) -> None:
    """Checks the sections every recipe shares (env, collector, threads, log, top-level), and
    that every float flag of every section, the algorithm's included, is finite."""
    check_finite(cfg)
    check_seed("seed", cfg.seed)
    validate_env(cfg.env)
    check_positive("total_frames", cfg.total_frames)
    check_device("device", cfg.device)
    check_positive("log.video_every_frames", cfg.log.video_every_frames, zero_ok=True)
    check_positive("log.video_max_steps", cfg.log.video_max_steps)
    backend = backend_for(cfg.env)
    if cfg.log.video_every_frames and not backend.renders:
        raise ConfigError(
            "log.video_every_frames",
            cfg.log.video_every_frames,
            f"videos record game screens, and {cfg.env.game} (backend {backend.name}) has none "
            "(use 0)",
        )
    if cfg.log.trackers:
        from accelrl.run.trackers import missing_packages

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
    precision.check(cfg)
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
    validate_recurrent(cfg)
    if cfg.on_nonfinite not in ("stop", "skip"):
        raise ConfigError("on_nonfinite", cfg.on_nonfinite, "must be stop or skip")
    if cfg.run_dir is not None and os.path.exists(cfg.run_dir) and not os.path.isdir(cfg.run_dir):
        raise ConfigError("run_dir", cfg.run_dir, "is a file; give a folder path")
