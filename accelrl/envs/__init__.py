"""One factory for every env stack, over the registered backends (``accelrl.envs.backend``).

Backends: ``ale_vec`` (ale-py's C++ vector env, the default for Atari) and ``gym`` (``ParallelEnv``
workers) for Atari games, chosen with ``--env.backend``; ``classic`` for gymnasium ids with
vector observations (CartPole-v1, ...) and ``minatar`` for ``MinAtar/<Game>``, chosen by the
game name. A new backend is one module that registers itself, imported below.

Every env ``make_env`` returns is a batched TorchRL ``EnvBase`` with batch ``[num_envs]`` (``[k]``
in ale_vec async mode) on the CPU, and writes the same keys: the observation (``pixels`` uint8
``[4, 84, 84]`` for Atari, ``observation`` uint8 ``[C, 10, 10]`` for MinAtar and float32 for
vector envs: image-like observations are uint8), ``reward`` (clipped to its sign for Atari),
``score`` (unclipped), ``done``/``terminated``/``truncated``, ``life_lost`` (always False without
lives), ``episode_return`` / ``episode_length`` (running, final on ``done``) and ``env_id``.
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase
from torchrl.data import Unbounded
from torchrl.envs import EnvBase, InitTracker, TensorDictPrimer, TransformedEnv

from accelrl.config import EnvConfig

# Each backend module registers itself on import.
from accelrl.envs import ale_vec, classic, gym_atari, minatar_vec, null  # noqa: F401
from accelrl.envs.backend import (
    EnvBackend,
    MissingExtra,
    UnknownGame,
    backend_for,
    backends,
    leave_ctrl_c_to_the_learner,
    selectable_backends,
)
from accelrl.envs.games import available_games, gym_id, rom_id


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
    state: TensorDictBase | None = None,
) -> EnvBase:
    """The batched env ``cfg`` describes with ``num_envs`` simulators (default
    ``cfg.num_envs``), seeded ``seed, seed + 1, ...``. ``synchronous`` steps them all together
    even when ``cfg.async_batch_size`` asks for ale-py's async mode (evaluation, play).
    ``state``: a recurrent policy's state (``Agent.initial_state``), which the env then carries
    (``with_state``)."""
    env = backend_for(cfg).make(
        cfg,
        num_envs=cfg.num_envs if num_envs is None else num_envs,
        seed=seed,
        sim_threads=sim_threads,
        synchronous=synchronous,
    )
    return env if state is None else with_state(env, state)


def with_state(env: EnvBase, state: TensorDictBase) -> TransformedEnv:
    """``env`` carrying a recurrent policy's state from step to step, as TorchRL's recurrent
    modules expect: ``InitTracker`` writes ``is_init`` (True on the first step of each episode,
    auto-resets included), and a ``TensorDictPrimer`` registers the keys of ``state`` (one
    simulator's entry of ``Agent.initial_state``: its shapes and dtypes) in the specs and sets
    them to zeros wherever an episode starts. The policy writes the next state under
    ``"next"``; ``step_mdp`` carries it to the root. A lost life is no episode start (the game
    goes on): the state carries on through it."""
    specs = {
        key: Unbounded(shape=value.shape[1:], dtype=value.dtype) for key, value in state.items()
    }
    return TransformedEnv(env, InitTracker()).append_transform(
        TensorDictPrimer(specs, expand_specs=True)
    )


def frames_per_step(cfg: EnvConfig) -> int:
    """Emulator frames per agent step: the frameskip for Atari, 1 otherwise."""
    return backend_for(cfg).frames_per_step(cfg)


def describe_env(cfg: EnvConfig) -> dict[str, Any]:
    """``obs_key``, ``obs_shape`` (one simulator's) and ``num_actions`` of the env ``cfg``
    describes: what the model factories take."""
    return backend_for(cfg).describe(cfg)


__all__ = [
    "EnvBackend",
    "MissingExtra",
    "UnknownGame",
    "available_games",
    "backend_for",
    "backends",
    "describe_env",
    "frames_per_step",
    "gym_id",
    "is_atari",
    "leave_ctrl_c_to_the_learner",
    "make_env",
    "rom_id",
    "selectable_backends",
    "with_state",
]
