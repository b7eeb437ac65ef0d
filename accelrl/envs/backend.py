"""What an env backend is, and the registry ``accelrl.envs`` looks backends up in.

A backend is one module: a subclass of ``EnvBackend`` decorated with ``@register``, imported by
``accelrl/envs/__init__.py``. It says which game names it runs, checks its settings (before any
simulator or worker starts), builds the batched TorchRL env, describes its observations and
actions for the model factories, and, when it can, renders a screen for videos and
``accelrl.tools.play``. Game names choose the backend: a name only one backend runs (a gymnasium id,
``MinAtar/Breakout``) picks that one; Atari games, which two backends run, take the one
``--env.backend`` names (``selectable`` backends).
"""

from __future__ import annotations

import signal
import threading
from typing import Any, ClassVar, TypeVar

import numpy as np
from torchrl.envs import EnvBase

from accelrl.config import EnvConfig
from accelrl.errors import ConfigError


class UnknownGame(ValueError):
    """A game name no backend runs; ``allowed`` lists what each backend runs."""

    def __init__(self, game: str, allowed: str) -> None:
        self.game, self.allowed = game, allowed
        super().__init__(f"unknown game {game!r}: {allowed}")


class MissingExtra(ImportError):
    """A backend's optional dependency is not installed; the message names the extra."""


class EnvBackend:
    """One way of running simulators as a batched TorchRL env (see the module docstring).

    Subclasses set the class attributes and implement ``runs``, ``check`` and ``make``; the
    other methods have defaults that fit backends without frame skip or screens.
    """

    name: ClassVar[str]
    """What ``--env.backend`` and messages call it."""
    games: ClassVar[str]
    """The game names it runs, for messages: ``"Atari games (Pong, ALE/Pong-v5, ...)"``."""
    selectable: ClassVar[bool] = False
    """Chosen with ``--env.backend`` among the backends that run a game (Atari's two); a
    backend that is not is chosen by the game name alone."""
    in_process: ClassVar[bool] = True
    """Steps its simulators in the process that builds the env (collector kind ``batched``,
    which gives each simulator its own slot, needs that)."""
    renders: ClassVar[bool] = False
    """``screen`` returns RGB frames of the ``play_env`` (videos, ``accelrl.tools.play
    --video``)."""

    def runs(self, game: str) -> bool:
        """True when this backend runs ``game`` (a cheap name check, no simulator built)."""
        raise NotImplementedError

    def suggest(self, game: str) -> list[str]:
        """Names this backend runs that are close to the unknown ``game``."""
        return []

    def check(self, cfg: EnvConfig, prefix: str = "env") -> None:
        """Raise ``accelrl.errors.ConfigError`` for settings of ``cfg`` this backend cannot run,
        naming the field as ``{prefix}.field``."""
        raise NotImplementedError

    def make(
        self, cfg: EnvConfig, *, num_envs: int, seed: int, sim_threads: int, synchronous: bool
    ) -> EnvBase:
        """The batched env of ``num_envs`` simulators seeded ``seed, seed + 1, ...``
        (``accelrl.envs.make_env`` documents the keys every backend writes)."""
        raise NotImplementedError

    def frames_per_step(self, cfg: EnvConfig) -> int:
        """Emulator frames per agent step."""
        return 1

    def describe(self, cfg: EnvConfig) -> dict[str, Any]:
        """``obs_key``, ``obs_shape`` (one simulator's) and ``num_actions``; by default read
        from one simulator built briefly."""
        env = self.make(cfg, num_envs=1, seed=0, sim_threads=1, synchronous=True)
        try:
            key = env.obs_key
            return {
                "obs_key": key,
                "obs_shape": tuple(env.observation_spec[key].shape[1:]),
                "num_actions": env.num_actions,
            }
        finally:
            env.close()

    def play_env(self, cfg: EnvConfig, seed: int) -> EnvBase:
        """One simulator for ``accelrl.tools.play`` and videos (batch ``[]`` or ``[1]``)."""
        return self.make(cfg, num_envs=1, seed=seed, sim_threads=1, synchronous=True)

    def screen(self, env: EnvBase) -> np.ndarray:
        """The RGB frame ``[H, W, 3]`` uint8 of ``play_env``'s simulator, as of its last reset
        or step (the episode's last frame after it ended)."""
        raise NotImplementedError(f"backend {self.name} renders no screen")

    def video_fps(self, cfg: EnvConfig) -> float:
        """Frames per second of videos made of one ``screen`` per agent step."""
        return 30.0


