"""The mechanics every recipe shares, one call each: run folder, seeds, threads, device, resume,
episode bookkeeping, logging, evaluation and checkpoints.

A recipe creates a ``Run`` from its validated config, ``attach``-es its model and learner (which
resumes them when asked), then either hands the learner to ``train_on_policy`` (PPO, A2C) or
runs its own loop over ``make_collector(policy)`` calling ``collected(batch)`` and
``updated(metrics)`` per batch and ``finish()`` at the end (DQN, with its replay).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential

from accelrl import distributed
from accelrl.algos.common import NonFiniteError, nonfinite
from accelrl.checkpoint import (
    UnsafeCheckpoint,
    capture_rng,
    list_checkpoints,
    load_latest,
    restore_rng,
    save_checkpoint,
)
from accelrl.collect import (
    ThreadPlan,
    WatchedCollector,
    core_shortfall,
    make_collector,
    plan_threads,
)
from accelrl.config import ConfigError, cpu_count, resolve_device, to_dict
from accelrl.envs import frames_per_step, make_env
from accelrl.evaluate import evaluate
from accelrl.logging import RunLogger
from accelrl.samplers import VersionStamp, policy_lag

log = logging.getLogger("accelrl")


class Stateful(Protocol):
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


def default_run_dir(algo: str, game: str) -> Path:
    name = game.replace("/", "_").replace("-v5", "")
    return Path("runs") / f"{algo}-{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def describe_env(env_cfg) -> dict[str, Any]:
    """Observation key/shape and action count of the env a config describes (built briefly)."""
    # Both Atari backends have the same specs; ale_vec builds in-process in milliseconds while the
    # gym backend would spawn a worker just to report them.
    probe = replace(env_cfg, num_envs=1, async_batch_size=0, backend="ale_vec")
    env = make_env(probe, seed=0, sim_threads=1)
    try:
        key = env.obs_key
        return {
            "obs_key": key,
            "obs_shape": tuple(env.observation_spec[key].shape[1:]),
            "num_actions": env.num_actions,
        }
    finally:
        env.close()


current_run: Run | None = None
"""The latest ``Run`` of this process (error messages name its folder and checkpoint)."""


def describe_progress() -> str:
    """Where the current run stands: frames, updates and its newest checkpoint."""
    run = current_run
    if run is None:
        return ""
    saved = list_checkpoints(run.dir)
    latest = saved[-1] if saved else "none yet"
    return f" at {run.frames} frames, update {run.updates + 1}; latest checkpoint: {latest}"


class RunInterrupted(Exception):
    """The run stopped on SIGTERM / SIGUSR2 after writing a checkpoint."""

    def __init__(self, signum: int, frames: int, checkpoint: Path | None) -> None:
        self.signum, self.frames, self.checkpoint = signum, frames, checkpoint
        name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {name} at {frames} frames; checkpoint {checkpoint}; continue with "
            "--resume and the same --run-dir"
        )


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


class Run:
    """One training run: its folder, counters, logger and checkpoints."""

    def __init__(self, cfg: Any, algo: str) -> None:
        self.cfg = cfg
        self.algo = algo
        _setup_console_logging()
        # Data-parallel runs (torchrun / SLURM): join the group; one rank alone writes.
        self.dist = distributed.init_from_environment()
        run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(algo, cfg.env.game)
        self.dir = Path(distributed.gather_objects(str(run_dir))[0])
        self._check_resume_target()
        if self.dist.is_main:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.device = torch.device(distributed.rank_device(resolve_device(cfg.device)))
        self.threads: ThreadPlan = plan_threads(
            cfg.threads, cfg.collector.num_workers, cores=self._cores_per_rank()
        )
        torch.set_num_threads(self.threads.learner_torch)
        shortfall = core_shortfall(self.threads.cores, cfg.env, cfg.collector)
        if shortfall:
            log.warning("rank %d: %s", self.dist.rank, shortfall)
        self.frame_skip = frames_per_step(cfg.env)
        self.frames = 0
        self.updates = 0
        self.components: dict[str, Stateful] = {}
        self.policy: torch.nn.Module | None = None
        self._scale_learning_rate()
        if self.dist.is_main:
            self._write_config()
        seed_everything(cfg.seed)
        self._stop_signal: int | None = None
        self._previous_handlers: dict[int, Any] = {}
        self._install_signal_handlers()
        nonfinite.policy, nonfinite.skipped = cfg.on_nonfinite, 0
        global current_run
        current_run = self
        self._t_start = time.perf_counter()
        self._frames_at_start = 0
        self._t_batch = self._t_start
        self._t_collect = 0.0
        self._next_eval = cfg.log.eval_every_frames or None
        self._next_ckpt = cfg.log.checkpoint_every_frames
        self.logger: RunLogger | None = None
        self._env_spec: dict[str, Any] | None = None
        self._stamp: VersionStamp | None = None
        self._lag: dict[str, float] = {}
        self.dropped_frames = 0
        log.info("run dir %s, device %s, %s", self.dir, self.device, self.threads.describe())

    def _cores_per_rank(self) -> int:
        cores = cpu_count()
        # torchrun starts every local rank with the whole machine's affinity; SLURM tasks
        # usually get their own cores already.
        if self.dist.local_world_size > 1 and cores == (os.cpu_count() or cores):
            cores = max(1, cores // self.dist.local_world_size)
        return cores

    def _scale_learning_rate(self) -> None:
        """``dist.lr_scaling``: multiply the recipe's learning rate (the ``lr`` of its algorithm
        section) by N or sqrt(N) for N ranks."""
        n, rule = self.dist.world_size, self.cfg.dist.lr_scaling
        if n == 1 or rule == "none":
            return
        factor = float(n) if rule == "linear" else math.sqrt(n)
        for name in ("ppo", "appo", "a2c", "dqn"):
            section = getattr(self.cfg, name, None)
            if section is not None and hasattr(section, "lr"):
                old = section.lr
                section.lr = old * factor
                log.info(
                    "%s.lr %.3g -> %.3g (%s scaling, %d ranks)", name, old, section.lr, rule, n
                )

    def _install_signal_handlers(self) -> None:
        """SIGTERM / SIGUSR2 (SLURM's warnings before a time limit or preemption) ask the run
        to stop at the next batch boundary, write a checkpoint and exit; a handler installed
        before ours (submitit's, which requeues the job) runs after the checkpoint."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGUSR2):
            self._previous_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        # submitit's preemption sends SIGTERM then USR2; USR2 is the one that requeues.
        if self._stop_signal != signal.SIGUSR2:
            self._stop_signal = signum

    def _restore_signal_handlers(self) -> None:
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers = {}

    def _stop_for_signal(self) -> None:
        """Checkpoint (rank 0), then hand over to the earlier handler or exit."""
        signum = self._stop_signal or signal.SIGTERM
        name = signal.Signals(signum).name
        path = self.checkpoint() if self.dist.is_main else None
        if self.logger is not None:
            self.logger.close()
        previous = self._previous_handlers.get(signum)
        self._restore_signal_handlers()
        log.warning(
            "%s: stopped at %d frames, %d updates; checkpoint %s",
            name,
            self.frames,
            self.updates,
            path,
        )
        if callable(previous):
            previous(signum, None)  # submitit: checkpoint() + requeue, then exit
        raise RunInterrupted(signum, self.frames, path)

    def _check_resume_target(self) -> None:
        cfg = self.cfg
        if cfg.resume:
            saved = self.dir / "config.json"
            if not list_checkpoints(self.dir):
                raise ConfigError("resume", True, f"no checkpoint in {self.dir} to resume from")
            if saved.exists():
                algo = json.loads(saved.read_text()).get("algo")
                if algo != self.algo:
                    raise ConfigError(
                        "run_dir",
                        str(self.dir),
                        f"holds a {algo!r} run; cannot resume it with {self.algo!r}",
                    )
        elif list_checkpoints(self.dir):
            raise ConfigError(
                "run_dir",
                str(self.dir),
                "already holds checkpoints; pass --resume to continue it or pick a new --run-dir",
            )

    def _write_config(self) -> None:
        data = {
            "algo": self.algo,
            "config": to_dict(self.cfg),
            "resolved": {"device": str(self.device), "threads": vars(self.threads)},
        }
        tmp = self.dir / "config.json.tmp"
        tmp.write_text(json.dumps(data, indent=2, default=str))
        os.replace(tmp, self.dir / "config.json")

    def attach(self, policy: torch.nn.Module, **components: Stateful) -> None:
        """Register what checkpoints hold; with ``--resume`` load it all back from the latest."""
        self.policy = policy
        self.components = components
        start = 0
        if self.cfg.resume:
            try:
                found = load_latest(
                    self.dir, map_location=self.device, trust=self.cfg.trust_checkpoint
                )
            except UnsafeCheckpoint as err:
                raise ConfigError("trust_checkpoint", False, str(err)) from None
            if found is None:
                raise ConfigError("resume", True, f"no loadable checkpoint in {self.dir}")
            state, path = found
            if state.get("algo") != self.algo:
                raise ConfigError(
                    "resume",
                    True,
                    f"{path} is a {state.get('algo')!r} checkpoint, not {self.algo!r}",
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
            self.frames, self.updates = int(state["frames"]), int(state["updates"])
            restore_rng(state["rng"])
            start = self.frames
            log.info("resumed from %s at %d frames, %d updates", path, self.frames, self.updates)
        if self.dist.world_size > 1:
            for module in self._modules():
                distributed.broadcast_module(module)
            # Same weights everywhere; different action samples and minibatch orders.
            seed_everything(self.cfg.seed + 1_000_003 * self.dist.rank + self.updates)
        if self.dist.is_main:
            self.logger = RunLogger(
                self.dir,
                total_frames=self.cfg.total_frames,
                start_frames=start,
                tensorboard=self.cfg.log.tensorboard,
                progress=self.cfg.log.progress,
                trackers=tuple(self.cfg.log.trackers),
                project=self.cfg.log.project,
                config={"algo": self.algo, **to_dict(self.cfg)},
            )
            if self.cfg.resume:
                self.logger.load_state_dict(state["logger"])
        else:
            self.logger = NullLogger()
        self._frames_at_start = self.frames
        self._next_ckpt = (self.frames // self.cfg.log.checkpoint_every_frames + 1) * (
            self.cfg.log.checkpoint_every_frames
        )
        if self._next_eval:
            every = self.cfg.log.eval_every_frames
            self._next_eval = (self.frames // every + 1) * every
        # Videos already recorded (a resumed run does not record the current one again).
        self._videos_done = self.frames // max(1, self.cfg.log.video_every_frames)
        self._t_start = self._t_batch = time.perf_counter()

    def _modules(self) -> list[torch.nn.Module]:
        """The networks the components hold (for broadcasts and checksums)."""
        found: dict[int, torch.nn.Module] = {}
        for comp in self.components.values():
            for value in vars(comp).values():
                if isinstance(value, torch.nn.Module):
                    found.setdefault(id(value), value)
        if self.policy is not None:
            found.setdefault(id(self.policy), self.policy)
        return list(found.values())

    def weights_checksum(self) -> float:
        params = {id(p): p for m in self._modules() for p in m.parameters()}
        return distributed.parameters_checksum(list(params.values()))

    @property
    def env_spec(self) -> dict[str, Any]:
        """``obs_key``, ``obs_shape`` and ``num_actions`` of the run's env."""
        if self._env_spec is None:
            self._env_spec = describe_env(self.cfg.env)
        return self._env_spec

    def make_collector(self, policy: torch.nn.Module):
        """The run's collector (``accelrl.collect.make_collector``) acting with ``policy``.

        Asynchronous kinds label every step with the version (learner update count) of the
        weights that took it; call ``sync_weights(collector)`` after each update.
        """
        kind = self.cfg.collector.kind
        self._stamp = None
        if kind == "async":
            self._stamp = VersionStamp(self.updates).to(self.device)
            policy = TensorDictSequential(policy, self._stamp)
        collector = make_collector(
            self.cfg.env,
            self.cfg.collector,
            policy,
            seed=self.collect_seed,
            plan=self.threads,
            learner_device=str(self.device),
            start_version=self.updates,
        )
        stall = self.cfg.collector.stall_timeout_s
        return WatchedCollector(collector, stall_timeout_s=stall, startup_timeout_s=5 * stall)

    def sync_weights(self, collector: Any) -> None:
        """Send the learner's new weights (and their version) to the collector's actors."""
        if self._stamp is not None:
            self._stamp.bump()
        collector.update_policy_weights_()

    def accept(self, batch: TensorDictBase) -> bool:
        """Policy lag bookkeeping for asynchronous batches: False (drop it) when the oldest
        step acted more than ``collector.max_policy_lag`` updates ago."""
        lag_max, lag_mean = policy_lag(batch, self.updates)
        self._lag = {"async/policy_lag_max": lag_max, "async/policy_lag_mean": lag_mean}
        if lag_max > self.cfg.collector.max_policy_lag:
            self.dropped_frames += batch.numel() * self.frame_skip
            return False
        return True

    def train_on_policy(self, learner: Any) -> dict[str, Any]:
        """The on-policy loop: collect ``frames_per_batch`` agent steps from every simulator
        with the current policy, ``learner.update`` on them, send the new weights to the
        collector's workers; until ``total_frames``. Returns ``finish()``'s summary.

        With an asynchronous collector the batch may come from older weights: batches beyond
        ``max_policy_lag`` are dropped, and values are recomputed with the current critic
        (the learner sees ``state_value`` only when the acting weights were its own).
        """
        if self.done:  # resumed from a checkpoint at or past total_frames
            return self.finish()
        collector = self.make_collector(learner.policy)
        try:
            for batch in collector:
                if not self.accept(batch):
                    continue
                if self._lag["async/policy_lag_max"] > 0:
                    batch = batch.exclude("state_value", "hidden")
                self.collected(batch)
                metrics = learner.update(batch, progress=self.progress)
                self.sync_weights(collector)
                self.updated({**metrics, **self._lag})
                if self.done:
                    break
        finally:
            collector.shutdown()
        return self.finish()

    @property
    def collect_seed(self) -> int:
        """Simulator seed for this (re)start: resumed runs play new episodes, not replays."""
        return self.cfg.seed * 1_000_003 + self.updates * 7_919 + self.dist.rank * 10_000_019

    @property
    def progress(self) -> float:
        return min(1.0, self.frames / self.cfg.total_frames)

    @property
    def done(self) -> bool:
        return self.frames >= self.cfg.total_frames

    def collected(self, batch: TensorDictBase) -> None:
        """Count a new batch's frames and record the episodes that ended in it."""
        now = time.perf_counter()
        self._t_collect = now - self._t_batch
        self._t_batch = now
        # Every rank collects a batch of the same size; frames count all ranks.
        self.frames += batch.numel() * self.frame_skip * self.dist.world_size
        nxt = batch.get("next")
        done = nxt.get("done").squeeze(-1)
        returns = nxt.get("episode_return")[done].squeeze(-1).cpu()
        lengths = nxt.get("episode_length")[done].squeeze(-1).cpu()
        if self.dist.world_size > 1:
            parts = distributed.gather_objects((returns, lengths))
            returns = torch.cat([p[0] for p in parts])
            lengths = torch.cat([p[1] for p in parts])
        if returns.numel():
            self.logger.episodes(returns, lengths, self.frames)

    def updated(self, metrics: dict[str, float]) -> None:
        """Log the update's metrics and timing, then evaluate and checkpoint when due."""
        now = time.perf_counter()
        t_update = now - self._t_batch
        self._t_batch = now
        self.updates += 1
        elapsed = now - self._t_start
        metrics = {
            **metrics,
            "perf/fps": (self.frames - self._frames_at_start) / max(elapsed, 1e-9),
            "perf/collect_s": self._t_collect,
            "perf/update_s": t_update,
            "perf/dropped_frames": self.dropped_frames,
            "train/skipped_steps": nonfinite.skipped,
            "train/updates": self.updates,
        }
        self.logger.log(self.frames, metrics, step=self.updates)
        every = self.cfg.dist.check_sync_every
        if self.dist.world_size > 1 and every and self.updates % every == 0:
            params = {id(p): p for m in self._modules() for p in m.parameters()}
            distributed.check_in_sync(list(params.values()))
        if distributed.any_rank(self._stop_signal is not None):
            self._stop_for_signal()
        if self._next_eval is not None and self.frames >= self._next_eval:
            self.evaluate()
            self._next_eval += self.cfg.log.eval_every_frames
        video_every = self.cfg.log.video_every_frames
        if video_every and self.frames // video_every > self._videos_done:
            self._videos_done = self.frames // video_every
            self.record_video()
        if self.frames >= self._next_ckpt:
            self.checkpoint()
            while self._next_ckpt <= self.frames:
                self._next_ckpt += self.cfg.log.checkpoint_every_frames
        # Evaluation and checkpoints are not collection time.
        self._t_batch = time.perf_counter()

    def record_video(self) -> Path | None:
        """One greedy episode (rank 0) to RUN_DIR/videos/frames_<frames>.mp4 and TensorBoard."""
        if self.policy is None or not self.dist.is_main:
            return None
        from accelrl.play import record_video

        path = self.dir / "videos" / f"frames_{self.frames:012d}.mp4"
        episode = record_video(
            self.cfg.env,
            self.policy,
            path,
            seed=self.cfg.seed + 20_000_033 + self.frames,
            device=self.device,
            max_steps=self.cfg.log.video_max_steps,
        )
        self.logger.video(self.frames, path)
        log.info("video %s: score %g in %d steps", path, episode.score, episode.steps)
        return path

    def evaluate(self) -> dict[str, float]:
        """Greedy and sampled evaluation episodes (rank 0); logged under ``eval/``."""
        if self.cfg.log.eval_episodes == 0 or self.policy is None or not self.dist.is_main:
            return {}
        result = evaluate(
            self.cfg.env,
            self.policy,
            episodes=self.cfg.log.eval_episodes,
            seed=self.cfg.seed + 10_000_019 + self.frames,
            device=self.device,
        )
        self.logger.eval(self.frames, result)
        return result

    def checkpoint(self) -> Path | None:
        """Write the run's state (rank 0; other ranks hold the same weights)."""
        if not self.dist.is_main:
            return None
        for module in self._modules():
            for name, p in module.named_parameters():
                if not torch.isfinite(p).all():
                    raise NonFiniteError(f"parameter {name} is not finite; checkpoint not written")
        state = {
            "algo": self.algo,
            "frames": self.frames,
            "updates": self.updates,
            "components": {name: comp.state_dict() for name, comp in self.components.items()},
            "logger": self.logger.state_dict(),
            "rng": capture_rng(),
        }
        return save_checkpoint(self.dir, state, self.frames, keep=self.cfg.log.keep_checkpoints)

    def finish(self) -> dict[str, Any]:
        """Final evaluation and checkpoint; returns the run's summary."""
        elapsed = time.perf_counter() - self._t_start
        self._restore_signal_handlers()
        evals = self.evaluate() if self.cfg.log.eval_episodes else {}
        saved = list_checkpoints(self.dir)
        if not saved or saved[-1].stem != f"ckpt_{self.frames:012d}":
            self.checkpoint()
        summary = {
            "frames": self.frames,
            "updates": self.updates,
            "episodes": self.logger.episodes_seen,
            "mean_return_100": self.logger.mean_return(100),
            "fps": (self.frames - self._frames_at_start) / max(elapsed, 1e-9),
            "run_dir": str(self.dir),
            **evals,
            "weights_checksum": self.weights_checksum(),
        }
        if self.dist.world_size > 1:
            summary["rank"], summary["world_size"] = self.dist.rank, self.dist.world_size
        if self.dist.is_main:
            (self.dir / "summary.json").write_text(json.dumps(summary, indent=2))
        self.logger.close()
        distributed.finish_together()
        return summary


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (redirected or captured later)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _setup_console_logging() -> None:
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[accelrl] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
