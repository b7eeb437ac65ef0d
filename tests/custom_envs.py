"""Envs of a user's own package, for the tests of ``--env.game tests.custom_envs:Id``:
importing this module registers them with gymnasium (as a user's module would)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


# --8<-- [start:cue_memory]
class CueMemory(gym.Env):
    """Repeat a cue after a delay: the first observation shows one of two cues, ``delay``
    blank steps follow, then a query; the action at the query is rewarded +1 if it names the
    cue and -1 if not, and the episode ends. Only a policy that remembers the cue scores above
    0 on average (the docs' example, docs/custom-envs.md)."""

    def __init__(self, delay: int = 3) -> None:
        self.delay = delay
        # [cue 0, cue 1, query]
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        obs = np.zeros(3, dtype=np.float32)
        if self.t == 0:
            obs[self.cue] = 1.0
        elif self.t == self.delay + 1:
            obs[2] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        if self.t <= self.delay + 1:  # before and at the query's step the action does not count
            return self._obs(), 0.0, False, False, {}
        return self._obs(), 1.0 if int(action) == self.cue else -1.0, True, False, {}


# --8<-- [end:cue_memory]


class CueImage(CueMemory):
    """``CueMemory`` seen as a uint8 RGB image: the cue lights the left or the right half, the
    query the whole screen. ``channels_first``: ``CxHxW`` instead of ``HxWxC``."""

    def __init__(self, delay: int = 1, size: int = 48, channels_first: bool = False) -> None:
        super().__init__(delay)
        self.size, self.channels_first = size, channels_first
        shape = (3, size, size) if channels_first else (size, size, 3)
        self.observation_space = gym.spaces.Box(0, 255, shape=shape, dtype=np.uint8)

    def _obs(self) -> np.ndarray:
        cue = super()._obs()
        image = np.zeros((self.size, self.size, 3), dtype=np.uint8)
        half = self.size // 2
        if cue[0]:
            image[:, :half] = 255
        elif cue[1]:
            image[:, half:] = 255
        elif cue[2]:
            image[:] = 128
        return image.transpose(2, 0, 1).copy() if self.channels_first else image


class ContinuousActions(CueMemory):
    """A Box action space: what accelrl does not run."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)


class DictObservations(CueMemory):
    """A Dict observation space: what accelrl does not run."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Dict({"cue": gym.spaces.Discrete(3)})


for _name, _cls, _steps in [
    ("CueMemory-v0", CueMemory, 100),
    ("CueImage-v0", CueImage, 100),
    ("ContinuousActions-v0", ContinuousActions, 100),
    ("DictObservations-v0", DictObservations, 100),
]:
    gym.register(id=_name, entry_point=f"{__name__}:{_cls.__name__}", max_episode_steps=_steps)
