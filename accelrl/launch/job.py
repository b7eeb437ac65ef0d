"""What a submitted job runs: the callable that submitit pickles, starts in every task and
requeues (``RecipeJob``), and its submission to an executor (``submit_jobs``; on this machine:
``local_executor``). Kept apart from the planning so that the job imports little."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import submitit

from accelrl.run.checkpoint import list_checkpoints


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


def local_executor(
    folder: str,
    *,
    time_min: int,
    max_requeues: int,
    tasks_per_node: int = 1,
    gpus_per_node: int = 0,
    signal_delay_s: int = 120,
) -> submitit.LocalExecutor:
    """submitit's executor for jobs on this machine; ``folder`` holds their scripts, pickles
    and logs (``%j``: the job id)."""
    ex = submitit.LocalExecutor(folder, max_num_timeout=max_requeues)
    ex.update_parameters(
        timeout_min=time_min,
        tasks_per_node=tasks_per_node,
        gpus_per_node=gpus_per_node,
        signal_delay_s=signal_delay_s,
    )
    return ex


def submit_jobs(ex: submitit.Executor, recipe: str, cfgs: Sequence[Any]) -> list[submitit.Job]:
    """One ``RecipeJob`` of the recipe module ``recipe`` per config: one job, or one job array
    for several."""
    local = isinstance(ex, submitit.LocalExecutor)
    with _controllers_ignore_ctrl_c(local):
        if len(cfgs) == 1:
            return [ex.submit(RecipeJob(recipe, cfgs[0]))]
        with ex.batch():
            jobs = [ex.submit(RecipeJob(recipe, cfg)) for cfg in cfgs]
        return jobs


@contextlib.contextmanager
def _controllers_ignore_ctrl_c(local: bool) -> Iterator[None]:
    """Local jobs start with SIGINT ignored (a process inherits an ignored signal), so that a
    terminal's Ctrl-C, which reaches the whole process group, stops each run through its own
    handler (checkpoint at the next batch boundary) and not through submitit's controller,
    which would send the run a second SIGINT and kill it a second later."""
    if not local or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
