"""Typed configs shared by every recipe: data only (checks live in ``accelrl.validate``).

Recipes compose these sections into one ``Config`` dataclass; tyro turns it into nested CLI flags
(``--env.game Pong --env.num-envs 16 --total-frames 10_000_000``).

Units: a flag ending in ``_frames`` counts emulator frames (agent steps x frameskip, the paper's
unit: ``total_frames``, ``eval_every_frames``, ``learning_starts_frames`` ...); one ending in
``_steps`` counts agent steps (``collector.steps_per_batch``, ``log.video_max_steps``). The
conversion is ``accelrl.envs.frames_per_step`` (``accelrl.run.progress.Progress`` counts with it).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

C = TypeVar("C")


@dataclass
class EnvConfig:
    """Which simulators to run and how their frames are preprocessed."""

    game: str = "Pong"
    """Atari game (Pong, Breakout, SpaceInvaders, ALE/Pong-v5 ...), a gymnasium id with vector
    or image observations (CartPole-v1, Acrobot-v1, ...; your own as module:Id-v0, where
    importing the module registers Id-v0: docs/custom-envs.md) or a MinAtar game
    (MinAtar/Breakout, MinAtar/Asterix, MinAtar/Freeway, MinAtar/Seaquest,
    MinAtar/SpaceInvaders; needs the minatar extra). The name chooses the backend
    (``accelrl.envs``)."""
    kwargs: str = ""
    """Gymnasium envs: keyword arguments for the env's constructor, as a JSON object
    ('{"delay": 5}'; empty: none)."""
    num_envs: int = 8
    """Simulators stepped together by each collector worker."""
    backend: str = "ale_vec"
    """Atari games: ale_vec, ale-py's C++ multithreaded vector env (fast), or gym, gymnasium
    envs with TorchRL transforms inside ParallelEnv workers (for custom transforms). Other games
    choose their backend by name (classic: gymnasium ids; minatar: MinAtar/...)."""
    async_batch_size: int = 0
    """ale_vec only: 0 steps all simulators together; 0 < k < num_envs returns the first k to
    finish each step (ale-py's async mode)."""
    frameskip: int = 4
    """Atari: emulator frames per agent step (max-pooled over the last two)."""
    frame_stack: int = 4
    """Atari and image observations: the last this many frames, stacked as channels (zeros
    before an episode's first frame)."""
    screen_size: int = 84
    """Atari and image observations: frames are resized to this many pixels square (at least
    36, the Nature CNN's smallest input)."""
    noop_max: int = 30
    """Atari: up to this many no-op actions at the start of each episode."""
    sticky_actions: float | None = None
    """Probability of repeating the previous action; None: the game's standard (Atari: ALE
    v5's 0.25, the paper's setting is 0; MinAtar: 0.1)."""
    max_episode_frames: int = 108_000
    """Emulator frames after which an episode is truncated (Atari: 30 minutes of play; MinAtar
    steps one frame per agent step)."""
    fire_reset: bool = True
    """Atari: press FIRE after reset in games that need it to start."""
    fire_on_life_loss: bool = False
    """ale_vec, games with FIRE: the step after a lost life presses FIRE whatever the agent
    chose (the game waits for it to serve; OpenAI baselines' episodic-life + FIRE-reset wrappers
    press it there too). Part of the simulator's dynamics: the agent's chosen action is
    recorded, as with sticky actions."""
    hide_velocities: bool = False
    """CartPole only: zero the cart's and the pole's velocities (observation indices 1 and 3),
    a partially observed task where a policy must remember the positions it saw
    (docs/recurrent.md)."""


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
    AsyncBatchedCollector, the paper's action server); measured the slowest kind on CPUs and
    on a GPU, so not a recommended layout (docs/performance.md#sampling-modes)."""
    num_workers: int = 0
    """0 collects in the learner process; N >= 1 runs N worker processes, each with its own
    num_envs simulators (sync, async: and its own policy copy)."""
    steps_per_batch: int = 1024
    """Agent steps per batch over all workers and envs (TorchRL's ``frames_per_batch``, which
    counts agent steps); must be a multiple of ``rows_per_batch``: num_envs x max(1,
    num_workers), or num_envs with kind async (each async batch comes from one worker)."""
    stall_timeout_s: float = 60.0
    """Stop the run when the collector yields no batch for this long (a stuck worker); a dead
    worker process stops it within about a second. The first batch may take 5x as long."""
    max_policy_lag: int = 4
    """async, batched: a batch whose oldest step was taken by weights more than this many
    updates behind the learner's is dropped (and counted in perf/dropped_frames)."""
    env_device: str = "cpu"
    """Where the simulators' outputs are placed (the simulators themselves run on the CPU)."""
    policy_device: str = "auto"
    """Where each worker runs inference; auto: cuda when available and the learner is on cuda."""
    storing_device: str = "auto"
    """Where batches are assembled; auto: the learner's device."""
    compact_obs: Literal["auto", "on", "off"] = "auto"
    """In-process collection writes each observation once: batches without ``("next", obs)``
    (TorchRL's ``compact_obs`` layout; the next root holds it) and with the next observations
    the learners read, where an episode ended and at each row's last step, on the side
    (``accelrl.batches``). off: TorchRL's full layout, every observation twice. auto: compact
    where a batch's observations take at least 512 KiB (every Atari batch; not classic
    control's, whose second copy costs less than the side observations' bookkeeping). Worker
    processes always give the full layout."""


@dataclass
class ModelConfig:
    mlp_hidden: tuple[int, ...] = (64, 64)
    """Hidden sizes of the MLP used for vector observations (Atari frames get the Nature CNN,
    MinAtar grids the MinAtar paper's small CNN: ``accelrl.models.conv_trunk``)."""
    recurrent: Literal["none", "lstm", "gru"] = "none"
    """Actor-critics (PPO, A2C, APPO): a recurrent core between the trunk and the policy and
    value heads, one of ``accelrl.recurrent.CORES`` (lstm: an LSTM, gru: a GRU;
    docs/recurrent.md); none: the feed-forward networks."""
    lstm_hidden: int = 128
    """Units of the recurrent core, whichever it is (CleanRL's PPO-LSTM: 128; the name is the
    flag's and the run folders' from before there was more than the LSTM)."""


@dataclass
class LogConfig:
    progress: bool = True
    """Show a progress bar with frames, frames/s, episode return and ETA."""
    tensorboard: bool = True
    """Write TensorBoard event files to RUN_DIR/tb/ besides metrics.csv."""
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
    """Checkpoints kept in RUN_DIR/checkpoints/ (the newest; older ones are deleted)."""


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
class CompileConfig:
    """torch.compile for the learner (off by default; see docs/performance.md for the
    measured effect)."""

    loss: bool = False
    """Compile the forward pass of each update's loss (trunk, heads and TorchRL loss module as
    one graph; backward and optimizer steps stay eager). Costs minutes of compilation at start
    on a CPU."""
    policy: bool = False
    """Compile the acting policy's forward pass in collection (TorchRL's ``compile_policy`` on
    ``Collector``, ``MultiSyncCollector`` and ``MultiAsyncCollector``: collector kinds sync and
    async; each worker process compiles its own copy)."""
    cudagraphs: Literal["auto", "on", "off"] = "auto"
    """The acting network's forward pass replayed as a CUDA graph, policy on a GPU: ``auto``
    captures it at the first batch and keeps it where it gives the same outputs and is faster
    (one log line says which and why; eager on a CPU), ``on`` always (needs a GPU), ``off``
    never. The in-process lean rollout captures its network itself
    (``accelrl.collectors.graphs``); worker processes and ``--compile.policy`` use TorchRL's
    ``cudagraph_policy`` for ``on`` (docs/performance.md#compilation)."""


@dataclass
class PrecisionConfig:
    """Arithmetic precision of the networks (``accelrl.precision``; docs/precision.md has the
    measurements). Weights, optimizer state, losses, returns and checkpoints stay fp32."""

    learner: Literal["fp32", "bf16", "fp16", "auto"] = "fp32"
    """Forward and backward passes of the updates: bf16 (torch.autocast; on a CPU only worth it
    with native bf16, AVX-512 BF16 or AMX), fp16 (CUDA only, with a loss scaler), auto (bf16
    where the device computes it natively and the network is a CNN, else fp32; logged)."""
    actor: Literal["fp32", "bf16", "auto"] = "fp32"
    """The acting policy's forward pass in collection (evaluation stays fp32): bf16, or auto
    (bf16 on a GPU with native bf16; fp32 on a CPU, where acting batches gained nothing)."""
    channels_last: bool = False
    """Store the conv trunk's weights NHWC (torch.channels_last), the layout oneDNN and cuDNN
    compute in; values and checkpoints are unchanged."""


@dataclass
class RunConfig:
    """Sections and run-level fields every recipe's ``Config`` shares (recipes add theirs)."""

    env: EnvConfig = field(default_factory=EnvConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    threads: ThreadsConfig = field(default_factory=ThreadsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    total_frames: int = 10_000_000
    """Emulator frames to train for (agent steps x frameskip), as in the paper."""
    device: str = "auto"
    """Learner device: auto (cuda if available), cpu, cuda, cuda:N."""
    seed: int = 0
    """Seeds Python's, NumPy's and torch's generators and the simulators (0 to 2**32 - 1; a
    resumed run and each data-parallel rank derive their simulators' seeds from it)."""
    run_dir: str | None = None
    """Folder for config, metrics.csv, TensorBoard events and checkpoints (default runs/...)."""
    resume: bool = False
    """Continue the run in --run-dir from its latest checkpoint. Flags that change what the run
    learns must match its config.json; others (a longer --total-frames, logging, devices) may
    differ and are recorded in config_changes.jsonl."""
    allow_config_change: bool = False
    """With --resume: continue even with flags that change what the run learns (hyperparameters,
    env, seed); each change is recorded with the frame count it applies from."""
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
    """``auto`` -> ``cuda`` when available else ``cpu``; other values pass through. ``auto`` is
    resolved once per process (``_auto_device``): the checks, the process, the precision plan and
    the collectors all see the same answer."""
    return _auto_device() if device == "auto" else device


@functools.cache
def _auto_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


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


def rows_per_batch(env: EnvConfig, collector: CollectorConfig) -> int:
    """Simulators whose steps make up one batch: every env of every worker, except with kind
    async, where each batch comes from one worker's envs."""
    if collector.kind == "async":
        return env.num_envs
    return env.num_envs * max(1, collector.num_workers)


__all__ = [
    "from_dict",
    "rows_per_batch",
    "CollectorConfig",
    "CompileConfig",
    "DistConfig",
    "EnvConfig",
    "LogConfig",
    "ModelConfig",
    "PrecisionConfig",
    "RunConfig",
    "ThreadsConfig",
    "field",
    "given_flags",
    "mark_given",
]


GIVEN = "_given_flags"
"""The attribute of a parsed config that holds the flags its command line gave (not a field:
``config.json`` and ``dataclasses.replace`` leave it out)."""


def mark_given(cfg: Any, *paths: str) -> Any:
    """``cfg``, marked as having ``paths`` (dotted field names such as ``dqn.lr``) given by the
    user, which a preset then leaves alone (``accelrl.algos.catalog.resolve_dqn``).
    ``accelrl.cli.parse_flags`` marks what its command line gave; from Python, name the fields
    you set."""
    object.__setattr__(cfg, GIVEN, frozenset(paths))
    return cfg


def given_flags(cfg: Any) -> frozenset[str] | None:
    """The dotted field names given for ``cfg`` (``mark_given``), or None for a config built in
    Python without naming them: then a preset fills every field still at its default."""
    return getattr(cfg, GIVEN, None)
