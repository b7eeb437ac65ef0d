"""The run folder: config.json, metrics (CSV, TensorBoard, trackers), evaluations, videos,
checkpoints, resume and summary.json.

    with RunFolder(cfg, "ppo", proc) as run:  # checks --resume / --run-dir, writes config
        progress = run.restore(ppo)           # an Agent (accelrl.agent); --resume loads it
        ...
        run.episodes(batch, progress.frames); run.log(progress, metrics)
        run.on_schedule(progress)             # stop signal, evaluation, video, checkpoint
        return run.finish(progress)

Rank 0 writes, holding the folder's lock (``accelrl.run.lock``) from start to end; the other
ranks of a data-parallel job keep only counters. ``--resume`` checks the flags against the
folder's record and records what it may change (``accelrl.run.record``). The ``with`` block
owns the stop-signal handlers (``accelrl.process.StopSignals``): installed on entry, restored
on exit. Leaving it on a ``RunFailure`` (non-finite loss, failed checkpoint, dead worker, lost
peer) adds where the run stood, and its latest checkpoint, to the error's one-line message.
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any, Protocol

import torch
from tensordict import TensorDictBase

from accelrl import distributed
from accelrl.agent import Agent, unique_parameters
from accelrl.algos.common import NonFiniteError
from accelrl.config import to_dict
from accelrl.envs import frames_per_step
from accelrl.errors import RunFailure
from accelrl.process import Process
from accelrl.run.checkpoint import (
    UnsafeCheckpoint,
    capture_rng,
    list_checkpoints,
    load_latest,
    restore_rng,
    save_checkpoint,
)
from accelrl.run.evaluate import evaluate, record_video, warn_if_capped
from accelrl.run.lock import FolderLock
from accelrl.run.logger import RunLogger
from accelrl.run.opening import open_folder
from accelrl.run.progress import Every, Progress
from accelrl.run.record import CHANGES_NAME, Change, append_changes, dumps
from accelrl.validate import ConfigError

log = logging.getLogger("accelrl")


class Stateful(Protocol):
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


class RunInterrupted(Exception):
    """The run stopped on SIGTERM / SIGUSR2 / a first Ctrl-C after writing a checkpoint."""

    def __init__(self, signum: int, frames: int, checkpoint: Path | None) -> None:
        self.signum, self.frames, self.checkpoint = signum, frames, checkpoint
        name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {name} at {frames} frames; checkpoint {checkpoint}; continue with "
            "--resume and the same --run-dir"
        )


def default_run_dir(algo: str, game: str) -> Path:
    name = game.replace("/", "_").replace("-v5", "")
    return Path("runs") / f"{algo}-{name}-{time.strftime('%Y%m%d-%H%M%S')}"


class NullLogger:
    """What ranks other than 0 log to: nothing."""

    episodes_seen = 0

    def episodes(self, *args: Any) -> None: ...
    def log(self, *args: Any, **kwargs: Any) -> None: ...
    def eval(self, *args: Any) -> None: ...
    def video(self, *args: Any) -> None: ...
    def close(self) -> None: ...
    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None: ...
    def mean_return(self, n: int) -> float:
        return float("nan")


def load_resume_state(
    run_dir: Path, algo: str, components: dict[str, Stateful], device: torch.device, trust: bool
) -> tuple[dict[str, Any], Path]:
    """The latest good checkpoint of ``run_dir``, loaded into ``components``; a ``ConfigError``
    (one line) when there is none, it is another algorithm's, or it does not fit them."""
    try:
        found = load_latest(run_dir, map_location=device, trust=trust)
    except UnsafeCheckpoint as err:
        raise ConfigError("trust_checkpoint", False, str(err)) from None
    if found is None:
        raise ConfigError("resume", True, f"no loadable checkpoint in {run_dir}")
    state, path = found
    if state.get("algo") != algo:
        raise ConfigError(
            "resume", True, f"{path} is a {state.get('algo')!r} checkpoint, not {algo!r}"
        )
    for name, comp in components.items():
        try:
            comp.load_state_dict(state["components"][name])
        except (KeyError, RuntimeError, ValueError) as err:
            first = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
            raise ConfigError(
                "resume",
                True,
                f"{path} does not fit this model/config ({name}: {first}); resume with "
                "the flags the run was started with (see its config.json)",
            ) from None
    return state, path