B = TypeVar("B", bound=type[EnvBackend])

_BACKENDS: dict[str, EnvBackend] = {}


def register(cls: B) -> B:
    """Class decorator: make the backend available under ``cls.name``."""
    if cls.name in _BACKENDS:
        raise ValueError(f"env backend {cls.name!r} is registered twice")
    _BACKENDS[cls.name] = cls()
    return cls


def backends() -> dict[str, EnvBackend]:
    """Every registered backend by name."""
    return dict(_BACKENDS)


def selectable_backends() -> list[str]:
    """The values ``--env.backend`` takes."""
    return [name for name, b in _BACKENDS.items() if b.selectable]


def backend_for(cfg: EnvConfig) -> EnvBackend:
    """The backend that runs ``cfg.game``: the one ``cfg.backend`` names if it runs the game,
    else the backend the game name alone chooses. Raises ``UnknownGame``, or ``ValueError``
    when only other selectable backends run the game."""
    runners, missing = [], []
    for b in _BACKENDS.values():
        try:
            if b.runs(cfg.game):
                runners.append(b)
        except MissingExtra as err:  # its games need an extra that is not installed
            missing.append(str(err))
    if not runners:
        hint = _unknown_game_hint(cfg.game)
        raise UnknownGame(cfg.game, "; ".join([hint, *dict.fromkeys(missing)]))
    for b in runners:
        if b.name == cfg.backend:
            return b
    for b in runners:
        if not b.selectable:
            return b
    names = ", ".join(b.name for b in runners)
    raise ValueError(f"backend {cfg.backend!r} does not run {cfg.game}; use one of {names}")


def _unknown_game_hint(game: str) -> str:
    close = []
    for b in _BACKENDS.values():
        try:
            close += b.suggest(game)
        except MissingExtra:
            pass
    close = list(dict.fromkeys(close))[:5]
    kinds = ", ".join(dict.fromkeys(b.games for b in _BACKENDS.values()))
    hint = f"Did you mean one of {close}? " if close else ""
    return f"{hint}accelrl runs {kinds}"


def refuse_async_batch(cfg: EnvConfig, prefix: str = "env") -> None:
    """For backends other than ``ale_vec``: ``--env.async-batch-size`` is its own."""
    if cfg.async_batch_size:
        raise ConfigError(
            f"{prefix}.async_batch_size", cfg.async_batch_size, "needs backend ale_vec"
        )


def refuse_fire_on_life_loss(cfg: EnvConfig, prefix: str = "env") -> None:
    """For backends of games without FIRE or lives: ``--env.fire-on-life-loss`` is Atari's."""
    if cfg.fire_on_life_loss:
        raise ConfigError(
            f"{prefix}.fire_on_life_loss", True, f"is for Atari games, not {cfg.game}"
        )


def refuse_hide_velocities(cfg: EnvConfig, prefix: str = "env") -> None:
    """For backends other than the classic one: ``--env.hide-velocities`` is CartPole's."""
    if cfg.hide_velocities:
        raise ConfigError(f"{prefix}.hide_velocities", True, f"is for CartPole, not {cfg.game}")


def refuse_atari_and_cartpole_settings(cfg: EnvConfig, prefix: str = "env") -> None:
    """For backends of neither ALE nor CartPole (MinAtar, the zero-cost simulators): the
    settings that only ``ale_vec``, Atari and CartPole take."""
    refuse_async_batch(cfg, prefix)
    refuse_fire_on_life_loss(cfg, prefix)
    refuse_hide_velocities(cfg, prefix)


def leave_ctrl_c_to_the_learner() -> None:
    """Called in a simulator worker process (collector or ``ParallelEnv`` worker): ignore SIGINT.
    A terminal's Ctrl-C reaches the whole process group; the learner stops after the batch with
    a checkpoint (``accelrl.process.StopSignals``), needs that batch, and closes its workers
    itself (TorchRL's workers exit on a ``KeyboardInterrupt``; the run then hung in shutdown)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
