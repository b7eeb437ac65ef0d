"""The two kinds of error that end a command with one line.

Bad input is a ``ConfigError``, raised before any simulator or worker starts (exit code 2): the
small checks below raise it for one value, and ``accelrl.validate`` runs every check on a
recipe's config; the env backends (``accelrl.envs``) and the learners (``accelrl.algos``) check
their own settings with them. This module imports nothing heavy, so that they can.

A ``RunFailure`` (a non-finite loss, a checkpoint that cannot be written or read, a collector
worker that died or hangs, a lost data-parallel peer, a replay feeder that stopped) ends the
run with one line on the command line (``accelrl.cli``): the error, then ``where``, which the
run folder fills in when the error leaves its ``with`` block (frames, update, latest
checkpoint); exit code 3. A stop signal is a ``RunInterrupted`` (``accelrl.run.folder``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


class ConfigError(ValueError):
    """A config value that cannot work; the message names field, value and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"invalid --{name.replace('_', '-')}={value!r}: {allowed}")


def check_positive(name: str, value: int | float, *, zero_ok: bool = False) -> None:
    ok = value >= 0 if zero_ok else value > 0
    if not ok:
        raise ConfigError(name, value, "must be >= 0" if zero_ok else "must be > 0")


def check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(name, value, "must be in [0, 1]")


def check_finite(cfg: Any, prefix: str = "") -> None:
    """Every float field of the config dataclass ``cfg`` and of its sections is a finite number:
    the command line parses ``inf`` and ``nan``, which pass every ``<`` and ``>`` check."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            check_finite(value, f"{prefix}{f.name}.")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(prefix + f.name, value, "must be a finite number")


class RunFailure(RuntimeError):
    """A failure that ends a run (see the module docstring)."""

    where: str = ""
    """Where the run stood when it failed (" at N frames, update U; latest checkpoint: ..."),
    set by the run folder; empty outside one."""
