"""What a submitted job runs: the callable that submitit pickles, starts in every task and
requeues (``RecipeJob``). Kept apart from the launcher so that the job imports little."""

from __future__ import annotations

import importlib
import os
from dataclasses import replace
from typing import Any

import submitit

from accelrl.checkpoint import list_checkpoints


class RecipeJob(submitit.helpers.Checkpointable):
    """What every task of a job runs: ``recipe.train(cfg)``, resuming when the run has a checkpoint.

    The launcher refuses to submit into a run folder that holds checkpoints unless ``--resume``
    is given, so a checkpoint found at start was written by an earlier attempt of this same job
    (requeued after a timeout, a preemption or a node failure): the job resumes from it, and
    starts fresh when the earlier attempt died before writing one.
    """

    def __init__(self, module_name: str, cfg: Any) -> None:
        self.module_name = module_name
        self.cfg = cfg

    def __call__(self) -> dict[str, Any]:
        # Decided before the process-group rendezvous below: rank 0 cannot write a checkpoint
        # until every rank has joined, so all ranks see the same folder here.
        cfg = self.config_for_this_start()
        if _job_world_size() > 1:
            from accelrl.distributed import init_from_environment

            if "WORLD_SIZE" not in os.environ:
                # submitit knows the ranks under either executor (SLURM or --local); torch's
                # process group reads them from RANK/WORLD_SIZE/MASTER_ADDR/... variables
                submitit.helpers.TorchDistributedEnvironment().export(
                    set_cuda_visible_devices=False
                )
            init_from_environment()
        recipe = importlib.import_module(self.module_name)
        return recipe.train(cfg)

    def config_for_this_start(self) -> Any:
        """The config with ``resume`` set exactly when the run folder holds a checkpoint."""
        return replace(self.cfg, resume=bool(list_checkpoints(self.cfg.run_dir)))

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Called by submitit (rank 0) on USR2 before requeueing: the next start resumes."""
        return submitit.helpers.DelayedSubmission(
            RecipeJob(self.module_name, replace(self.cfg, resume=True))
        )


def _job_world_size() -> int:
    try:
        return submitit.JobEnvironment().num_tasks
    except RuntimeError:  # called outside a submitit job (e.g. directly from Python)
        return 1
