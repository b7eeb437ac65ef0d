"""python -m accelrl.study run GRID.toml | pack STUDY_DIR -o KEPT | report STUDY_DIR (see
``accelrl.study``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelrl.study.runner import JobArrays

PROG = "python -m accelrl.study"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, command: str = PROG, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.command = command

    def error(self, message: str):  # one line instead of argparse's usage block
        self.exit(2, f"{self.command}: error: {message} (see {self.command} --help)\n")


def _fractions(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected fractions such as 0.25,0.5,1"
        ) from None


def _grid_command(
    sub: Any, name: str, prog: str, summary: str, description: str
) -> argparse.ArgumentParser:
    """A subcommand that reads a grid file: GRID and --dir."""
    command = sub.add_parser(name, command=prog, help=summary, description=description)
    command.add_argument("grid", help="grid file (TOML), e.g. studies/minatar_batch.toml")
    command.add_argument("--dir", help="study folder (default: the grid's dir, else runs/<name>)")
    return command


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, command=prog, description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = _grid_command(
        sub,
        "run",
        prog,
        "run a grid's unfinished cells (here, or as SLURM job arrays)",
        "Run every unfinished cell of GRID: finished cells are skipped, cells with a checkpoint "
        "resume. Ctrl-C (or SIGTERM) stops the running cells with a checkpoint; the same "
        "command resumes.",
    )
    run.add_argument(
        "--frames",
        type=int,
        help="every algorithm's budget instead of the grid's (a trial or timing of the grid; "
        "needs --dir, so that its cells never mix with the study's)",
    )
    run.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per cell (--threads.torch-threads unless the grid sets it; default 1)",
    )
    run.add_argument(
        "--parallel",
        type=int,
        help="cells running at once on this machine (default: cores // --threads)",
    )
    run.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only cells whose name (algorithm/setting/game/seedN) matches, e.g. 'dqn/*'; "
        "repeatable",
    )
    run.add_argument(
        "--keep",
        metavar="KEPT",
        help="a folder of finished cells kept small (no checkpoints or replay; "
        "accelrl.study.keep): its cells are skipped, and the study folder's finished cells, "
        "then each cell as it finishes, are added to it; `report KEPT` reads it",
    )
    where = run.add_mutually_exclusive_group()
    where.add_argument(
        "--dry-run", action="store_true", help="list each cell, its state and command; run none"
    )
    where.add_argument(
        "--print-array",
        action="store_true",
        help="print the SLURM job array of each recipe (sbatch script and cells); submit "
        "nothing (python -m slurm.study)",
    )
    where.add_argument(
        "--slurm",
        action="store_true",
        help="submit the cells as SLURM job arrays (python -m slurm.study)",
    )
    status = _grid_command(
        sub,
        "status",
        prog,
        "where a grid stands: each cell's state, frames and last-100 return",
        "Each cell of GRID with its state (finished, kept, running, resume, new), the frames it "
        "has reached of its budget and the mean return of its last 100 episodes, then a count "
        "per setting. Reads the run folders only: safe beside a running study.",
    )
    status.add_argument("--keep", metavar="KEPT", help="the kept folder the study runs with")
    status.add_argument(
        "--only", action="append", default=[], metavar="PATTERN", help="as for run; repeatable"
    )
    pack = sub.add_parser(
        "pack",
        command=prog,
        help="keep a study folder's finished cells small, in a folder of their own",
        description="Add every finished cell of STUDY_DIR to KEPT with only what `report` reads "
        "(summary.json, episodes' frames and returns, metrics' frames and time, evaluations): "
        "a folder small enough to commit or carry, which `run --keep KEPT` continues from.",
    )
    pack.add_argument("study_dir", help="the study folder that `run` wrote")
    pack.add_argument("-o", "--out", required=True, metavar="KEPT", help="the kept folder")
    rep = sub.add_parser(
        "report",
        command=prog,
        help="curves and a score table of a study folder",
        description="Return vs frames and vs wall-clock time per setting (one PNG per algorithm "
        "and game) and each setting's score at fractions of the budget relative to the "
        "standard setting, with 95%% bootstrap intervals over seeds (report.md, scores.csv).",
    )
    rep.add_argument(
        "study_dir", help="the study folder that `run` wrote (e.g. runs/minatar_batch)"
    )
    rep.add_argument("-o", "--out", help="output folder (default STUDY_DIR/report)")
    rep.add_argument(
        "--fractions",
        type=_fractions,
        default=[0.25, 0.5, 1.0],
        help="fractions of each algorithm's budget to score at (default 0.25,0.5,1)",
    )
    rep.add_argument(
        "--window",
        type=float,
        default=0.05,
        help="episodes ending in this fraction of the budget up to a point score it (default 0.05)",
    )
    rep.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    rep.add_argument(
        "--algorithms",
        type=lambda text: [a for a in text.split(",") if a],
        help="only these algorithms of the grid, e.g. dqn,c51 (default: all)",
    )
    rep.add_argument(
        "--against",
        metavar="ALGO",
        help="also race every other algorithm against ALGO of the grid: the minutes to ALGO's "
        "final score per game and seed, and the scores at equal wall time (races.csv)",
    )
    return p


def main(
    argv: Sequence[str] | None = None, *, arrays: JobArrays | None = None, prog: str = PROG
) -> int:
    """The command line; returns the exit code (2: refused before running anything).
    ``arrays`` runs ``run --slurm`` and ``run --print-array`` (``python -m slurm.study`` gives
    SLURM's); without it they are refused."""
    args = parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    from accelrl.study.grid import GridError
    from accelrl.study.report import StudyReportError

    try:
        code = _command(args, arrays)
        sys.stdout.flush()  # here, so that a closed pipe is met inside this try
        return code
    except (GridError, StudyReportError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as Unix tools do
        _drop_stdout()
        return 1


def _command(args: argparse.Namespace, arrays: JobArrays | None) -> int:
    if args.command == "run":
        return _run(args, arrays)
    if args.command == "status":
        from pathlib import Path

        from accelrl.study.grid import load_grid
        from accelrl.study.status import grid_status, status_text

        grid = load_grid(args.grid, args.dir)
        kept = None if args.keep is None else Path(args.keep).absolute()
        print(f"study {grid.dir}" + ("" if kept is None else f", kept folder {kept}"))
        print(status_text(grid_status(grid, args.only, kept)))
        return 0
    if args.command == "pack":
        from pathlib import Path

        from accelrl.study.keep import pack_study

        added = pack_study(Path(args.study_dir), Path(args.out))
        print(f"{args.out}: {len(added)} finished cell(s) added" +
              "".join(f"\n  {name}" for name in added))  # fmt: skip
        return 0
    from accelrl.study.report import report

    report(args.study_dir, args.out, fractions=args.fractions, window=args.window,
           reps=args.reps, algorithms=args.algorithms, against=args.against)  # fmt: skip
    return 0


def _drop_stdout() -> None:
    """Send the rest of stdout to /dev/null, so that nothing (not even the interpreter's final
    flush) writes to a pipe whose reader has gone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _say(text: str) -> None:
    """The runner's progress line; a reader that went away does not stop the running cells."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _drop_stdout()


def _run(args: argparse.Namespace, arrays: JobArrays | None) -> int:
    from accelrl.study.grid import GridError, load_grid, merged_record
    from accelrl.study.runner import (
        command_line,
        cpu_parallel,
        describe_plan,
        keep_finished,
        plan_cells,
        run_local,
    )

    on_slurm = args.slurm or args.print_array
    if on_slurm and arrays is None:
        flag = "--slurm" if args.slurm else "--print-array"
        raise GridError(f"{flag}: SLURM job arrays are run by python -m slurm.study, with the "
                        "same arguments")  # fmt: skip
    if args.threads < 1:
        raise GridError(f"--threads {args.threads}: must be >= 1")
    if args.parallel is not None and args.parallel < 1:
        raise GridError(f"--parallel {args.parallel}: must be >= 1")
    if args.frames is not None and (args.frames < 1 or args.dir is None):
        raise GridError(f"--frames {args.frames}: give a budget >= 1 and a --dir of its own")
    grid = load_grid(args.grid, args.dir, frames=args.frames)
    if args.frames is not None and grid.dir == load_grid(args.grid).dir:
        raise GridError(f"--frames {args.frames}: --dir {args.dir} is the study's own folder; "
                        "give the trial a folder of its own")  # fmt: skip
    kept = None
    if args.keep is not None:
        from pathlib import Path

        from accelrl.study.keep import check_kept_folder

        kept = Path(args.keep).absolute()
        check_kept_folder(kept, grid.dir)
    for folder in (grid.dir, kept):  # cells run with other flags under the same names: refuse
        if folder is not None:
            merged_record(folder, grid.record())
    planned = plan_cells(grid, threads=args.threads, runs_here=not on_slurm, only=args.only,
                         kept=kept)  # fmt: skip
    print(f"study {grid.dir}: {describe_plan(planned)}", flush=True)
    if on_slurm and arrays is not None:
        return arrays(grid, planned, dry_run=args.print_array)
    if args.dry_run:
        for p in planned:
            print(f"{p.state:8s} {p.cell.name}" + (f"\n  {command_line(p)}" if p.run else ""))
        return 0
    if not any(p.run for p in planned):
        if kept is not None:  # finished cells still go to the kept folder
            keep_finished(grid, kept)
        print("nothing to run")
        return 0
    parallel = args.parallel or cpu_parallel(args.threads)
    _say(f"running {parallel} cell(s) at a time, {args.threads} torch thread(s) each; "
         f"logs in {grid.dir / 'logs'}")  # fmt: skip
    return run_local(grid, planned, parallel=parallel, out=_say, kept=kept)


if __name__ == "__main__":
    sys.exit(main())
