"""The one base class of the failures that end a run.

A ``RunFailure`` (a non-finite loss, a checkpoint that cannot be written or read, a collector
worker that died or hangs, a lost data-parallel peer, a replay feeder that stopped) ends the
run with one line on the command line (``accelrl.cli``): the error, then ``where``, which the
run folder fills in when the error leaves its ``with`` block (frames, update, latest
checkpoint). Bad input is a ``ConfigError`` (``accelrl.checks``), raised before any worker
starts; a stop signal a ``RunInterrupted`` (``accelrl.run_folder``).
"""

from __future__ import annotations


class RunFailure(RuntimeError):
    """A failure that ends a run (see the module docstring)."""

    where: str = ""
    """Where the run stood when it failed (" at N frames, update U; latest checkpoint: ..."),
    set by the run folder; empty outside one."""
