"""What every family's loop does before its first batch, written once.

``started(cfg, algorithm)``: the checks (the record's, on the resolved config), the process
(``accelrl.process.setup_process``: devices, threads, seeds, stop signals, the data-parallel
group), the run folder (``accelrl.run.folder.RunFolder``), the env's description, the
precision plan (resolved and logged once), the agent (the record's ``make_agent``) and its
acting state. The loop then calls ``run.restore`` with what its checkpoints hold.

``acting_state(agent)`` is the only place the agent's initial state (a recurrent policy's, at an
episode's start) is handed to what steps an env: the collectors, evaluation and videos (through
the run folder) and ``accelrl.tools.play``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tensordict import TensorDictBase

from accelrl import precision
from accelrl.agent import Agent
from accelrl.algos.registry import Algorithm
from accelrl.envs import describe_env
from accelrl.process import Process, lr_scale, setup_process
from accelrl.run.folder import RunFolder


def acting_state(agent: Agent) -> TensorDictBase | None:
    """One simulator's entry of the state ``agent`` starts each episode from (None: a
    feed-forward policy); envs carry one each (``accelrl.envs.make_env``'s ``state``)."""
    return agent.initial_state(1)


@dataclass
class Started:
    """A run, ready for its family's loop."""

    cfg: Any
    """The resolved config (presets applied)."""
    proc: Process
    run: RunFolder
    env_spec: dict
    agent: Any
    state: TensorDictBase | None
    """``acting_state(agent)``: hand it to every collector of the run."""


def checked(cfg: Any, algorithm: Algorithm) -> Any:
    """``cfg`` with its presets applied, after every check (``ConfigError``), before anything
    starts."""
    algorithm.validate(cfg)
    return algorithm.resolve(cfg)


@contextmanager
def started(cfg: Any, algorithm: Algorithm, *, overlapped: bool = False) -> Iterator[Started]:
    """Check ``cfg``, set up the process and open the run folder for the ``with`` block (see
    the module docstring). ``overlapped``: collection runs while the learner updates (a feeder
    thread), which the thread plan counts."""
    cfg = checked(cfg, algorithm)
    proc = setup_process(cfg, overlapped=overlapped)
    scale = lr_scale(proc.world_size, cfg.dist.lr_scaling)  # N data-parallel ranks
    with RunFolder(cfg, algorithm.name, proc, resolved={"lr_scale": scale}) as run:
        spec = describe_env(cfg.env)
        plan = precision.plan(cfg, spec["obs_shape"], proc.device)
        precision.announce(plan)
        agent = algorithm.make_agent(
            cfg, spec, proc.device, lr_scale=scale, world_size=proc.world_size, plan=plan
        )
        yield Started(cfg, proc, run, spec, agent, acting_state(agent))
