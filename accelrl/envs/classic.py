"""Vector-observation gymnasium envs (CartPole, Acrobot, ...) behind the same keys as Atari.

They run in one process as a gymnasium ``SyncVectorEnv`` (these simulators cost microseconds a
step, so worker processes would only add overhead) and serve fast learning tests.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torchrl.data import Unbounded
from torchrl.envs import EnvBase

from accelrl.config import EnvConfig
from accelrl.envs.backend import (
    EnvBackend,
    refuse_fire_on_life_loss,
    refuse_hide_velocities,
    register,
)
from accelrl.envs.vector import SameStepVectorEnv


class GymVectorEnv(SameStepVectorEnv):
    """``num_envs`` copies of a gymnasium env with Box observations and Discrete actions."""

    obs_key = "observation"

    def __init__(
        self, env_id: str, num_envs: int, *, seed: int = 0, hidden: tuple[int, ...] = ()
    ) -> None:
        self.env_name = env_id
        self._hidden = list(hidden)  # observation indices written as zeros
        self._vec = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        )
        space = self._vec.single_observation_space
        if not isinstance(self._vec.single_action_space, gym.spaces.Discrete):
            raise ValueError(
                f"env {env_id!r} has {self._vec.single_action_space}; accelrl's vector-observation "
                "envs need Discrete actions"
            )
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"env {env_id!r} has observation space {space}; need a Box")
        obs = Unbounded(shape=(num_envs, *space.shape), dtype=torch.float32)
        super().__init__(
            num_envs=num_envs,
            rows=num_envs,
            obs_spec=obs,
            num_actions=int(self._vec.single_action_space.n),
            clip_rewards=False,
            seed=seed,
        )
        self._ids = np.arange(num_envs)

    def _observe(self, obs: np.ndarray) -> np.ndarray:
        out = obs.astype(np.float32)  # a copy: gymnasium reuses its buffers
        out[..., self._hidden] = 0.0
        return out

    def _raw_reset(self, seeds):
        obs, _ = self._vec.reset(seed=[int(s) for s in seeds])
        return self._observe(obs), self._ids, None

    def _raw_step(self, actions):
        obs, reward, terminated, truncated, info = self._vec.step(actions)
        return (
            self._observe(obs),
            reward,
            terminated,
            truncated,
            self._ids,
            None,
            info,
        )

    def _final_obs(self, obs, ended, info):
        out = obs.copy()
        out[ended] = self._observe(np.stack(list(info["final_obs"][ended])))
        return out


CARTPOLE_VELOCITIES = (1, 3)
"""CartPole's observation indices of the cart's velocity and the pole's angular velocity."""


def make_vector_obs_env(
    env_id: str, num_envs: int, *, seed: int, hide_velocities: bool = False
) -> GymVectorEnv:
    """A seeded ``GymVectorEnv``; raises ``ValueError`` for ids gymnasium does not know.
    ``hide_velocities``: CartPole's velocities read as zeros."""
    if env_id not in gym.registry:
        raise ValueError(f"unknown env {env_id!r}: not an Atari game and not a gymnasium id")
    hidden = CARTPOLE_VELOCITIES if hide_velocities else ()
    env = GymVectorEnv(env_id, num_envs, seed=seed, hidden=hidden)
    env.set_seed(seed)
    return env


@register
class ClassicBackend(EnvBackend):
    """Gymnasium ids with Box observations and Discrete actions (CartPole-v1, Acrobot-v1, ...)."""

    name = "classic"
    games = "gymnasium ids with vector observations (CartPole-v1, Acrobot-v1, ...)"

    def runs(self, game: str) -> bool:
        return game in gym.registry

    def check(self, cfg: EnvConfig, prefix: str = "env") -> None:
        refuse_fire_on_life_loss(cfg, prefix)
        if not cfg.game.startswith("CartPole"):
            refuse_hide_velocities(cfg, prefix)

    def make(
        self, cfg: EnvConfig, *, num_envs: int, seed: int, sim_threads: int, synchronous: bool
    ) -> EnvBase:
        return make_vector_obs_env(
            cfg.game, num_envs, seed=seed, hide_velocities=cfg.hide_velocities
        )
