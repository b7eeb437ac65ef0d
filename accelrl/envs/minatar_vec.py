"""MinAtar (Young & Tian 2019) as a batched TorchRL env: the small-scale proxy of the Atari games.

Five games on a 10x10 grid with one boolean channel per kind of object: ``MinAtar/Asterix``,
``MinAtar/Breakout``, ``MinAtar/Freeway``, ``MinAtar/Seaquest``, ``MinAtar/SpaceInvaders`` (the
namespace keeps them apart from the Atari games of the same names, as gymnasium's ``ALE/`` does;
case and underscores do not matter). A step costs microseconds of numpy, so one process steps all
``num_envs`` ``minatar.Environment`` objects in a loop (worker processes would cost more than the
simulators), resetting each one that ends in the same step as the other backends do.

MinAtar's own settings: sticky actions (``--env.sticky-actions``, MinAtar's 0.1 when not given),
difficulty ramping on, all 6 actions. One agent step is one frame (no frame skip, no frame
stack: the channels carry motion trails), so ``--env.max-episode-frames`` caps episodes in agent
steps; the Atari settings (frameskip, frame stack, screen size, no-ops, FIRE) do not apply.
Observations are ``observation`` uint8 ``[C, 10, 10]`` (0 or 1; channels first, as the models'
convolutions take them; C is 4 to 10 by game); rewards are the game's, unclipped; no lives.

The ``minatar`` package is GPL-3.0 and an optional extra (``pip install "accelrl[minatar]"``):
it is imported only when a MinAtar game is checked or built.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchrl.data import Bounded
from torchrl.envs import EnvBase

from accelrl.config import EnvConfig
from accelrl.envs.backend import (
    EnvBackend,
    MissingExtra,
    refuse_atari_and_cartpole_settings,
    register,
)
from accelrl.envs.vector import SameStepVectorEnv
from accelrl.errors import ConfigError, check_positive, check_probability

GAMES = {
    "Asterix": "asterix",
    "Breakout": "breakout",
    "Freeway": "freeway",
    "Seaquest": "seaquest",
    "SpaceInvaders": "space_invaders",
}
"""accelrl's name after ``MinAtar/`` -> MinAtar's module name."""
PREFIX = "MinAtar/"
MINATAR_STICKY_ACTIONS = 0.1
"""MinAtar's probability of repeating the previous action, when ``--env.sticky-actions`` is not
given."""
NUM_ACTIONS = 6
MISSING = 'MinAtar games need the optional extra: pip install "accelrl[minatar]"'
SCREEN_SCALE = 16
"""Pixels per grid cell in rendered screens (160 x 160 videos)."""


def minatar_game(game: str) -> str | None:
    """MinAtar's module name for ``MinAtar/Breakout`` (``breakout``); None for other names."""
    if not game.lower().startswith(PREFIX.lower()):
        return None
    key = game[len(PREFIX) :].replace("_", "").lower()
    return next((module for name, module in GAMES.items() if name.lower() == key), None)


def import_minatar() -> Any:
    """The ``minatar`` package; raises ``MissingExtra`` naming the extra when it is missing."""
    try:
        import minatar
    except ImportError:
        raise MissingExtra(MISSING) from None
    return minatar


