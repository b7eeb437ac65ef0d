"""Typed configs shared by every recipe, and their validation.

Recipes compose these sections into one ``Config`` dataclass; tyro turns it into nested CLI flags
(``--env.game Pong --env.num-envs 16 --total-frames 10_000_000``). ``validate`` runs before any
worker or simulator starts and raises ``ConfigError`` naming the field, the value and what is
allowed; ``accelrl.cli.run`` turns that into one line on stderr and exit code 2.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

C = TypeVar("C")


class ConfigError(ValueError):
    """A config value that cannot work; the message names field, value and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"invalid --{name.replace('_', '-')}={value!r}: {allowed}")


@dataclass
class EnvConfig:
    """Which simulators to run and how their frames are preprocessed."""

    game: str = "Pong"
    """Atari game (Pong, Breakout, SpaceInvaders, ALE/Pong-v5 ...) or a gymnasium id for vector
    observations (CartPole-v1, Acrobot-v1, ...)."""
    num_envs: int = 8
    """Simulators stepped together by each collector worker."""
    backend: Literal["ale_vec", "gym"] = "ale_vec"
    """ale_vec: ale-py's C++ multithreaded vector env (fast). gym: gymnasium envs with TorchRL
    transforms inside ParallelEnv workers (for custom transforms)."""
    async_batch_size: int = 0
    """ale_vec only: 0 steps all simulators together; 0 < k < num_envs returns the first k to
    finish each step (ale-py's async mode)."""
    frameskip: int = 4
    """Emulator frames per agent step (max-pooled over the last two)."""
    frame_stack: int = 4
    screen_size: int = 84
    noop_max: int = 30
    """Up to this many no-op actions at the start of each episode."""
    sticky_actions: float = 0.25
    """Probability of repeating the previous action (ALE v5: 0.25; the paper's setting: 0)."""
    max_episode_frames: int = 108_000
    """Emulator frames after which an episode is truncated (30 minutes of play)."""
    fire_reset: bool = True
    """Press FIRE after reset in games that need it to start."""


@dataclass
class ThreadsConfig:
    """CPU threads for every process; 0 means derived from the core count (logged at start)."""

    torch_threads: int = 0
    """torch intra-op threads in the learner and in each collector worker."""
    sim_threads: int = 0
    """C++ threads stepping the simulators of one ale_vec env."""


@dataclass
class CollectorConfig:
    """How experience is gathered: processes, batch layout and devices."""

    kind: Literal["sync", "alternating", "async", "batched"] = "sync"
    """sync: every simulator steps, then one batched forward pass acts for all (TorchRL's
    Collector, or MultiSyncCollector with workers). alternating: two halves of num_envs take
    turns, one steps while the policy acts for the other (in-process, ale_vec). async: worker
    processes keep collecting with the weights they have while the learner updates
    (MultiAsyncCollector; needs num_workers >= 1; batches lag the learner by up to
    max_policy_lag updates). batched: every simulator in its own slot of num_workers processes,
    one inference server in the learner process batches their requests (TorchRL's
    AsyncBatchedCollector, the paper's action server)."""
    num_workers: int = 0
    """0 collects in the learner process; N >= 1 runs N worker processes, each with its own
    num_envs simulators (sync, async: and its own policy copy)."""
    frames_per_batch: int = 1024
    """Agent steps per batch over all workers and envs (TorchRL's frames_per_batch); must be a
    multiple of num_envs x max(1, num_workers). With kind async each batch comes from one
    worker: a multiple of num_envs."""
    stall_timeout_s: float = 60.0
    """Stop the run when the collector yields no batch for this long (a stuck worker); a dead
    worker process stops it within about a second. The first batch may take 5x as long."""
    max_policy_lag: int = 4
    """async, batched: a batch whose oldest step was taken by weights more than this many
    updates behind the learner's is dropped (and counted in perf/dropped_frames)."""
    env_device: str = "cpu"
    policy_device: str = "auto"
    """Where each worker runs inference; auto: cuda when available and the learner is on cuda."""
    storing_device: str = "auto"
    """Where batches are assembled; auto: the learner's device."""


@dataclass
class ModelConfig:
    mlp_hidden: tuple[int, ...] = (64, 64)
    """Hidden sizes of the MLP used for vector observations (Atari uses the Nature CNN)."""


