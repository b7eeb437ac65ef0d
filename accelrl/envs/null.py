"""Zero-cost simulators: a batched env whose simulators cost nothing, to measure the framework.

``Null/Atari`` returns observations of an Atari stack's shape (``pixels`` uint8 ``[4, 84, 84]``,
6 actions), ``Null/CartPole`` of CartPole's (``observation`` float32 ``[4]``, 2 actions). Every
array a step returns is preallocated: observations come from a ring of a few buffers, and
rewards, terminations and truncations from a table on a fixed schedule, so a step costs a few
array lookups and what remains of a batched step's time is the wrapper's, the collector's and
the policy's. ``python -m benchmarks.acting_overhead`` measures each recipe's collection on it
against a plain loop.

The schedule (row ``i``, agent step ``t`` of the simulator since the reset): episodes last
``EPISODE_LENGTHS[i % 3]`` steps, started ``7 i`` steps into their cycle so that the rows end
at different steps; every fourth episode of a row is truncated, the others terminate; the reward
is 1 on every eighth step. The same for every seed (a seed shifts nothing: the simulator has no
randomness), so recipes run on it end to end (``--env.game Null/Atari``) and any two runs see
the same transitions.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torchrl.data import Bounded, Unbounded
from torchrl.envs import EnvBase

from accelrl.config import EnvConfig
from accelrl.envs.backend import (
    EnvBackend,
    refuse_atari_and_cartpole_settings,
    register,
)
from accelrl.envs.vector import InfoFinalObsVectorEnv
from accelrl.errors import ConfigError

PREFIX = "Null/"
SHAPES = {
    "Atari": ("pixels", (4, 84, 84), np.uint8, 6),
    "CartPole": ("observation", (4,), np.float32, 2),
}
"""Game name after ``Null/`` -> observation key, shape, dtype and number of actions."""
EPISODE_LENGTHS = (30, 40, 60)
"""Agent steps per episode, by row modulo 3."""
RING = 4
"""Observation buffers the steps cycle through (so that consecutive observations differ)."""


def null_game(game: str) -> str | None:
    """``Atari`` for ``Null/Atari`` (any case); None for other names."""
    if not game.lower().startswith(PREFIX.lower()):
        return None
    rest = game[len(PREFIX) :].lower()
    return next((name for name in SHAPES if name.lower() == rest), None)


class NullVecEnv(InfoFinalObsVectorEnv):
    """``num_envs`` zero-cost simulators of ``game``'s observation shape (see the module)."""

    def __init__(self, game: str, num_envs: int, *, seed: int = 0) -> None:
        key, shape, dtype, num_actions = SHAPES[game]
        self.obs_key = key
        obs_spec = (
            Bounded(0, 255, shape=(num_envs, *shape), dtype=torch.uint8)
            if dtype == np.uint8
            else Unbounded(shape=(num_envs, *shape), dtype=torch.float32)
        )
        super().__init__(
            num_envs=num_envs,
            rows=num_envs,
            obs_spec=obs_spec,
            num_actions=num_actions,
            clip_rewards=False,
            seed=seed,
        )
        # Observation k of the ring holds the value k everywhere; the final observations RING.
        self._obs = [np.full((num_envs, *shape), k, dtype=dtype) for k in range(RING)]
        self._final = np.full((num_envs, *shape), RING, dtype=dtype)
        self._info = {"final_obs": self._final}
        self._ids = np.arange(num_envs, dtype=np.int64)
        rows = np.arange(num_envs)
        lengths = np.array(EPISODE_LENGTHS)[rows % len(EPISODE_LENGTHS)]
        period = math.lcm(*EPISODE_LENGTHS) * 4  # every row's cycle of four episodes
        t = np.arange(period)[:, None] + (7 * rows)[None, :]  # [period, rows]
        ends = t % lengths == lengths - 1
        truncate = (t // lengths) % 4 == 3
        self._terminated = ends & ~truncate
        self._truncated = ends & truncate
        self._reward = ((t % 8) == 0).astype(np.float32)
        self._t = 0

    def _raw_reset(self, seeds):
        self._t = 0
        return self._obs[0], self._ids, None

    def _raw_step(self, actions):
        t = self._t % len(self._reward)
        self._t += 1
        obs = self._obs[self._t % RING]
        return (
            obs,
            self._reward[t],
            self._terminated[t],
            self._truncated[t],
            self._ids,
            None,
            self._info,
        )


@register
class NullBackend(EnvBackend):
    """``Null/Atari`` and ``Null/CartPole``: ``NullVecEnv``."""

    name = "null"
    games = "zero-cost simulators (Null/Atari, Null/CartPole)"

    def runs(self, game: str) -> bool:
        return game.lower().startswith(PREFIX.lower())

    def check(self, cfg: EnvConfig, prefix: str = "env") -> None:
        if null_game(cfg.game) is None:
            names = ", ".join(PREFIX + name for name in SHAPES)
            raise ConfigError(f"{prefix}.game", cfg.game, f"zero-cost simulators are {names}")
        refuse_atari_and_cartpole_settings(cfg, prefix)

    def make(
        self, cfg: EnvConfig, *, num_envs: int, seed: int, sim_threads: int, synchronous: bool
    ) -> EnvBase:
        game = null_game(cfg.game)
        if game is None:
            raise ValueError(f"not a zero-cost simulator: {cfg.game}")
        env = NullVecEnv(game, num_envs, seed=seed)
        env.set_seed(seed)
        return env

    def describe(self, cfg: EnvConfig) -> dict:
        key, shape, _, num_actions = SHAPES[null_game(cfg.game) or "Atari"]
        return {"obs_key": key, "obs_shape": shape, "num_actions": num_actions}