class MinAtarVecEnv(SameStepVectorEnv):
    """``num_envs`` MinAtar simulators of one game, stepped in a loop in this process."""

    obs_key = "observation"

    def __init__(
        self,
        game: str,
        num_envs: int,
        *,
        sticky_actions: float = MINATAR_STICKY_ACTIONS,
        max_episode_steps: int = 108_000,
        seed: int = 0,
    ) -> None:
        module = minatar_game(game)
        if module is None:
            raise ValueError(f"unknown MinAtar game {game!r}: {valid_names()}")
        minatar = import_minatar()
        self.game = game
        self.max_episode_steps = max_episode_steps
        self._sims = [
            minatar.Environment(module, sticky_action_prob=sticky_actions) for _ in range(num_envs)
        ]
        height, width, self.channels = self._sims[0].state_shape()
        obs = Bounded(0, 1, shape=(num_envs, self.channels, height, width), dtype=torch.uint8)
        super().__init__(
            num_envs=num_envs,
            rows=num_envs,
            obs_spec=obs,
            num_actions=NUM_ACTIONS,
            clip_rewards=False,
            seed=seed,
        )
        self._ids = np.arange(num_envs)
        self._steps = np.zeros(num_envs, dtype=np.int64)
        # What each simulator's screen shows: filled in place (attribute assignment on a
        # TorchRL env goes through nn.Module.__setattr__, microseconds a call).
        self._shown: list[np.ndarray | None] = [None] * num_envs

    @staticmethod
    def _observations(states: list[np.ndarray]) -> np.ndarray:
        # [N, H, W, C] bool -> [N, C, H, W] uint8, contiguous (a fresh array each step: the
        # TensorDicts of earlier steps share the arrays they were given).
        return np.ascontiguousarray(np.stack(states).transpose(0, 3, 1, 2)).view(np.uint8)

    def _raw_reset(self, seeds):
        for sim, seed in zip(self._sims, seeds, strict=True):
            sim.seed(int(seed) % 2**32)  # NumPy's legacy generator: seeds below 2**32
            sim.last_action = 0  # the sticky action of a fresh simulator
            sim.reset()
        self._steps[:] = 0
        self._shown[:] = [sim.state() for sim in self._sims]
        return self._observations(self._shown), self._ids, None

    def _raw_step(self, actions):
        acted = [sim.act(a) for sim, a in zip(self._sims, actions.tolist(), strict=True)]
        reward_and_end = np.array(acted, dtype=np.float32)  # [N, 2]: reward, terminal
        reward, terminated = reward_and_end[:, 0].copy(), reward_and_end[:, 1] > 0
        self._steps += 1
        truncated = ~terminated & (self._steps >= self.max_episode_steps)
        states = [sim.state() for sim in self._sims]
        # The episode's last frame stays on screen and goes to ``("next", obs)``; the row
        # starts its next episode at once.
        self._shown[:] = states
        info: dict[str, Any] = {}
        ended = np.flatnonzero(terminated | truncated)
        if len(ended):
            info["final_obs"] = self._observations([states[i] for i in ended])
            for i in ended:
                self._sims[i].reset()
                states[i] = self._sims[i].state()
            self._steps[ended] = 0
        return self._observations(states), reward, terminated, truncated, self._ids, None, info

    def _final_obs(self, obs, ended, info):
        out = obs.copy()
        out[ended] = info["final_obs"]
        return out

    def _final_rows(self, obs, ended, info):
        return info["final_obs"]  # the ended rows' only, in row order

    def screen_rgb(self, row: int = 0) -> np.ndarray:
        """Simulator ``row``'s grid as RGB [160, 160, 3] uint8 in MinAtar's own colours (black,
        then seaborn's cubehelix palette, one colour per channel), as of the last reset or step
        (the episode's last frame after it ended)."""
        import seaborn as sns

        state = self._shown[row]
        palette = np.array([(0.0, 0.0, 0.0), *sns.color_palette("cubehelix", self.channels)])
        cells = np.amax(state * np.arange(1, self.channels + 1), axis=2)
        rgb = (palette[cells] * 255).round().astype(np.uint8)
        return rgb.repeat(SCREEN_SCALE, axis=0).repeat(SCREEN_SCALE, axis=1)

    def close(self, *, raise_if_closed: bool = True) -> None:
        self._sims = []
        super().close(raise_if_closed=raise_if_closed)


def valid_names() -> str:
    return "MinAtar games are " + ", ".join(PREFIX + name for name in GAMES)


def sticky_actions(cfg: EnvConfig) -> float:
    """``cfg.sticky_actions``, or MinAtar's 0.1 when it is not set."""
    return MINATAR_STICKY_ACTIONS if cfg.sticky_actions is None else cfg.sticky_actions


@register
class MinAtarBackend(EnvBackend):
    """``MinAtar/<Game>`` names: ``MinAtarVecEnv``."""

    name = "minatar"
    games = "MinAtar games (MinAtar/Breakout, ...)"
    renders = True

    def runs(self, game: str) -> bool:
        return game.lower().startswith(PREFIX.lower())

    def check(self, cfg: EnvConfig, prefix: str = "env") -> None:
        if minatar_game(cfg.game) is None:
            raise ConfigError(f"{prefix}.game", cfg.game, valid_names())
        try:
            import_minatar()
        except MissingExtra as err:
            raise ConfigError(f"{prefix}.game", cfg.game, str(err)) from None
        if cfg.sticky_actions is not None:
            check_probability(f"{prefix}.sticky_actions", cfg.sticky_actions)
        check_positive(f"{prefix}.max_episode_frames", cfg.max_episode_frames)
        refuse_atari_and_cartpole_settings(cfg, prefix)

    def make(
        self, cfg: EnvConfig, *, num_envs: int, seed: int, sim_threads: int, synchronous: bool
    ) -> EnvBase:
        env = MinAtarVecEnv(
            cfg.game,
            num_envs,
            sticky_actions=sticky_actions(cfg),
            max_episode_steps=cfg.max_episode_frames,  # one frame per agent step
            seed=seed,
        )
        env.set_seed(seed)
        return env

    def screen(self, env: EnvBase) -> np.ndarray:
        return env.screen_rgb()

    def video_fps(self, cfg: EnvConfig) -> float:
        return 10.0