@dataclass
class LogConfig:
    progress: bool = True
    """Show a progress bar with frames, frames/s, episode return and ETA."""
    tensorboard: bool = True
    trackers: tuple[Literal["wandb", "mlflow"], ...] = ()
    """Experiment trackers besides CSV and TensorBoard, through TorchRL's loggers: wandb (set
    WANDB_MODE=offline to log without network), mlflow (to a SQLite store next to the run
    folder, runs/mlflow.db by default, or MLFLOW_TRACKING_URI). A resumed or requeued run
    continues the same tracker run."""
    project: str = "accelrl"
    """W&B project / MLflow experiment name."""
    eval_every_frames: int = 0
    """Emulator frames between evaluations (0: only at the end, 0 episodes disables)."""
    eval_episodes: int = 4
    """Episodes per evaluation, run greedy and sampled each."""
    video_every_frames: int = 0
    """Atari: every this many emulator frames, record one greedy evaluation episode (full-size
    RGB) to RUN_DIR/videos/ as MP4 and to TensorBoard as an animated GIF (0: never)."""
    video_max_steps: int = 1000
    """Agent steps per recorded video at most (1000 at frameskip 4: 67 s of play)."""
    checkpoint_every_frames: int = 1_000_000
    """Emulator frames between checkpoints (a final one is always written)."""
    keep_checkpoints: int = 3


@dataclass
class DistConfig:
    """Data-parallel runs (torchrun or ``python -m slurm.launch``): each rank collects and
    computes gradients on its own batch; gradients are averaged before every step."""

    lr_scaling: Literal["none", "linear", "sqrt"] = "none"
    """Scale the recipe's learning rate with the number of ranks N (the global batch is N
    times one rank's): none keeps it, linear multiplies by N (Goyal et al. 2017's rule for
    SGD), sqrt by sqrt(N) (a common choice for Adam). Logged at start."""
    check_sync_every: int = 0
    """Every this many updates, verify that all ranks hold identical weights (0: never)."""


@dataclass
class RunConfig:
    """Sections and run-level fields every recipe's ``Config`` shares (recipes add theirs)."""

    env: EnvConfig = field(default_factory=EnvConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    threads: ThreadsConfig = field(default_factory=ThreadsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    total_frames: int = 10_000_000
    """Emulator frames to train for (agent steps x frameskip), as in the paper."""
    device: str = "auto"
    """Learner device: auto (cuda if available), cpu, cuda, cuda:N."""
    seed: int = 0
    run_dir: str | None = None
    """Folder for config, metrics.csv, TensorBoard events and checkpoints (default runs/...)."""
    resume: bool = False
    """Continue the run in --run-dir from its latest checkpoint."""
    trust_checkpoint: bool = False
    """Read checkpoints with a full unpickle, which can run code stored in the file: only for
    files you trust that the default safe load (tensors, containers, numbers) refuses, such as
    checkpoints written by accelrl before RNG states were saved as tensors."""
    on_nonfinite: Literal["stop", "skip"] = "stop"
    """A NaN/Inf loss or gradient: stop the run (the last checkpoint stays the latest) or skip
    that step and count it (train/skipped_steps)."""


def cpu_count() -> int:
    """Cores this process may use (respects affinity masks set by SLURM or taskset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when available else ``cpu``; other values pass through."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


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
    from accelrl.envs import is_atari

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


def validate_common(cfg: Any) -> None:
    """Checks the sections every recipe shares (env, collector, threads, log, top-level)."""
    validate_env(cfg.env)
    check_positive("total_frames", cfg.total_frames)
    check_device("device", cfg.device)
    check_positive("log.video_every_frames", cfg.log.video_every_frames, zero_ok=True)
    check_positive("log.video_max_steps", cfg.log.video_max_steps)
    if cfg.log.video_every_frames:
        from accelrl.envs import is_atari

        if not is_atari(cfg.env.game):
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
    check_positive("collector.frames_per_batch", c.frames_per_batch)
    check_positive("collector.max_policy_lag", c.max_policy_lag, zero_ok=True)
    check_positive("collector.stall_timeout_s", c.stall_timeout_s)
    validate_collector_kind(cfg.env, c)
    if c.kind == "async":
        envs, what = cfg.env.num_envs, "env.num_envs (each async batch comes from one worker)"
    else:
        envs = cfg.env.num_envs * max(1, c.num_workers)
        what = "env.num_envs x max(1, collector.num_workers)"
    if c.frames_per_batch % envs:
        raise ConfigError(
            "collector.frames_per_batch",
            c.frames_per_batch,
            f"must be a multiple of {what} = {envs}",
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


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain JSON-able data (tuples become lists)."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type[C], data: dict[str, Any]) -> C:
    """Rebuild a config dataclass from ``to_dict``'s output (e.g. a run's config.json):
    nested sections become their dataclasses, lists become tuples where the default is one,
    keys the class does not know are ignored and missing ones keep their defaults."""
    hints = typing.get_type_hints(cls)
    default = cls()
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        current = getattr(default, f.name)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            value = from_dict(type(current), value)
        elif isinstance(current, tuple) and isinstance(value, list):
            value = tuple(value)
        elif dataclasses.is_dataclass(hints.get(f.name)) and isinstance(value, dict):
            value = from_dict(hints[f.name], value)
        values[f.name] = value
    return cls(**values)


__all__ = [
    "from_dict",
    "CollectorConfig",
    "ConfigError",
    "DistConfig",
    "EnvConfig",
    "LogConfig",
    "ModelConfig",
    "RunConfig",
    "ThreadsConfig",
    "field",
]
