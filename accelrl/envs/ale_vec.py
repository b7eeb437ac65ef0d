"""ale-py's C++ multithreaded ``AtariVectorEnv`` as a batched TorchRL env (the default backend).

Preprocessing runs in ale-py's C++ threads: frameskip with max-pool over the last two frames,
grayscale, resize, frame stack, no-op starts, FIRE on reset, the frame cap, sticky actions.
Rewards are clipped to their sign in ``reward`` while ``score`` keeps the game's reward; episodes
end on game over and ``life_lost`` marks lost lives. See ``accelrl.envs.vector`` for the keys.
"""

from __future__ import annotations

import numpy as np
import torch
from torchrl.data import Bounded
from torchrl.envs import EnvBase

from accelrl.config import EnvConfig
from accelrl.envs.backend import register
from accelrl.envs.games import fire_action_index, rom_id
from accelrl.envs.gym_atari import AtariBackend, sticky_actions
from accelrl.envs.vector import InfoFinalObsVectorEnv
from accelrl.errors import ConfigError


class AleVecEnv(InfoFinalObsVectorEnv):
    """Batched TorchRL env over ``ale_py.vector_env.AtariVectorEnv``.

    ``batch_size`` < ``num_envs`` selects ale-py's async mode: each step returns the first
    ``batch_size`` simulators to finish, identified by ``env_id``, while the others keep running.
    """

    obs_key = "pixels"

    def __init__(
        self,
        game: str,
        num_envs: int,
        *,
        batch_size: int | None = None,
        num_threads: int = 0,
        frameskip: int = 4,
        frame_stack: int = 4,
        screen_size: int = 84,
        noop_max: int = 30,
        sticky_actions: float = 0.25,
        max_episode_frames: int = 108_000,
        fire_reset: bool = True,
        fire_on_life_loss: bool = False,
        full_action_space: bool = False,
        seed: int = 0,
    ) -> None:
        from ale_py.vector_env import AtariVectorEnv

        rows = batch_size or num_envs
        self.game = game
        self.frameskip = frameskip
        self._vec = AtariVectorEnv(
            rom_id(game),
            num_envs,
            batch_size=0 if rows == num_envs else rows,
            num_threads=num_threads,
            max_num_frames_per_episode=max_episode_frames,
            repeat_action_probability=sticky_actions,
            full_action_space=full_action_space,
            autoreset_mode="SameStep",
            img_height=screen_size,
            img_width=screen_size,
            grayscale=True,
            stack_num=frame_stack,
            frameskip=frameskip,
            maxpool=True,
            noop_max=noop_max,
            episodic_life=False,
            life_loss_info=False,
            reward_clipping=False,
            use_fire_reset=fire_reset,
        )
        # ale-py's Python ``send`` allocates this and re-checks the actions on every call.
        self._paddle = np.ones(rows, dtype=np.float32)
        pixels = Bounded(
            0, 255, shape=(rows, frame_stack, screen_size, screen_size), dtype=torch.uint8
        )
        super().__init__(
            num_envs=num_envs,
            rows=rows,
            obs_spec=pixels,
            num_actions=int(self._vec.single_action_space.n),
            clip_rewards=True,
            seed=seed,
            fire_action=fire_action_index(game, full_action_space) if fire_on_life_loss else None,
        )

    def _raw_reset(self, seeds):
        # In async mode the reset returns the first ``batch_size`` simulators to be ready.
        # ale-py takes 32-bit signed seeds, and a run derives its simulators' seeds from --seed
        # (up to 2**32 - 1) times a large prime (``Process.collect_seed``): fold them in.
        obs, info = self._vec.reset(seed=seeds % 2**31)
        return obs, info["env_id"], info["lives"]

    def _raw_step(self, actions):
        self._raw_send(actions)
        return self._raw_recv()

    def _raw_send(self, actions):
        self._vec.ale.send(actions, self._paddle)

    def _raw_recv(self):
        obs, reward, terminated, truncated, info = self._vec.ale.recv()
        return obs, reward, terminated, truncated, info["env_id"], info["lives"], info


@register
class AleVecBackend(AtariBackend):
    """``--env.backend ale_vec`` (the default): ``AleVecEnv``, ale-py's C++ vector env."""

    name = "ale_vec"

    def check(self, cfg: EnvConfig, prefix: str = "env") -> None:
        super().check(cfg, prefix)
        if cfg.fire_on_life_loss and fire_action_index(cfg.game) is None:
            raise ConfigError(f"{prefix}.fire_on_life_loss", True, f"{cfg.game} has no FIRE action")

    def make(
        self, cfg: EnvConfig, *, num_envs: int, seed: int, sim_threads: int, synchronous: bool
    ) -> EnvBase:
        async_batch_size = 0 if synchronous else cfg.async_batch_size
        env = AleVecEnv(
            cfg.game,
            num_envs,
            batch_size=async_batch_size or None,
            num_threads=sim_threads,
            frameskip=cfg.frameskip,
            frame_stack=cfg.frame_stack,
            screen_size=cfg.screen_size,
            noop_max=cfg.noop_max,
            sticky_actions=sticky_actions(cfg),
            max_episode_frames=cfg.max_episode_frames,
            fire_reset=cfg.fire_reset,
            fire_on_life_loss=cfg.fire_on_life_loss,
            seed=seed,
        )
        env.set_seed(seed)
        return env
