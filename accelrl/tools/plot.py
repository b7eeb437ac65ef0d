"""Plot episode returns of one or more runs vs emulator frames and vs wall-clock minutes.

Usage: ``python -m accelrl.tools.plot RUN_DIR [RUN_DIR ...] [-o out.png] [--smooth 100]``

Reads ``episodes.csv`` (frames, return, length) and ``metrics.csv`` (frames, time_s) written by
``accelrl.run.logger.RunLogger``; episodes get their wall time by interpolating ``time_s`` over
``frames``. A dashed vertical line marks each frame count where a ``--resume`` changed the run's
flags (``config_changes.jsonl``), labelled with the flags it changed. Uses matplotlib's Agg canvas
directly (no pyplot), so it never needs a display and leaves the caller's backend alone.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from accelrl.run.record import DamagedRecord, flag_name, read_changes


class PlotError(ValueError):
    """A run folder that cannot be plotted; the message names it."""


def read_columns(path: Path, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Float columns ``names`` of a csv file; rows with missing or unparsable cells are skipped."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        # An empty file is a run that has not finished an episode (or logged a row) yet.
        missing = [n for n in names if reader.fieldnames and n not in reader.fieldnames]
        if missing:
            raise PlotError(f"{path} has no column(s) {missing}")
        rows = []
        for row in reader:
            try:
                rows.append([float(row[n]) for n in names])
            except (TypeError, ValueError):
                continue  # a torn last line of a killed run, or an empty cell
    data = np.asarray(rows, dtype=float).reshape(-1, len(names))
    return {n: data[:, i] for i, n in enumerate(names)}


def _rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    # The first window-1 points average what is there so the curve starts at the first episode.
    c = np.concatenate([[0.0], np.cumsum(x)])
    idx = np.arange(1, len(x) + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def wall_minutes(run_dir: Path, frames: np.ndarray) -> np.ndarray | None:
    """Wall-clock minutes of the run at each of ``frames`` (``time_s`` of metrics.csv
    interpolated over its frames; frame 0 at time 0); None without metrics.csv rows."""
    path = run_dir / "metrics.csv"
    if not path.exists():
        return None
    m = read_columns(path, ("frames", "time_s"))
    if len(m["frames"]) == 0:
        return None
    order = np.argsort(m["frames"], kind="stable")
    xf, xt = m["frames"][order], m["time_s"][order]
    if xf[0] > 0:
        # Frame 0 is at time 0, so episodes before the first logged row still get a time.
        xf, xt = np.concatenate([[0.0], xf]), np.concatenate([[0.0], xt])
    return np.interp(frames, xf, xt) / 60.0


def plot_runs(run_dirs: Sequence[str | Path], out: str | Path, smooth: int = 100) -> Path:
    """Write one PNG with return vs emulator frames and vs wall minutes for each run; returns its
    path. Raises ``PlotError`` for a folder without ``episodes.csv``."""
    if smooth < 1:
        raise PlotError(f"--smooth must be >= 1, got {smooth}")
    runs = []
    for d in map(Path, run_dirs):
        path = d / "episodes.csv"
        if not path.is_file():
            raise PlotError(f"{d} has no episodes.csv (not a run folder, or no episode finished)")
        ep = read_columns(path, ("frames", "return"))
        try:
            changes, _ = read_changes(d)
        except DamagedRecord as err:
            raise PlotError(str(err)) from None
        runs.append((d, ep["frames"], ep["return"], wall_minutes(d, ep["frames"]), changes))
    if not runs:
        raise PlotError("no run folders given")

    fig = Figure(figsize=(13, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax_f, ax_t = fig.subplots(1, 2, sharey=True)
    for i, (d, frames, returns, minutes, changes) in enumerate(runs):
        color = f"C{i % 10}"
        label = d.resolve().name
        smoothed = _rolling_mean(returns, smooth) if len(returns) else returns
        for ax, x in ((ax_f, frames), (ax_t, minutes)):
            if x is None:
                continue
            ax.plot(x, returns, color=color, alpha=0.15, lw=0.6)
            ax.plot(x, smoothed, color=color, lw=1.6, label=label)
        for record in changes:
            # Where a --resume changed the run's flags (config_changes.jsonl).
            at = float(record["frames"])
            ax_f.axvline(at, color=color, ls="--", lw=0.9)
            ax_f.annotate(
                ", ".join(flag_name(str(c.get("key"))) for c in record["changes"]),
                (at, 1.0),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize="x-small",
                color=color,
                in_layout=False,
            )
    ax_f.set_xlabel("emulator frames")
    ax_f.xaxis.set_major_formatter(EngFormatter())
    ax_f.set_ylabel(f"episode return (mean of {smooth})")
    ax_t.set_xlabel("wall-clock minutes")
    for ax in (ax_f, ax_t):
        ax.grid(alpha=0.3)
    ax_f.legend(loc="best", fontsize="small")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit code (2 for unusable input)."""
    parser = argparse.ArgumentParser(
        prog="python -m accelrl.tools.plot", description=__doc__.split("\n")[0]
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        help="PNG path (default: RUN_DIR/returns.png for one run, else ./returns.png)",
    )
    parser.add_argument("--smooth", type=int, default=100, help="episodes per rolling mean")
    args = parser.parse_args(argv)
    out = args.out
    if out is None:
        out = args.run_dirs[0] / "returns.png" if len(args.run_dirs) == 1 else Path("returns.png")
    try:
        path = plot_runs(args.run_dirs, out, smooth=args.smooth)
    except PlotError as e:
        print(f"accelrl.tools.plot: error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
