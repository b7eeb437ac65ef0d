"""Gymnasium envs behind the same keys as Atari: registered ids (CartPole-v1, Acrobot-v1, ...)
and your own as ``module:Id-v0`` (gymnasium's convention: importing ``module`` registers
``Id-v0``), with keyword arguments from ``--env.kwargs`` (JSON).

Observations: a vector ``Box`` is passed on as float32 (the models give it an MLP); a uint8
image ``Box`` (``HxW``, ``HxWxC`` or ``CxHxW``) becomes Atari's stack, grayscale frames resized to
``screen_size`` square, the last ``frame_stack`` of them as channels (``pixels`` uint8
``[frame_stack, S, S]``, zeros before an episode's first frame; the Nature CNN by its shape).
Actions: ``Discrete``. Other spaces are refused, by ``check``, in one line naming the space.

They run in one process as a gymnasium ``SyncVectorEnv`` (these simulators cost microseconds a
step, so worker processes would only add overhead) and serve fast learning tests.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import cv2
import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torchrl.data import Bounded, Unbounded
from torchrl.envs import EnvBase

from accelrl.config import EnvConfig
from accelrl.envs.backend import (
    EnvBackend,
    MissingExtra,
    refuse_fire_on_life_loss,
    refuse_hide_velocities,
    register,
)
from accelrl.envs.vector import SameStepVectorEnv
from accelrl.errors import ConfigError, check_positive

SUPPORTED = (
    "accelrl runs Discrete actions with a vector Box observation (an MLP) or a uint8 image Box, "
    "HxW, HxWxC or CxHxW (a CNN); not continuous actions, Dict or Tuple spaces"
)


class UnsupportedSpace(ValueError):
    """An env whose observation or action space accelrl cannot learn on; names the space."""


def observation_layout(space: gym.Space) -> str:
    """How an observation space is read: ``vector`` (1-D Box), or an image's axes ``hw``,
    ``hwc``, ``chw`` (uint8 Box; the channels are the shorter of the first and last axes).
    Raises ``UnsupportedSpace``."""
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) == 1:
            return "vector"
        if space.dtype == np.uint8 and len(space.shape) == 2:
            return "hw"
        if space.dtype == np.uint8 and len(space.shape) == 3:
            return "hwc" if space.shape[-1] <= space.shape[0] else "chw"
    raise UnsupportedSpace(f"observation space {space}")


def check_action_space(space: gym.Space) -> None:
    """Raises ``UnsupportedSpace`` unless ``space`` is ``Discrete``."""
    if not isinstance(space, gym.spaces.Discrete):
        raise UnsupportedSpace(f"action space {space}")


def env_id(game: str) -> str:
    """The gymnasium id of ``--env.game``: ``module:Id-v0`` imports ``module`` first (which
    registers ``Id-v0``; in every process that builds the env). Raises ``MissingExtra`` naming
    the module when it cannot be imported."""
    module, sep, name = game.rpartition(":")
    if sep:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise MissingExtra(
                f"--env.game {game}: cannot import module {module!r} ({err}); install it or "
                "put its folder on PYTHONPATH"
            ) from None
    return name


def env_kwargs(cfg: EnvConfig) -> dict[str, Any]:
    """``--env.kwargs`` as a dict (``{}`` when empty); raises ``ValueError`` unless it is a JSON
    object."""
    if not cfg.kwargs:
        return {}
    value = json.loads(cfg.kwargs)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


class GymVectorEnv(SameStepVectorEnv):
    """``num_envs`` copies of a gymnasium env with Discrete actions and vector or image Box
    observations (the module docstring says how each is read)."""

    obs_key = "observation"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        seed: int = 0,
        hidden: tuple[int, ...] = (),
        kwargs: dict[str, Any] | None = None,
        frame_stack: int = 4,
        screen_size: int = 84,
    ) -> None:
        self.env_name = env_id
        self._hidden = list(hidden)  # observation indices written as zeros
        self._vec = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            **(kwargs or {}),
        )
        space, actions = self._vec.single_observation_space, self._vec.single_action_space
        try:
            self._layout = observation_layout(space)
            check_action_space(actions)
        except UnsupportedSpace as err:
            raise ValueError(f"env {env_id!r} has {err}: {SUPPORTED}") from None
        self._action_start = int(actions.start)
        if self._layout == "vector":
            obs = Unbounded(shape=(num_envs, *space.shape), dtype=torch.float32)
        else:
            self.obs_key = "pixels"  # frames, as Atari's (the replay stacks them by this key)
            self._size = screen_size
            self._stack = np.zeros((num_envs, frame_stack, screen_size, screen_size), np.uint8)
            obs = Bounded(0, 255, shape=self._stack.shape, dtype=torch.uint8)
        super().__init__(
            num_envs=num_envs,
            rows=num_envs,
            obs_spec=obs,
            num_actions=int(actions.n),
            clip_rewards=False,
            seed=seed,
        )
        self._ids = np.arange(num_envs)
        self._final: np.ndarray | None = None

    def _observe(self, obs: np.ndarray) -> np.ndarray:
        out = obs.astype(np.float32)  # a copy: gymnasium reuses its buffers
        out[..., self._hidden] = 0.0
        return out

    def _frames(self, obs: np.ndarray) -> np.ndarray:
        """Image observations ``[n, ...]`` as grayscale frames ``[n, S, S]`` uint8."""
        if self._layout == "chw":
            obs = obs.transpose(0, 2, 3, 1)
        frames = []
        for image in obs:
            if self._layout != "hw":
                channels = image.shape[-1]
                if channels in (3, 4):
                    image = cv2.cvtColor(np.ascontiguousarray(image[..., :3]), cv2.COLOR_RGB2GRAY)
                else:
                    image = image.mean(axis=-1).astype(np.uint8)
            if image.shape != (self._size, self._size):
                image = cv2.resize(image, (self._size, self._size), interpolation=cv2.INTER_AREA)
            frames.append(image)
        return np.stack(frames)

    def _raw_reset(self, seeds):
        obs, _ = self._vec.reset(seed=[int(s) for s in seeds])
        if self._layout == "vector":
            return self._observe(obs), self._ids, None
        self._stack = np.zeros_like(self._stack)
        self._stack[:, -1] = self._frames(obs)
        return self._stack, self._ids, None

    def _raw_step(self, actions):
        obs, reward, terminated, truncated, info = self._vec.step(actions + self._action_start)
        if self._layout == "vector":
            obs = self._observe(obs)
        else:
            # A new array each step: the TensorDicts of earlier steps keep theirs.
            stack = np.concatenate([self._stack[:, 1:], self._frames(obs)[:, None]], axis=1)
            ended = terminated | truncated
            if ended.any():
                self._final = stack.copy()
                final = np.stack(list(info["final_obs"][ended]))
                self._final[ended, -1] = self._frames(final)
                stack[ended, :-1] = 0  # a new episode's stack starts from zeros
            self._stack = obs = stack
        return obs, reward, terminated, truncated, self._ids, None, info

    def _final_obs(self, obs, ended, info):
        if self._layout != "vector":
            return self._final
        out = obs.copy()
        out[ended] = self._observe(np.stack(list(info["final_obs"][ended])))
        return out


CARTPOLE_VELOCITIES = (1, 3)
"""CartPole's observation indices of the cart's velocity and the pole's angular velocity."""


