"""Running a grid: every cell's flags checked by its recipe's parser first, then the cells run
as submitit jobs (``accelrl.launch``): on this machine with its local executor, a few at a time,
or elsewhere as one job array per recipe, through the ``JobArrays`` that the command was given
(``python -m slurm.study``: SLURM's, ``slurm.study.run_slurm``).

A finished cell (summary.json at the budget) is skipped, one with a checkpoint resumes with
``--resume``, one that a live process holds is left alone. Ctrl-C or SIGTERM stops the study:
no new cell starts, each running cell writes a checkpoint at its next batch boundary and
stops; the same command resumes them.
"""

from __future__ import annotations

import shlex
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import submitit

from accelrl.launch.job import local_executor, submit_jobs
from accelrl.launch.plan import LaunchError, PlannedRun, load_recipe, plan_runs
from accelrl.study import keep
from accelrl.study.grid import (
    FINISHED,
    KEPT,
    RESUME,
    RUNNING,
    Cell,
    Grid,
    GridError,
    cell_state,
)

LOCAL_TIME_MIN = 30 * 24 * 60
"""Local jobs' time limit: none that a study on one machine would reach (submitit's local
executor always sets one)."""
POLL_S = 1.0


@dataclass
class PlannedCell:
    cell: Cell
    state: str
    """``grid.cell_state`` when planned: new, resume, running or finished."""
    run: PlannedRun | None
    """The parsed and validated config; None for a cell that does not run now."""
    args: list[str]
    """Its recipe flags (what the config was parsed from)."""


class JobArrays(Protocol):
    """Runs the cells that need it elsewhere, as one job array per recipe: printed
    (``dry_run``, nothing submitted) or submitted; returns the exit code and raises
    ``GridError`` (one line). accelrl has none: ``python -m slurm.study`` gives the study
    SLURM's (``slurm.study.run_slurm``)."""

    def __call__(
        self,
        grid: Grid,
        planned: Sequence[PlannedCell],
        *,
        dry_run: bool,
        out: Callable[[str], None] = print,
    ) -> int: ...


def plan_cells(
    grid: Grid,
    *,
    threads: int | None,
    runs_here: bool,
    only: Sequence[str] = (),
    kept: Path | None = None,
) -> list[PlannedCell]:
    """Every cell (those matching an ``only`` pattern, when given) with its state; the cells to
    run get their config, parsed and validated by their recipe. A cell that the ``kept`` folder
    holds finished (``accelrl.study.keep``) is ``kept`` and does not run. Raises ``GridError``
    (one line naming the cell) before anything runs."""
    cells = grid.selected(only)
    recipes = {}
    for algo in grid.algorithms.values():
        try:
            recipes[algo.name] = load_recipe(algo.recipe)
        except LaunchError as err:
            raise GridError(f"{grid.path} [algorithms.{algo.name}] recipe: {err}") from None
    kept_names = keep.kept_cells(kept, grid.record()) if kept is not None else set()
    planned = []
    for cell in cells:
        state = cell_state(cell)
        if state != FINISHED and cell.name in kept_names:
            state = KEPT
        run = None
        args = cell.recipe_args(threads) + (["--resume"] if state == RESUME else [])
        if state not in (FINISHED, KEPT, RUNNING):
            recipe = recipes[cell.algorithm.name]
            try:
                (run,) = plan_runs(recipe, args, [], runs_here=runs_here, prog=recipe.__name__)
            except LaunchError as err:
                where = f"[algorithms.{cell.algorithm.name}] settings.{cell.setting}"
                raise GridError(f"{grid.path} {where} ({cell.game}, seed {cell.seed}): "
                                f"{err}") from None  # fmt: skip
        planned.append(PlannedCell(cell, state, run, args))
    return planned


def run_order(planned: Sequence[PlannedCell]) -> list[PlannedCell]:
    """Cells to run: resumed ones first, then seed by seed, so that an early stop leaves whole
    comparisons (every setting of a game at one seed) rather than many seeds of one setting."""
    todo = [p for p in planned if p.run is not None]
    return sorted(
        todo,
        key=lambda p: (
            p.state != RESUME,
            p.cell.algorithm.seeds.index(p.cell.seed),
            p.cell.game,
            p.cell.algorithm.name,
            p.cell.setting,
        ),
    )


def describe_plan(planned: Sequence[PlannedCell]) -> str:
    counts = {s: sum(p.state == s for p in planned) for s in (FINISHED, KEPT, "resume", "new")}
    running = sum(p.state == RUNNING for p in planned)
    kept = f" ({counts[KEPT]} in the kept folder)" if counts[KEPT] else ""
    text = (f"{len(planned)} cells: {counts[FINISHED] + counts[KEPT]} finished{kept} (skipped), "
            f"{counts['resume']} to resume, {counts['new']} new")  # fmt: skip
    return text + (f", {running} running elsewhere (skipped)" if running else "")


def command_line(p: PlannedCell) -> str:
    """The recipe command that runs this cell by hand."""
    return f"python -m {p.cell.algorithm.recipe} " + shlex.join(p.args)


# ---------------------------------------------------------------------------------------------
# on this machine


