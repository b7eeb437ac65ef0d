"""Atari game names: accept ``Pong``, ``pong``, ``ALE/Pong-v5`` or ``PongNoFrameskip-v4``."""

from __future__ import annotations

import re
from functools import cache


@cache
def available_games() -> tuple[str, ...]:
    """ROM ids that ale-py ships (snake_case, e.g. ``space_invaders``)."""
    from ale_py import roms

    return tuple(sorted(roms.get_all_rom_ids()))


def rom_id(game: str) -> str:
    """The ale-py ROM id for a user-facing game name; raises ``ValueError`` if unknown."""
    name = game.strip()
    name = re.sub(r"^ALE/", "", name)
    name = re.sub(r"(NoFrameskip)?-v\d+$", "", name)
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    if name not in available_games():
        close = [g for g in available_games() if g.startswith(name[:3])][:5]
        hint = f" Did you mean one of {close}?" if close else ""
        raise ValueError(f"unknown Atari game {game!r}.{hint} See accelrl.envs.available_games().")
    return name


def gym_id(game: str) -> str:
    """The gymnasium id (``ALE/Pong-v5``) for a game name."""
    return "ALE/" + "".join(part.capitalize() for part in rom_id(game).split("_")) + "-v5"