def make_vector_obs_env(
    game: str,
    num_envs: int,
    *,
    seed: int,
    hide_velocities: bool = False,
    kwargs: dict[str, Any] | None = None,
    frame_stack: int = 4,
    screen_size: int = 84,
) -> GymVectorEnv:
    """A seeded ``GymVectorEnv`` of ``game`` (a gymnasium id or ``module:Id-v0``); raises
    ``ValueError`` for ids gymnasium does not know. ``hide_velocities``: CartPole's
    velocities read as zeros."""
    name = env_id(game)
    if name not in gym.registry:
        raise ValueError(f"unknown env {game!r}: not an Atari game and not a gymnasium id")
    hidden = CARTPOLE_VELOCITIES if hide_velocities else ()
    env = GymVectorEnv(
        name,
        num_envs,
        seed=seed,
        hidden=hidden,
        kwargs=kwargs,
        frame_stack=frame_stack,
        screen_size=screen_size,
    )
    env.set_seed(seed)
    return env


@register
class ClassicBackend(EnvBackend):
    """Gymnasium ids with Box observations and Discrete actions (CartPole-v1, Acrobot-v1, ...,
    and ``module:Id-v0``)."""

    name = "classic"
    games = (
        "gymnasium ids with vector or image observations (CartPole-v1, Acrobot-v1, ...; your "
        "own as module:Id-v0)"
    )

    def runs(self, game: str) -> bool:
        # module:Id-v0 is gymnasium's way to name an env that importing the module registers;
        # whether it does is checked (and the module imported) by ``check``.
        return game in gym.registry or ":" in game

    def check(self, cfg: EnvConfig, prefix: str = "env") -> None:
        refuse_fire_on_life_loss(cfg, prefix)
        if not cfg.game.startswith("CartPole"):
            refuse_hide_velocities(cfg, prefix)
        try:
            name = env_id(cfg.game)
        except MissingExtra as err:
            raise ConfigError(f"{prefix}.game", cfg.game, str(err).split(": ", 1)[1]) from None
        if name not in gym.registry:
            module = cfg.game.rpartition(":")[0]
            raise ConfigError(
                f"{prefix}.game",
                cfg.game,
                f"importing {module} registered no env {name!r}; register it there with "
                f"gymnasium.register(id={name!r}, entry_point=...)",
            )
        try:
            kwargs = env_kwargs(cfg)
        except ValueError as err:
            raise ConfigError(
                f"{prefix}.kwargs",
                cfg.kwargs,
                f"must be a JSON object such as '{{\"size\": 5}}' ({err})",
            ) from None
        # One simulator, built briefly: what its spaces are, and whether it takes the kwargs.
        try:
            env = gym.make(name, disable_env_checker=True, **kwargs)
        except TypeError as err:
            raise ConfigError(
                f"{prefix}.kwargs", cfg.kwargs, f"{name} does not take them: {err}"
            ) from None
        try:
            layout = observation_layout(env.observation_space)
            check_action_space(env.action_space)
        except UnsupportedSpace as err:
            raise ConfigError(f"{prefix}.game", cfg.game, f"has {err}: {SUPPORTED}") from None
        finally:
            env.close()
        if layout != "vector":
            check_positive(f"{prefix}.frame_stack", cfg.frame_stack)
            if cfg.screen_size < 36:
                raise ConfigError(
                    f"{prefix}.screen_size", cfg.screen_size, "must be >= 36 for the CNN"
                )

    def make(
        self, cfg: EnvConfig, *, num_envs: int, seed: int, sim_threads: int, synchronous: bool
    ) -> EnvBase:
        return make_vector_obs_env(
            cfg.game,
            num_envs,
            seed=seed,
            hide_velocities=cfg.hide_velocities,
            kwargs=env_kwargs(cfg),
            frame_stack=cfg.frame_stack,
            screen_size=cfg.screen_size,
        )
