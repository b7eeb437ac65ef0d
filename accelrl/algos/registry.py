"""The registry of algorithms: one record each, the only place accelrl looks an algorithm up.

An ``Algorithm`` names what a run of it needs: its config (a ``RunConfig`` with the algorithm's
section), its checks, its agent factory and its family, whose loop trains it
(``accelrl.loops``: ``on_policy`` for PPO, A2C, APPO and PQN; ``replay`` for the DQN
family). The run folder records the name; ``accelrl.tools.play`` and ``accelrl.tools.export``
rebuild the agent from it; the run record counts the section as learned; the recipes and the
plain reference loops take their configs from it. The built-in records are in
``accelrl.algos.catalog``; an algorithm of your own is one more ``register(Algorithm(...))``
(docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("on_policy", "replay")
"""The training loops (``accelrl.loops``): batches collected and learned from at once, or
stored in a replay and sampled."""


def _unchanged(cfg: Any) -> Any:
    return cfg


@dataclass(frozen=True)
class Algorithm:
    """One algorithm: what the loops, the run folder and the after-training tools need of it."""

    name: str
    """The run folder's ``algo`` and the checkpoint's component name."""
    section: str
    """The config section of its hyperparameters (``--ppo.lr``: ``ppo``)."""
    family: str
    """Its loop: one of ``FAMILIES``."""
    config: type
    """Its whole config: a ``RunConfig`` dataclass with ``section`` and its defaults."""
    validate: Callable[[Any], None]
    """Every check of a config (resolved first), before any simulator or worker starts; raises
    ``ConfigError``."""
    make_agent: Callable[..., Any]
    """``(cfg, env_spec, device, *, lr_scale=1.0, world_size=1, plan=None) -> Agent``: the
    networks and the learner (``accelrl.agent.Agent``); ``plan``: the run's resolved precision
    (``accelrl.precision.plan``, made from ``cfg`` when None)."""
    resolve: Callable[[Any], Any] = field(default=_unchanged)
    """The config with what a preset fills in applied (DQN's ``--dqn.preset``); unchanged by
    default."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"algorithm {self.name!r}: family {self.family!r} is not one of "
                             f"{', '.join(FAMILIES)}")  # fmt: skip


ALGORITHMS: dict[str, Algorithm] = {}
"""Name -> record of every registered algorithm."""


class UnknownAlgorithm(ValueError):
    """An algorithm name that no record has."""


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` to ``ALGORITHMS`` (a name is registered once) and return it."""
    known = ALGORITHMS.get(algorithm.name)
    if known is not None and known != algorithm:
        raise ValueError(f"algorithm {algorithm.name!r} is registered already")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def learned_sections() -> frozenset[str]:
    """The config sections of the registered algorithms (what a run learns with)."""
    return frozenset(a.section for a in ALGORITHMS.values())