def open_logger(run_dir: Path, cfg: Any, algo: str, frames: int) -> RunLogger:
    """Rank 0's metrics sink for ``run_dir`` (CSV, TensorBoard, trackers, progress bar)."""
    return RunLogger(
        run_dir,
        total_frames=cfg.total_frames,
        start_frames=frames,
        tensorboard=cfg.log.tensorboard,
        progress=cfg.log.progress,
        trackers=tuple(cfg.log.trackers),
        project=cfg.log.project,
        config={"algo": algo, **to_dict(cfg)},
    )


class RunFolder:
    """One run's folder and everything written to it (see the module docstring)."""

    def __init__(
        self, cfg: Any, algo: str, proc: Process, resolved: dict[str, Any] | None = None
    ) -> None:
        self.cfg, self.algo, self.proc = cfg, algo, proc
        run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(algo, cfg.env.game)
        # Every rank uses rank 0's folder (its default name holds rank 0's clock).
        self.dir = Path(distributed.gather_objects(str(run_dir))[0])
        self.lock = FolderLock(self.dir)
        self.changes: list[Change] = []
        resolved = {
            "device": str(proc.device),
            "threads": vars(proc.threads),
            "world_size": proc.world_size,
            **(resolved or {}),
        }
        # Rank 0 owns the folder: it locks it and checks it; every rank stops on its answer.
        refusal = None
        if proc.is_main:
            try:
                self.changes = open_folder(self.dir, self.lock, cfg, algo, resolved)
            except ConfigError as err:
                self.lock.release()
                refusal = (err.name, err.value, err.allowed)
        refusal = distributed.gather_objects(refusal)[0]
        if refusal is not None:
            raise ConfigError(*refusal)
        self.agent: Agent | None = None
        self.acting_state: TensorDictBase | None = None
        self.components: dict[str, Stateful] = {}
        self.due: dict[str, Every] = {}
        self.logger: RunLogger | NullLogger = NullLogger()
        self.progress: Progress | None = None
        log.info("run dir %s", self.dir)

    # ----- start ----------------------------------------------------------------------------

    def restore(
        self, agent: Agent, acting_state: TensorDictBase | None = None, **extra: Stateful
    ) -> Progress:
        """Register what checkpoints hold (the agent, under the algorithm's name, and ``extra``
        state such as a replay on disk); evaluations and videos run ``agent.eval_policy`` from
        ``acting_state`` (a recurrent policy's state at an episode's start, handed out by the
        loop: ``accelrl.loops.start.acting_state``; None: feed-forward). With
        ``--resume`` load it all back from the latest good checkpoint; every rank then holds
        rank 0's weights. Returns the run's ``Progress`` (frames, updates)."""
        cfg = self.cfg
        self.agent, self.components = agent, {self.algo: agent, **extra}
        self.acting_state = acting_state
        components = self.components
        frames = updates = 0
        state: dict[str, Any] = {}
        if cfg.resume:
            state, path = load_resume_state(
                self.dir, self.algo, components, self.proc.device, cfg.trust_checkpoint
            )
            frames, updates = int(state["frames"]), int(state["updates"])
            restore_rng(state["rng"])
            log.info("resumed from %s at %d frames, %d updates", path, frames, updates)
            if self.changes and self.proc.is_main:
                append_changes(self.dir, frames, self.changes)
                log.info(
                    "changed from %d frames on (recorded in %s): %s",
                    frames,
                    CHANGES_NAME,
                    ", ".join(c.describe() for c in self.changes),
                )
        self.proc.replicate(self.modules(), updates)
        if self.proc.is_main:
            self.logger = open_logger(self.dir, cfg, self.algo, frames)
            if cfg.resume:
                self.logger.load_state_dict(state["logger"])
        self.progress = Progress(
            cfg.total_frames,
            frames_per_step(cfg.env),
            self.proc.world_size,
            frames=frames,
            updates=updates,
        )
        log_cfg = cfg.log
        self.due = {
            "evaluation": Every(log_cfg.eval_every_frames, frames),
            "video": Every(log_cfg.video_every_frames, frames),
            "checkpoint": Every(log_cfg.checkpoint_every_frames, frames),
        }
        return self.progress

    def modules(self) -> list[torch.nn.Module]:
        """The agent's networks (broadcasts, checksums, NaN checks)."""
        return [] if self.agent is None else self.agent.networks()

    def weights_checksum(self) -> float:
        return distributed.parameters_checksum(unique_parameters(self.modules()))

    # ----- per batch ------------------------------------------------------------------------

    def episodes(self, batch: TensorDictBase, frames: int) -> None:
        """Record the episodes that ended in ``batch`` (gathered from every rank)."""
        nxt = batch.get("next")
        done = nxt.get("done").squeeze(-1)
        returns = nxt.get("episode_return")[done].squeeze(-1).cpu()
        lengths = nxt.get("episode_length")[done].squeeze(-1).cpu()
        if self.proc.world_size > 1:
            parts = distributed.gather_objects((returns, lengths))
            returns = torch.cat([p[0] for p in parts])
            lengths = torch.cat([p[1] for p in parts])
        if returns.numel():
            self.logger.episodes(returns, lengths, frames)

    def log(self, progress: Progress, metrics: dict[str, float]) -> None:
        """One metrics row (CSV, TensorBoard, trackers, progress bar) at ``progress.frames``;
        every ``--dist.check-sync-every`` updates, also check that all ranks hold the same
        weights."""
        self.logger.log(progress.frames, metrics, step=progress.updates)
        every = self.cfg.dist.check_sync_every
        if self.proc.world_size > 1 and every and progress.updates % every == 0:
            distributed.check_in_sync(unique_parameters(self.modules()))

    def on_schedule(self, progress: Progress) -> None:
        """After each batch's update: stop on a stop signal (``stop``: checkpoint, then requeue
        or exit); evaluate, record a video, checkpoint, each when its ``--log.*-every-frames``
        comes due; then restart the batch clock."""
        if self.proc.signals.requested():  # SLURM preemption / time limit, Ctrl-C
            self.stop(progress)
        if self.due["evaluation"](progress.frames):
            self.evaluate(progress.frames)
        if self.due["video"](progress.frames):
            self.record_video(progress.frames)
        if self.due["checkpoint"](progress.frames):
            self.checkpoint(progress)
        progress.restart_clock()

    def evaluate(self, frames: int) -> dict[str, float]:
        """Greedy and sampled evaluation episodes of the registered policy (rank 0), logged
        under ``eval/``."""
        if self.cfg.log.eval_episodes == 0 or self.agent is None or not self.proc.is_main:
            return {}
        env, episodes = self.cfg.env, self.cfg.log.eval_episodes
        per_step = frames_per_step(env)
        with self.logger.side_bar("evaluation episodes", 2 * episodes) as tick:
            result, greedy = evaluate(
                env,
                self.agent.eval_policy,
                episodes=episodes,
                seed=self.cfg.seed + 10_000_019 + frames,
                device=self.proc.device,
                on_step=None if tick is None else lambda ended: tick(per_step, ended),
                state=self.acting_state,
            )
        warn_if_capped(env, greedy, frames)
        self.logger.eval(frames, result)
        return result

    def record_video(self, frames: int) -> Path | None:
        """One greedy episode (rank 0) to RUN_DIR/videos/frames_<frames>.mp4 and TensorBoard."""
        if self.agent is None or not self.proc.is_main:
            return None
        path = self.dir / "videos" / f"frames_{frames:012d}.mp4"
        episode = record_video(self.cfg.env, self.agent.eval_policy, path,
                               seed=self.cfg.seed + 20_000_033 + frames, device=self.proc.device,
                               max_steps=self.cfg.log.video_max_steps,
                               state=self.acting_state)  # fmt: skip
        self.logger.video(frames, path)
        log.info("video %s: score %g in %d steps", path, episode.score, episode.steps)
        return path

    def checkpoint(self, progress: Progress) -> Path | None:
        """Write the run's state atomically (rank 0; the other ranks hold the same weights)."""
        if not self.proc.is_main:
            return None
        for module in self.modules():
            for name, p in module.named_parameters():
                if not torch.isfinite(p).all():
                    raise NonFiniteError(f"parameter {name} is not finite; checkpoint not written")
        state = {
            "algo": self.algo,
            "frames": progress.frames,
            "updates": progress.updates,
            "components": {name: comp.state_dict() for name, comp in self.components.items()},
            "logger": self.logger.state_dict(),
            "rng": capture_rng(),
        }
        return save_checkpoint(self.dir, state, progress.frames, keep=self.cfg.log.keep_checkpoints)

    def stop(self, progress: Progress) -> None:
        """After a stop signal: checkpoint (rank 0), close the logs, hand over to the handler
        installed before ours (submitit requeues the job there), else raise ``RunInterrupted``
        (the command line exits 128 + signal)."""
        path = self.checkpoint(progress) if self.proc.is_main else None
        self.logger.close()
        signum = self.proc.signals.signum or signal.SIGTERM
        # Logged before the hand-over: submitit's handler requeues the job and exits.
        log.warning(
            "%s: stopped at %d frames, %d updates; checkpoint %s",
            signal.Signals(signum).name,
            progress.frames,
            progress.updates,
            path,
        )
        self.proc.signals.hand_over()
        raise RunInterrupted(signum, progress.frames, path)

    # ----- end ------------------------------------------------------------------------------

    def finish(self, progress: Progress) -> dict[str, Any]:
        """Final evaluation and checkpoint; writes and returns the run's summary."""
        fps = progress.fps
        self.proc.signals.restore()  # a stop signal from here on ends the run at once
        evals = self.evaluate(progress.frames) if self.cfg.log.eval_episodes else {}
        saved = list_checkpoints(self.dir)
        if not saved or saved[-1].stem != f"ckpt_{progress.frames:012d}":
            self.checkpoint(progress)
        summary: dict[str, Any] = {
            "frames": progress.frames,
            "updates": progress.updates,
            "episodes": self.logger.episodes_seen,
            "mean_return_100": self.logger.mean_return(100),
            "fps": fps,
            "first_batch_s": progress.first_batch_s,
            "run_dir": str(self.dir),
            **evals,
            "weights_checksum": self.weights_checksum(),
        }
        if self.proc.world_size > 1:
            summary["rank"], summary["world_size"] = self.proc.dist.rank, self.proc.world_size
        if self.proc.is_main:
            (self.dir / "summary.json").write_text(dumps(summary, indent=2))
        self.logger.close()
        distributed.finish_together()
        return summary

    def where(self) -> str:
        """Where the run stands, for error messages: frames, update, latest checkpoint."""
        if self.progress is None:
            return ""
        saved = list_checkpoints(self.dir)
        latest = saved[-1] if saved else "none yet"
        p = self.progress
        return f" at {p.frames} frames, update {p.updates + 1}; latest checkpoint: {latest}"

    def __enter__(self) -> RunFolder:
        self.proc.signals.install()
        return self

    def __exit__(self, kind: type | None, err: BaseException | None, tb: Any) -> bool:
        self.proc.signals.restore()
        if err is not None:
            if isinstance(err, RunFailure):
                err.where = self.where()  # the command line prints both in one line
            self.logger.close()
        self.lock.release()
        return False
