"""One factory for every env stack: Atari (ale_vec or gym backend) and vector-observation envs.

Every env it returns is a batched TorchRL ``EnvBase`` with batch ``[num_envs]`` (``[k]`` in ale_vec
async mode) on the CPU, and writes the same keys: the observation (``pixels`` uint8
``[4, 84, 84]`` for Atari, ``observation`` float32 for vector envs), ``reward`` (clipped to its
sign for Atari), ``score`` (unclipped), ``done``/``terminated``/``truncated``, ``life_lost`` (always
False without lives), ``episode_return`` / ``episode_length`` (running, final on ``done``) and
``env_id``.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import replace
from typing import Any

from torchrl.envs import EnvBase

from accelrl.config import EnvConfig
from accelrl.envs.games import available_games, gym_id, rom_id


def leave_ctrl_c_to_the_learner() -> None:
    """Called in a simulator worker process (collector or ``ParallelEnv`` worker): ignore SIGINT.
    A terminal's Ctrl-C reaches the whole process group; the learner stops after the batch with
    a checkpoint (``accelrl.process.StopSignals``), needs that batch, and closes its workers
    itself (TorchRL's workers exit on a ``KeyboardInterrupt``; the run then hung in shutdown)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def is_atari(game: str) -> bool:
    """True for names ale-py knows (``Pong``, ``ALE/Pong-v5``), False for other gymnasium ids."""
    try:
        rom_id(game)
    except ValueError:
        return False
    return True


def make_env(
    cfg: EnvConfig,
    *,
    seed: int,
    num_envs: int | None = None,
    sim_threads: int = 0,
    synchronous: bool = False,
) -> EnvBase:
    """The batched env ``cfg`` describes with ``num_envs`` simulators (default
    ``cfg.num_envs``), seeded ``seed, seed + 1, ...``. ``synchronous`` steps them all together
    even when ``cfg.async_batch_size`` asks for ale-py's async mode (evaluation, play)."""
    num_envs = cfg.num_envs if num_envs is None else num_envs
    async_batch_size = 0 if synchronous else cfg.async_batch_size
    if not is_atari(cfg.game):
        import gymnasium as gym

        from accelrl.envs.classic import make_vector_obs_env

        if cfg.game not in gym.registry:
            rom_id(cfg.game)  # raises ValueError naming the game, with close Atari names

        return make_vector_obs_env(cfg.game, num_envs, seed=seed)
    if cfg.backend == "gym":
        from accelrl.envs.gym_atari import make_gym_atari_env

        return make_gym_atari_env(cfg, num_envs, seed=seed)
    from accelrl.envs.ale_vec import AleVecEnv

    env = AleVecEnv(
        cfg.game,
        num_envs,
        batch_size=async_batch_size or None,
        num_threads=sim_threads,
        frameskip=cfg.frameskip,
        frame_stack=cfg.frame_stack,
        screen_size=cfg.screen_size,
        noop_max=cfg.noop_max,
        sticky_actions=cfg.sticky_actions,
        max_episode_frames=cfg.max_episode_frames,
        fire_reset=cfg.fire_reset,
        fire_on_life_loss=cfg.fire_on_life_loss,
        seed=seed,
    )
    env.set_seed(seed)
    return env


def frames_per_step(cfg: EnvConfig) -> int:
    """Emulator frames per agent step: the frameskip for Atari, 1 otherwise."""
    return cfg.frameskip if is_atari(cfg.game) else 1


def describe_env(cfg: EnvConfig) -> dict[str, Any]:
    """``obs_key``, ``obs_shape`` (one simulator's) and ``num_actions`` of the env ``cfg``
    describes, from one simulator built briefly."""
    # Both Atari backends have the same specs; ale_vec builds in-process in milliseconds while
    # the gym backend would spawn a worker just to report them.
    env = make_env(replace(cfg, backend="ale_vec"), seed=0, num_envs=1, synchronous=True)
    try:
        key = env.obs_key
        return {
            "obs_key": key,
            "obs_shape": tuple(env.observation_spec[key].shape[1:]),
            "num_actions": env.num_actions,
        }
    finally:
        env.close()


__all__ = [
    "available_games",
    "describe_env",
    "frames_per_step",
    "gym_id",
    "is_atari",
    "make_env",
    "rom_id",
]
