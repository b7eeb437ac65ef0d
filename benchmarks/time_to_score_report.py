"""Curves and a table of ``benchmarks.time_to_score`` runs: the recipe's and the libraries'.

Usage: ``python -m benchmarks.time_to_score_report DIR [DIR ...] -o OUT``

Each DIR is the ``--out`` folder of one run (``time_to_score.json`` and ``curve.csv``: one row per
finished game, wall seconds from launch, frames, unclipped score). Writes to OUT:

- ``curves.png``: the mean score of the last ``window`` games against wall-clock minutes from
  launch and against emulator frames, one colour per library, one line style per seed, the
  target as a dashed line;
- ``table.md`` (also printed): each run's host, time to the target from launch and from its
  first update, the frames it took and its frames per second over that stretch; then each
  library's mean time over its seeds on each host, each run's time, the mean frames at the
  target (the learning per frame, which frames/s cannot show), and the mean time over the
  recipe's on the same host (the library's time / the recipe's: above 1, the recipe is faster).

Hosts differ by several times in speed, so minutes are compared only within one host (the CPU
that ``time_to_score`` records): a library whose runs are on a host where the recipe has none
gets no ratio there. A run that did not reach the target counts as "not reached" with its
budget; a library with such a run on a host gets no mean there. The runs must share a game,
target and window: the report refuses a mix.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from accelrl.tools.report import AGGREGATES, bootstrap_interval

RECIPE = "accelrl"
SHORT = {"sb3": "Stable-Baselines3", "cleanrl": "CleanRL", "sf": "Sample Factory"}
ORDER = [RECIPE, *SHORT.values()]  # the order of the speed table
LINESTYLES = ("-", "--", ":", "-.")


class ReportError(ValueError):
    """A folder that is not a time-to-score run, or runs that cannot share one report."""


@dataclass
class Run:
    folder: Path
    library: str  # "accelrl" or a peer's short name
    seed: int | None
    result: dict
    wall_s: np.ndarray  # per finished game
    frames: np.ndarray
    scores: np.ndarray

    @property
    def host(self) -> str:
        return str(self.result.get("host") or "host not recorded")

    @property
    def reached(self) -> bool:
        return bool(self.result.get("reached"))

    def windowed(self, window: int) -> np.ndarray:
        """Mean of the last ``window`` scores at each game, from the ``window``-th game on."""
        c = np.concatenate([[0.0], np.cumsum(self.scores)])
        return (c[window:] - c[:-window]) / window


def load_run(folder: Path) -> Run:
    result_path, curve_path = folder / "time_to_score.json", folder / "curve.csv"
    if not result_path.is_file() or not curve_path.is_file():
        raise ReportError(
            f"{folder}: no time_to_score.json and curve.csv (the --out of "
            "python -m benchmarks.time_to_score)"
        )
    result = json.loads(result_path.read_text())
    rows = []
    with open(curve_path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                rows.append((float(row["wall_s"]), float(row["frames"]), float(row["return"])))
            except (KeyError, TypeError, ValueError):
                continue
    data = np.array(rows, dtype=float).reshape(-1, 3)
    library = SHORT.get(result["peer"], result["peer"]) if "peer" in result else RECIPE
    return Run(folder, library, result.get("seed"), result, *data.T)


def check_same_task(runs: Sequence[Run]) -> tuple[str, float, int]:
    keys = {(r.result.get("game"), r.result.get("target"), r.result.get("window")) for r in runs}
    if len(keys) != 1:
        raise ReportError(f"the runs differ in (game, target, window): {sorted(map(str, keys))}")
    game, target, window = keys.pop()
    return str(game), float(target), int(window)


def fmt_min(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def host_labels(runs: Sequence[Run]) -> dict[str, str]:
    """A short label (A, B, ...) for each host, in the order the runs name them."""
    return {h: chr(ord("A") + i) for i, h in enumerate(dict.fromkeys(r.host for r in runs))}


def table(runs: Sequence[Run], game: str, target: float, window: int) -> str:
    """The per-run table and the per-library means and ratios on each host, as markdown."""
    labels = host_labels(runs)
    lines = [
        f"{game}: minutes to a mean score of {target:g} over the last {window} games",
        "",
        *(f"- host {label}: {host}" for host, label in labels.items()),
        "",
        "| library | seed | host | reached | minutes from launch | minutes from first update "
        "| frames at target | frames/s to target | best mean |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        res = r.result
        wall, first = res.get("wall_s_from_launch"), res.get("wall_s_from_first_update")
        frames = res.get("frames_at_target")
        fps = f"{frames / first:,.0f}" if frames and first else "-"
        reached = (
            "yes" if r.reached else f"no ({res.get('ended_by')}, {fmt_min(res['budget_s'])} min)"
        )
        best = res.get("best_mean")
        lines.append(
            f"| {r.library} | {r.seed} | {labels[r.host]} | {reached} | {fmt_min(wall)} "
            f"| {fmt_min(first)} "
            f"| {'-' if frames is None else f'{frames:,}'} | {fps} "
            f"| {'-' if best is None else f'{best:.2f}'} |"
        )
    groups: dict[tuple[str, str], list[Run]] = {}  # (library, host) -> its runs, in order
    for r in runs:
        groups.setdefault((r.library, r.host), []).append(r)
    means: dict[tuple[str, str], float | None] = {}  # (library, host) -> mean seconds
    for key, mine in groups.items():
        ok = all(r.reached for r in mine)
        means[key] = float(np.mean([r.result["wall_s_from_launch"] for r in mine])) if ok else None
    lines += [
        "",
        "| library | host | runs | mean minutes from launch | 95% interval of the mean "
        "| each run's minutes | mean frames at target | library / accelrl on that host |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (library, host), mean in means.items():
        mine = groups[library, host]
        each = ", ".join(fmt_min(r.result.get("wall_s_from_launch")) for r in mine)
        frames = (
            f"{np.mean([r.result['frames_at_target'] for r in mine]):,.0f}"
            if mean is not None
            else "-"
        )
        base = means.get((RECIPE, host))
        if (RECIPE, host) not in means:
            ratio = "- (no accelrl run on this host)"
        elif mean is None or base is None:
            ratio = "-"
        else:
            ratio = f"{mean / base:.2f}x"
        shown = "not all reached" if mean is None else fmt_min(mean)
        seconds = [r.result["wall_s_from_launch"] for r in mine]
        spread = "-" if mean is None else mean_interval(seconds)
        lines.append(
            f"| {library} | {labels[host]} | {len(mine)} | {shown} | {spread} | {each} | {frames} "
            f"| {ratio} |"
        )
    return "\n".join(lines) + "\n"


def mean_interval(seconds: Sequence[float], reps: int = 10_000) -> str:
    """The 95% bootstrap percentile interval of the mean of runs' ``seconds``, in minutes
    (runs resampled with replacement; a fixed generator, so a table is the same each time)."""
    matrix = np.asarray(seconds, dtype=np.float64)[:, None]
    _, low, high = bootstrap_interval(matrix, AGGREGATES["mean"], reps, np.random.default_rng(0))
    return f"{fmt_min(low)}-{fmt_min(high)}"


def draw(runs: Sequence[Run], out: Path, game: str, target: float, window: int) -> Path:
    fig = Figure(figsize=(13, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax_t, ax_f = fig.subplots(1, 2, sharey=True)
    libraries = list(dict.fromkeys(r.library for r in runs))
    labels = host_labels(runs)
    seen: dict[str, int] = {}
    for r in runs:
        k = seen[r.library] = seen.get(r.library, -1) + 1
        color = f"C{libraries.index(r.library) % 10}"
        if len(r.scores) < window:
            continue
        y = r.windowed(window)
        style = {"color": color, "ls": LINESTYLES[k % len(LINESTYLES)], "lw": 1.5}
        label = f"{r.library}, seed {r.seed}"
        if len(labels) > 1:
            label += f", host {labels[r.host]}"
        ax_t.plot(r.wall_s[window - 1 :] / 60, y, label=label, **style)
        ax_f.plot(r.frames[window - 1 :], y, **style)
    for ax in (ax_t, ax_f):
        ax.axhline(target, color="0.4", ls="--", lw=0.9)
        ax.grid(alpha=0.3)
    ax_t.set_xlabel("wall-clock minutes from launch")
    ax_f.set_xlabel("emulator frames")
    ax_f.xaxis.set_major_formatter(EngFormatter())
    ax_t.set_ylabel(f"{game}: mean score of the last {window} games")
    ax_t.legend(loc="best", fontsize="small")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "curves.png"
    fig.savefig(path, dpi=110)
    return path


def report(folders: Sequence[str | Path], out: str | Path) -> str:
    """Write ``curves.png`` and ``table.md`` to ``out``; returns the table."""
    if not folders:
        raise ReportError("no run folders given")
    runs = sorted(
        (load_run(Path(f)) for f in folders),
        key=lambda r: (
            ORDER.index(r.library) if r.library in ORDER else len(ORDER),
            r.library,
            r.seed is None,
            r.seed or 0,
        ),  # fmt: skip
    )
    game, target, window = check_same_task(runs)
    out = Path(out)
    draw(runs, out, game, target, window)
    text = table(runs, game, target, window)
    (out / "table.md").write_text(text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.time_to_score_report", description=__doc__.splitlines()[0]
    )
    p.add_argument("folders", nargs="+", help="--out folders of benchmarks.time_to_score")
    p.add_argument("-o", "--out", required=True, help="folder for curves.png and table.md")
    args = p.parse_args(argv)
    try:
        print(report(args.folders, args.out), end="")
    except ReportError as err:
        print(f"{p.prog}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
