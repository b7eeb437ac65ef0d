"""The training loops, one per family of algorithms (``accelrl.algos.registry.FAMILIES``).

- ``on_policy.train``: PPO, A2C, APPO, PQN: collect a batch, learn from it, publish the weights.
- ``replay.train``: the DQN family: collect into a replay, replay from it at the training
  intensity, publish the weights.
- ``start``: what both do first (checks, the process, the run folder, the agent, ``--resume``)
  and the one place that hands the agent's initial state to what steps an env.

``train(cfg, algorithm)`` runs the record's family loop.
"""

from __future__ import annotations

from typing import Any

from accelrl.algos.registry import Algorithm
from accelrl.loops import on_policy, replay

LOOPS = {"on_policy": on_policy.train, "replay": replay.train}
"""Family -> its loop."""


def train(cfg: Any, algorithm: Algorithm) -> dict[str, Any]:
    """Train ``algorithm`` with ``cfg`` through its family's loop; returns the run's summary
    (frames, updates, episodes, the mean return of the last 100, frames/s)."""
    return LOOPS[algorithm.family](cfg, algorithm)
