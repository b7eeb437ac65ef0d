"""The "gym" Atari backend: gymnasium ALE envs in TorchRL ``ParallelEnv`` worker processes.

Slower than ``ale_vec`` (one process and one Python step loop per simulator) but an ordinary
TorchRL env, so custom TorchRL transforms can be put on top of it or into the workers. Each worker
runs one ``gymnasium.make("ALE/<Game>-v5", frameskip=1)`` env and does all preprocessing itself,
with the same semantics as ale-py's C++ vector env behind ``ale_vec``:

- at reset: FIRE for one emulator frame in games whose minimal action set has FIRE (when
  ``fire_reset``), then ``U{0, noop_max - 1}`` no-op frames, one fewer if FIRE was pressed;
- each agent step: the action for ``frameskip`` frames, max-pooled over the last two, grayscale and
  resized to ``screen_size`` (INTER_AREA), by gymnasium's ``AtariPreprocessing`` (needs opencv);
- a ``frame_stack`` of frames, zero-filled at reset;
- truncation after ``max_episode_frames`` emulator frames counted from the end of the reset.

The keys, shapes, dtypes and specs are those of ``accelrl.envs.ale_vec.AleVecEnv`` (see its
module docstring), with batch ``[num_envs]``; ``env_id`` is the worker index and worker ``i`` is
seeded ``seed + i`` (also after ``env.set_seed(seed)``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers import AtariPreprocessing
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase, ParallelEnv

from accelrl.config import EnvConfig
from accelrl.envs.backend import (
    EnvBackend,
    leave_ctrl_c_to_the_learner,
    refuse_async_batch,
    refuse_hide_velocities,
    register,
)
from accelrl.envs.games import action_set, close_games, gym_id, rom_id
from accelrl.errors import ConfigError, check_positive, check_probability

ATARI_STICKY_ACTIONS = 0.25
"""ALE v5's probability of repeating the previous action, used when ``--env.sticky-actions`` is
not given (the paper's setting: 0)."""


def sticky_actions(cfg: EnvConfig) -> float:
    """``cfg.sticky_actions``, or ALE v5's 0.25 when it is not set."""
    return ATARI_STICKY_ACTIONS if cfg.sticky_actions is None else cfg.sticky_actions


def _ale_gym_env(cfg: EnvConfig):
    """The gymnasium env of one worker: raw ALE at frameskip 1, reset and frame preprocessing."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(
        gym_id(cfg.game),
        frameskip=1,
        obs_type="grayscale",  # unused (AtariPreprocessing reads the screen), cheaper than RGB
        repeat_action_probability=sticky_actions(cfg),
        full_action_space=False,
        # The episode cap is counted by the worker from the end of the reset (as ale-py's vector
        # env does); ALE's own cap, which also counts the reset frames, only backs it up.
        max_num_frames_per_episode=cfg.max_episode_frames + cfg.noop_max + 1,
        disable_env_checker=True,
    )
    env = _FireNoopReset(env, noop_max=cfg.noop_max, fire=cfg.fire_reset)
    return AtariPreprocessing(
        env,
        noop_max=0,
        frame_skip=cfg.frameskip,
        screen_size=cfg.screen_size,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )


class _FireNoopReset(gym.Wrapper):
    """Resets as ale-py's vector env: FIRE for one frame, then ``U{0, noop_max - 1}`` no-op frames
    (one fewer after FIRE). Sits below ``AtariPreprocessing``, which then reads the screen."""

    def __init__(self, env: gym.Env, *, noop_max: int, fire: bool) -> None:
        super().__init__(env)
        self.noop_max = noop_max
        meanings = env.unwrapped.get_action_meanings()
        self.fire_action = meanings.index("FIRE") if fire and "FIRE" in meanings else None

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        rng = self.env.unwrapped.np_random
        noops = int(rng.integers(0, self.noop_max)) if self.noop_max > 0 else 0
        if self.fire_action is not None:
            obs, _, _, _, info = self.env.step(self.fire_action)
            noops -= 1
        for _ in range(noops):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class AtariWorkerEnv(EnvBase):
    """One preprocessed ALE simulator as an unbatched TorchRL env (what each worker runs)."""

    def __init__(self, cfg: EnvConfig, *, worker_index: int = 0, seed: int = 0) -> None:
        super().__init__(batch_size=torch.Size([]), device="cpu")
        self.worker_index = worker_index
        self.max_frames = cfg.max_episode_frames
        self._env = _ale_gym_env(cfg)
        self._ale = self._env.unwrapped.ale
        self._pending_seed: int | None = seed + worker_index
        self._stack = np.zeros((cfg.frame_stack, cfg.screen_size, cfg.screen_size), np.uint8)
        self._lives = 0
        self._frame0 = 0
        self._ep_return = 0.0
        self._ep_length = 0
        self._env_id = torch.tensor([worker_index], dtype=torch.int64)
        self.num_actions = int(self._env.action_space.n)
        self._make_specs()

    def _make_specs(self) -> None:
        col = Unbounded(shape=(1,), dtype=torch.float32)
        flag = Categorical(2, shape=(1,), dtype=torch.bool)
        self.observation_spec = Composite(
            pixels=Bounded(0, 255, shape=self._stack.shape, dtype=torch.uint8),
            score=col.clone(),
            life_lost=flag.clone(),
            episode_return=col.clone(),
            episode_length=Unbounded(shape=(1,), dtype=torch.int64),
            env_id=Unbounded(shape=(1,), dtype=torch.int64),
        )
        self.action_spec = Categorical(self.num_actions, shape=(), dtype=torch.int64)
        self.reward_spec = col.clone()
        self.done_spec = Composite(
            done=flag.clone(), terminated=flag.clone(), truncated=flag.clone()
        )

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        # ParallelEnv hands every worker the seed the previous one returned: returning it
        # unchanged gives worker i the seed ``seed + i``.
        self._set_seed(None if seed is None else seed + self.worker_index)
        return seed

    def _set_seed(self, seed: int | None) -> None:
        self._pending_seed = seed

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        obs, _ = self._env.reset(seed=self._pending_seed)
        self._pending_seed = None
        self._stack[:-1] = 0
        self._stack[-1] = obs
        self._lives = self._ale.lives()
        self._frame0 = self._ale.getEpisodeFrameNumber()
        self._ep_return = 0.0
        self._ep_length = 0
        false = torch.zeros(1, dtype=torch.bool)
        return TensorDict(
            {
                "pixels": torch.from_numpy(self._stack.copy()),
                "score": torch.zeros(1),
                "life_lost": false,
                "episode_return": torch.zeros(1),
                "episode_length": torch.zeros(1, dtype=torch.int64),
                "env_id": self._env_id.clone(),
                "done": false.clone(),
                "terminated": false.clone(),
                "truncated": false.clone(),
            },
            batch_size=(),
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs, score, terminated, truncated, _ = self._env.step(int(tensordict.get("action")))
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = obs
        lives = self._ale.lives()
        frames = self._ale.getEpisodeFrameNumber() - self._frame0
        truncated = not terminated and (truncated or frames >= self.max_frames)
        done = terminated or truncated
        life_lost = lives < self._lives and not done
        self._lives = lives
        self._ep_return += score
        self._ep_length += 1
        return TensorDict(
            {
                "pixels": torch.from_numpy(self._stack.copy()),
                "reward": torch.tensor([np.sign(score)], dtype=torch.float32),
                "score": torch.tensor([score], dtype=torch.float32),
                "done": torch.tensor([done]),
                "terminated": torch.tensor([bool(terminated)]),
                "truncated": torch.tensor([truncated]),
                "life_lost": torch.tensor([life_lost]),
                "episode_return": torch.tensor([self._ep_return], dtype=torch.float32),
                "episode_length": torch.tensor([self._ep_length], dtype=torch.int64),
                "env_id": self._env_id.clone(),
            },
            batch_size=(),
        )

    def screen_rgb(self) -> np.ndarray:
        """The emulator's full-size RGB screen [210, 160, 3] uint8 (its last frame of the last
        agent step)."""
        return self._ale.getScreenRGB()

    def close(self, *, raise_if_closed: bool = True) -> None:
        env = self.__dict__.get("_env")
        if env is not None:
            env.close()
            self._env = None
        super().close(raise_if_closed=raise_if_closed)


class _AtariParallelEnv(ParallelEnv):
    """``ParallelEnv`` that leaves the parent's torch thread count as it was: TorchRL lowers it
    when the workers start and sets it again on close, which would undo ``ThreadsConfig``."""

    def _start_workers(self) -> None:
        threads = torch.get_num_threads()
        try:
            super()._start_workers()
        finally:
            torch.set_num_threads(threads)

    def close(self, *, raise_if_closed: bool = True) -> None:
        threads = torch.get_num_threads()
        try:
            super().close(raise_if_closed=raise_if_closed)
        finally:
            torch.set_num_threads(threads)


def make_worker_env(
    cfg: EnvConfig, *, seed: int, worker_index: int, parent_pid: int | None = None
) -> AtariWorkerEnv:
    """Picklable factory run in each ``ParallelEnv`` worker (and once in the parent, the
    process ``parent_pid``, for specs). In any other process than ``parent_pid`` (when given)
    it ignores SIGINT."""
    torch.set_num_threads(1)
    if parent_pid is not None and os.getpid() != parent_pid:
        leave_ctrl_c_to_the_learner()
    return AtariWorkerEnv(cfg, worker_index=worker_index, seed=seed)


def make_gym_atari_env(cfg: EnvConfig, num_envs: int, *, seed: int) -> EnvBase:
    """``ParallelEnv`` of ``num_envs`` preprocessed ALE workers, worker ``i`` seeded ``seed+i``.

    Spawned workers need an ``if __name__ == "__main__":`` guard in scripts.
    """
    gym_id(cfg.game)  # unknown games fail here with a ValueError, before any process starts
    threads = torch.get_num_threads()  # the factory also runs here once, to read the specs
    try:
        return _AtariParallelEnv(
            num_envs,
            functools.partial(make_worker_env, cfg, seed=seed, parent_pid=os.getpid()),
            create_env_kwargs=[{"worker_index": i} for i in range(num_envs)],
            mp_start_method="spawn",
            num_sub_threads=1,
        )
    finally:
        torch.set_num_threads(threads)


class AtariBackend(EnvBackend):
    """What both Atari backends share: game names, settings, specs, the play env.

    ``accelrl.tools.play`` and training videos play with one ``AtariWorkerEnv`` whichever backend
    trained: its preprocessing matches ``ale_vec`` frame for frame and it exposes the
    full-size RGB screen.
    """

    games = "Atari games (Pong, ALE/Pong-v5, ...: accelrl.envs.available_games())"
    selectable = True
    renders = True

    def runs(self, game: str) -> bool:
        try:
            rom_id(game)
        except ValueError:
            return False
        return True

    def suggest(self, game: str) -> list[str]:
        return close_games(game)

    def check(self, cfg: EnvConfig, prefix: str = "env") -> None:
        refuse_hide_velocities(cfg, prefix)
        if not 0 <= cfg.async_batch_size < cfg.num_envs and cfg.async_batch_size != 0:
            raise ConfigError(
                f"{prefix}.async_batch_size",
                cfg.async_batch_size,
                f"must be 0 (sync) or between 1 and num_envs-1={cfg.num_envs - 1}",
            )
        check_positive(f"{prefix}.frameskip", cfg.frameskip)
        check_positive(f"{prefix}.frame_stack", cfg.frame_stack)
        if cfg.screen_size < 36:
            raise ConfigError(f"{prefix}.screen_size", cfg.screen_size, "must be >= 36 for the CNN")
        check_positive(f"{prefix}.noop_max", cfg.noop_max, zero_ok=True)
        if cfg.sticky_actions is not None:
            check_probability(f"{prefix}.sticky_actions", cfg.sticky_actions)
        check_positive(f"{prefix}.max_episode_frames", cfg.max_episode_frames)

    def frames_per_step(self, cfg: EnvConfig) -> int:
        return cfg.frameskip

    def describe(self, cfg: EnvConfig) -> dict[str, Any]:
        # Both backends emit the same frames; the action count is the minimal set's size.
        return {
            "obs_key": "pixels",
            "obs_shape": (cfg.frame_stack, cfg.screen_size, cfg.screen_size),
            "num_actions": len(action_set(cfg.game)),
        }

    def play_env(self, cfg: EnvConfig, seed: int) -> EnvBase:
        return AtariWorkerEnv(cfg, seed=seed)

    def screen(self, env: EnvBase) -> np.ndarray:
        return env.screen_rgb()

    def video_fps(self, cfg: EnvConfig) -> float:
        return 60.0 / cfg.frameskip  # the emulator's 60 Hz, one frame per agent step


@register
class GymAtariBackend(AtariBackend):
    """``--env.backend gym``: ``ParallelEnv`` of preprocessed ALE workers (this module)."""

    name = "gym"
    in_process = False

    def check(self, cfg: EnvConfig, prefix: str = "env") -> None:
        super().check(cfg, prefix)
        refuse_async_batch(cfg, prefix)
        if cfg.fire_on_life_loss:
            raise ConfigError(f"{prefix}.fire_on_life_loss", True, "needs backend ale_vec")

    def make(
        self, cfg: EnvConfig, *, num_envs: int, seed: int, sim_threads: int, synchronous: bool
    ) -> EnvBase:
        return make_gym_atari_env(cfg, num_envs, seed=seed)
