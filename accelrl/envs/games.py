"""Atari game names (``Pong``, ``pong``, ``ALE/Pong-v5`` or ``PongNoFrameskip-v4``) and actions."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

ATARI_MISSING = 'Atari games need the optional extra: pip install "accelrl[atari]"'
"""ale-py (the Atari emulator and its ROMs) is GPL-2.0: an optional extra, like MinAtar, so that
a plain install of accelrl pulls in no GPL package (docs/third-party.md)."""


@cache
def available_games() -> tuple[str, ...]:
    """ROM ids that ale-py ships (snake_case, e.g. ``space_invaders``); raises ``MissingExtra``
    naming the ``atari`` extra when ale-py is not installed."""
    from accelrl.envs.backend import MissingExtra

    try:
        from ale_py import roms
    except ImportError:
        raise MissingExtra(ATARI_MISSING) from None
    return tuple(sorted(roms.get_all_rom_ids()))


def rom_id(game: str) -> str:
    """The ale-py ROM id for a user-facing game name; raises ``ValueError`` if unknown."""
    name = _normalized(game)
    if name not in available_games():
        close = close_games(game)
        hint = f" Did you mean one of {close}?" if close else ""
        raise ValueError(f"unknown Atari game {game!r}.{hint} See accelrl.envs.available_games().")
    return name


def _normalized(game: str) -> str:
    name = game.strip()
    name = re.sub(r"^ALE/", "", name)
    name = re.sub(r"(NoFrameskip)?-v\d+$", "", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def close_games(game: str) -> list[str]:
    """Up to five ROM ids that start as ``game`` does."""
    name = _normalized(game)
    return [g for g in available_games() if g.startswith(name[:3])][:5]


def gym_id(game: str) -> str:
    """The gymnasium id (``ALE/Pong-v5``) for a game name."""
    return "ALE/" + "".join(part.capitalize() for part in rom_id(game).split("_")) + "-v5"


@cache
def action_set(game: str, full_action_space: bool = False) -> tuple[Any, ...]:
    """The game's ale-py actions: its minimal set, or all 18 with ``full_action_space``."""
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.loadROM(roms.get_rom_path(rom_id(game)))
    return tuple(ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet())


def fire_action_index(game: str, full_action_space: bool = False) -> int | None:
    """Index of FIRE in the game's action set (minimal unless ``full_action_space``), or None
    for games without it."""
    from ale_py import Action

    actions = action_set(game, full_action_space)
    return actions.index(Action.FIRE) if Action.FIRE in actions else None