class _StopRequest:
    """The first Ctrl-C / SIGTERM asks the study to stop (no new cell; running cells
    checkpoint); a second one stops at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def start_here(grid: Grid, p: PlannedCell) -> submitit.Job:
    """The cell's run as a submitit local job; its logs in the study folder's ``logs/``."""
    assert p.run is not None
    ex = local_executor(str(grid.dir / "logs" / "%j"), time_min=LOCAL_TIME_MIN, max_requeues=0)
    (job,) = submit_jobs(ex, p.cell.algorithm.recipe, [p.run.cfg])
    return job


def keep_finished(grid: Grid, kept: Path | None, out: Callable[[str], None] = print) -> None:
    """Write the study folder's record, then keep its finished cells in ``kept`` (if given)."""
    grid.write_record()
    if kept is not None:
        added = keep.pack_study(grid.dir, kept, grid.record())
        out(f"kept folder {kept}: {len(added)} finished cell(s) of {grid.dir} added")


def run_local(
    grid: Grid,
    planned: Sequence[PlannedCell],
    *,
    parallel: int,
    out: Callable[[str], None] = print,
    kept: Path | None = None,
) -> int:
    """Run the cells that need it, ``parallel`` at a time, each as a submitit local job;
    returns the exit code (0 all finished, 1 a cell failed, 128 + signal when stopped). With
    ``kept``, the study folder's finished cells are kept there first, then each cell as it
    finishes."""
    queue = run_order(planned)
    total, started, failed = len(queue), 0, 0
    running: list[tuple[PlannedCell, submitit.Job]] = []
    stop = _StopRequest()
    forwarded = False
    keep_finished(grid, kept, out)
    try:
        # After a stop only the running cells are waited for; the queue stays unstarted.
        while running or (queue and stop.signum is None):
            while queue and len(running) < parallel and stop.signum is None:
                p = queue.pop(0)
                job = start_here(grid, p)
                started += 1
                running.append((p, job))
                out(f"[{started}/{total}] start {p.cell.name} ({p.state}); log "
                    f"{job.paths.stderr}")  # fmt: skip
            if stop.signum is not None and not forwarded:
                forwarded = True
                name = signal.Signals(stop.signum).name
                out(f"{name}: stopping {len(running)} running cell(s) at their next batch "
                    "(each writes a checkpoint); the same command resumes the study")  # fmt: skip
                for _, job in running:
                    stop_local_job(job)
            for p, job in [r for r in running if r[1].done()]:
                running.remove((p, job))
                failed += not _report_end(p, job, out)
                if kept is not None and keep.keep_grid_cell(grid, kept, p.cell):
                    out(f"kept {p.cell.name} in {kept}")
            if running:
                time.sleep(POLL_S)
    finally:
        stop.restore()
    if stop.signum is not None:
        left = len(queue)
        out(f"stopped; {left} cell(s) not started. Resume: python -m accelrl.study run "
            f"{grid.path} --dir {grid.dir}")  # fmt: skip
        return 128 + stop.signum
    tail = "; the failed cells' logs are named above, and running the study again retries them"
    out(f"{total} cell(s) run, {failed} failed" + (tail if failed else ""))
    return 1 if failed else 0


def stop_local_job(job: submitit.Job) -> None:
    """SIGTERM to a local job's controller, which passes it on to the run: the run writes a
    checkpoint at its next batch boundary and exits. (``job.cancel()`` sends SIGINT, which
    local controllers ignore: ``accelrl.launch.job.submit_jobs`` starts them so; submitit keeps
    the controller's ``Popen`` in ``_process``.)"""
    process = getattr(job, "_process", None)
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)


def _report_end(p: PlannedCell, job: submitit.Job, out: Callable[[str], None]) -> bool:
    """Print how the cell's job ended; True when it finished its budget."""
    try:
        summary = job.result()
    except Exception as err:  # submitit re-raises the job's own exception
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        reason = lines[-1] if lines else repr(err)
        # A run stopped by a signal ends with "stopped by SIGTERM at N frames; checkpoint ...":
        # in the error text, or only in the job's stderr (submitit's message may end elsewhere).
        try:
            text = str(err) + "\n" + Path(job.paths.stderr).read_text()[-4000:]
        except OSError:
            text = str(err)
        stopped = [ln.strip() for ln in text.splitlines() if "stopped by" in ln]
        if stopped:
            out(f"stopped {p.cell.name}: {stopped[-1].split('RunInterrupted: ')[-1]}")
            return True
        out(f"FAILED {p.cell.name}: {reason} (log: {job.paths.stderr})")
        return False
    fps, ret = summary.get("fps"), summary.get("mean_return_100")
    out(f"done {p.cell.name}: {summary.get('frames')} frames, "
        + (f"mean return of the last 100 episodes {ret:.3g}, " if isinstance(ret, float) else "")
        + (f"{fps:.0f} frames/s" if isinstance(fps, float) else ""))  # fmt: skip
    return True


def cpu_parallel(threads: int) -> int:
    """Cells that fit this machine at ``threads`` torch threads each (at least one)."""
    from accelrl.config import cpu_count

    return max(1, cpu_count() // max(1, threads))
