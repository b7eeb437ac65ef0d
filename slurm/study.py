"""A study's cells as SLURM job arrays: ``python -m accelrl.study``'s command line, given SLURM
to run on (``run --slurm`` submits one job array per recipe, ``run --print-array`` prints
them; every other command and flag is the study's own).

    python -m slurm.study run studies/minatar_batch.toml --print-array   # no cluster needed
    python -m slurm.study run studies/minatar_batch.toml --slurm --keep KEPT

Each recipe's array takes ``slurm.launch``'s options from the grid's ``[slurm]`` table.
"""

from __future__ import annotations

import shutil
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from accelrl.launch.plan import LaunchError
from accelrl.study.__main__ import main as study_main
from accelrl.study.grid import Grid, GridError
from accelrl.study.runner import PlannedCell, run_order
from slurm import launch

PROG = "python -m slurm.study"

_NOT_IN_GRID = {"recipe", "recipe_args", "sweep", "suite", "dry_run", "local", "wait"}


def slurm_options(grid: Grid, recipe: str, *, dry_run: bool) -> launch.LaunchOptions:
    """``slurm.launch`` options for one recipe's job array from the grid's [slurm] table."""
    hints = typing.get_type_hints(launch.LaunchOptions)
    allowed = {f.name for f in fields(launch.LaunchOptions)} - _NOT_IN_GRID
    values: dict[str, Any] = {"folder": str(grid.dir / "slurm_logs" / "%j")}
    for key, value in grid.slurm.items():
        if key not in allowed:
            raise GridError(f"{grid.path} [slurm]: unknown key {key!r}; known: "
                            f"{sorted(allowed)}")  # fmt: skip
        if not _fits(value, hints[key]):
            raise GridError(f"{grid.path} [slurm] {key} = {value!r}: expected "
                            f"{hints[key]}")  # fmt: skip
        values[key] = value
    opts = launch.LaunchOptions(recipe=recipe, dry_run=dry_run, **values)
    try:
        launch.check_options(opts)
    except LaunchError as err:
        raise GridError(f"{grid.path} [slurm]: {err}") from None
    return opts


def _fits(value: Any, hint: Any) -> bool:
    """Whether a TOML value can stand for a field of type ``hint``."""
    args = _types(hint)
    if isinstance(value, bool):
        return bool in args
    if isinstance(value, int):
        return int in args or float in args
    if isinstance(value, float):
        return float in args
    if isinstance(value, list):
        return list in args and all(isinstance(v, str) for v in value)
    return type(value) in args


def _types(hint: Any) -> set[type]:
    origin = typing.get_origin(hint)
    if origin is None:
        return {hint}
    if origin is list:
        return {list}
    return {t for a in typing.get_args(hint) for t in _types(a)}


def run_slurm(
    grid: Grid,
    planned: Sequence[PlannedCell],
    *,
    dry_run: bool,
    out: Callable[[str], None] = print,
) -> int:
    """One job array per recipe of the cells that need to run: printed (``dry_run``, no cluster
    needed) or submitted through ``slurm.launch``. Raises ``GridError``."""
    todo = run_order(planned)
    if not todo:
        out("nothing to run")
        return 0
    if not dry_run and shutil.which("sbatch") is None:
        raise GridError("--slurm: no SLURM cluster found (sbatch not on PATH); run the grid here "
                        "without --slurm, or print its job arrays with --print-array")  # fmt: skip
    by_recipe: dict[str, list[PlannedCell]] = {}
    for p in todo:
        by_recipe.setdefault(p.cell.algorithm.recipe, []).append(p)
    if not dry_run:
        grid.write_record()
    for recipe, cells in by_recipe.items():
        opts = slurm_options(grid, recipe, dry_run=dry_run)
        runs = [p.run for p in cells if p.run is not None]
        try:
            launch.check_launch(opts, runs)
            if dry_run:
                out(f"# {recipe}: a job array of {len(runs)} cell(s)")
                out(launch.sbatch_script(opts, len(runs)).rstrip("\n"))
                jobs = None
            else:
                jobs = launch.submit(opts, runs)
        except LaunchError as err:
            raise GridError(f"{grid.path}: {recipe}: {err}") from None
        for i, p in enumerate(cells):
            where = f"job {jobs[i].job_id}" if jobs else f"array index {i}"
            out(f"# {where}: {p.cell.name} ({p.state}) -> {p.cell.run_dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The study's command line with SLURM job arrays; returns the exit code."""
    return study_main(argv, arrays=run_slurm, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
