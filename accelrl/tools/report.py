"""Report a suite of runs: per-game scores, human-normalized aggregates with confidence intervals,
performance profiles and learning curves.

    python -m accelrl.tools.report runs/suite-*/ -o report          # report.txt, report-*.png, .csv
    python -m accelrl.tools.report runs/ppo-* runs/dqn-* -o compare  # one group per algorithm

Each run folder gives its algorithm, game and seed (config.json), its final score (the final
greedy evaluation in summary.json, else the last row of eval.csv, else the mean of its last 100
training episodes; the source is printed) and its learning curve (episodes.csv). Runs are
grouped by algorithm (``--group-by`` picks another config field, e.g. ``dqn.preset``). Flags a
``--resume`` changed (config_changes.jsonl) are listed with the frame count they apply from.

Aggregates follow Agarwal et al. (2021, "Deep RL at the edge of the statistical precipice"):
median, mean and interquartile mean (IQM: the mean of the middle 50% of all run x game scores)
of human-normalized scores, with 95% stratified-bootstrap percentile intervals (runs resampled
with replacement within each game), and performance profiles (the fraction of run x game scores
above each threshold). rliable implements the same method; its 1.2 release installs but does
not import with pandas 3 (arch 7.2), so it is written here on NumPy.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from accelrl.run.record import (
    CONFIG_NAME,
    DamagedRecord,
    describe_record,
    read_changes,
    read_config,
)
from accelrl.tools.atari_scores import RANDOM_HUMAN, human_normalized

METRICS = ("median", "iqm", "mean")


class ReportError(ValueError):
    """A run folder that cannot be reported; the message names it."""


@dataclass
class RunResult:
    run_dir: Path
    group: str
    game: str
    """ale-py ROM id for Atari games, the gymnasium id otherwise."""
    seed: int
    score: float
    source: str
    frames: np.ndarray
    returns: np.ndarray
    changes: list[dict] = field(default_factory=list)
    """Records of config_changes.jsonl: what a ``--resume`` changed, from which frame on."""

    @property
    def normalized(self) -> float:
        return human_normalized(self.game, self.score)


def _field(config: dict, dotted: str):
    value = config
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def csv_rows(path: Path, *numbers: str) -> list[dict[str, float]]:
    """The rows of ``path`` whose ``numbers`` columns all parse (a line cut by a kill, an empty
    cell or a hand edit is skipped)."""
    if not path.is_file():
        return []
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            try:
                rows.append({name: float(row[name]) for name in numbers})
            except (KeyError, TypeError, ValueError):
                continue
    return rows


def read_run(run_dir: str | Path, group_by: str = "algo") -> RunResult:
    """The final score and learning curve of one run folder."""
    run_dir = Path(run_dir)
    try:
        saved = read_config(run_dir)
        changes, _ = read_changes(run_dir)
    except DamagedRecord as err:
        raise ReportError(f"{err}: repair it, or leave the run out of the report") from None
    if saved is None:
        raise ReportError(f"{run_dir} has no config.json: not a run folder written by a recipe")
    path = run_dir / CONFIG_NAME
    config = saved["config"]
    try:
        group = str(saved["algo"] if group_by == "algo" else _field(config, group_by))
    except KeyError:
        raise ReportError(f"{path} has no field {group_by!r} to group by") from None
    game_name = str(_field(config, "env.game"))
    from accelrl.envs import is_atari, rom_id

    game = rom_id(game_name) if is_atari(game_name) else game_name
    rows = csv_rows(run_dir / "episodes.csv", "frames", "return")
    frames = np.array([r["frames"] for r in rows])
    returns = np.array([r["return"] for r in rows])
    summary_path = run_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    except (OSError, ValueError) as err:
        raise ReportError(f"{summary_path} cannot be read ({err}): repair it, or delete it to "
                          "score the run from eval.csv or episodes.csv") from None  # fmt: skip
    evals = csv_rows(run_dir / "eval.csv", "eval/greedy_return")
    if summary.get("eval/greedy_return") is not None:  # null: no evaluation
        score, source = float(summary["eval/greedy_return"]), "final greedy evaluation"
    elif evals:
        score, source = evals[-1]["eval/greedy_return"], "last greedy evaluation"
    elif len(returns):
        score, source = float(returns[-100:].mean()), "last-100 training mean"
    else:
        raise ReportError(f"{run_dir} has no evaluation and no finished episode to score")
    return RunResult(run_dir, group, game, int(config.get("seed", 0)), score, source, frames,
                     returns, changes)  # fmt: skip


def score_matrix(results: Sequence[RunResult], games: Sequence[str]) -> np.ndarray:
    """Human-normalized scores ``[runs, games]``: the k-th run of every game in row k (the same
    number of runs per game; extra runs of a game beyond the smallest count are left out)."""
    per_game = {g: sorted((r for r in results if r.game == g), key=lambda r: r.seed) for g in games}
    runs = min(len(v) for v in per_game.values())
    return np.array([[per_game[g][k].normalized for g in games] for k in range(runs)])


def iqm(x: np.ndarray) -> float:
    """Mean of the middle 50% of all values: floor(n / 4) cut from each end (as
    ``scipy.stats.trim_mean(x, 0.25)``, which rliable uses)."""
    values = np.sort(np.asarray(x, dtype=float).reshape(-1))
    n = len(values)
    cut = int(math.floor(0.25 * n))
    return float(values[cut : n - cut].mean())


AGGREGATES: dict[str, Callable[[np.ndarray], float]] = {
    # Median over games of each game's mean over runs, as in the DQN literature.
    "median": lambda m: float(np.median(m.mean(axis=0))),
    "iqm": iqm,
    "mean": lambda m: float(m.mean()),
}


def stratified_bootstrap(
    matrix: np.ndarray, stat: Callable[[np.ndarray], float], reps: int, rng: np.random.Generator
) -> np.ndarray:
    """``reps`` values of ``stat`` on matrices whose runs were resampled within each game."""
    runs, games = matrix.shape
    out = np.empty(reps)
    for i in range(reps):
        rows = rng.integers(0, runs, size=(runs, games))
        out[i] = stat(np.take_along_axis(matrix, rows, axis=0))
    return out


def bootstrap_interval(
    matrix: np.ndarray,
    stat: Callable[[np.ndarray], float],
    reps: int,
    rng: np.random.Generator,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """``(stat(matrix), low, high)``: the statistic and its stratified-bootstrap percentile
    interval (runs resampled within each column); NaN bounds when a resample gives NaN."""
    tail = 100 * (1 - confidence) / 2
    boot = stratified_bootstrap(matrix, stat, reps, rng)
    low, high = np.percentile(boot, [tail, 100 - tail])
    return stat(matrix), float(low), float(high)


def interval_estimates(
    matrix: np.ndarray, reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> dict[str, tuple[float, float, float]]:
    """``{metric: (point, low, high)}`` for median, IQM and mean (percentile intervals)."""
    rng = np.random.default_rng(seed)
    return {
        name: bootstrap_interval(matrix, AGGREGATES[name], reps, rng, confidence)
        for name in METRICS
    }


def performance_profile(matrix: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of run x game scores above each threshold in ``taus``."""
    return (matrix.reshape(-1, 1) > taus.reshape(1, -1)).mean(axis=0)


def write_plots(
    groups: dict[str, list[RunResult]],
    estimates: dict[str, dict],
    matrices: dict[str, np.ndarray],
    out: Path,
) -> list[Path]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    written = []
    colors = {g: f"C{i}" for i, g in enumerate(groups)}
    if estimates:
        fig = Figure(figsize=(3.2 * len(METRICS), 0.6 + 0.5 * len(estimates)))
        for j, name in enumerate(METRICS):
            ax = fig.add_subplot(1, len(METRICS), j + 1)
            for i, (group, est) in enumerate(estimates.items()):
                point, low, high = est[name]
                ax.barh(i, high - low, left=low, height=0.6, color=colors[group], alpha=0.75)
                ax.plot([point, point], [i - 0.3, i + 0.3], color="black")
            ax.set_yticks(range(len(estimates)), list(estimates) if j == 0 else [])
            ax.set_title(name.upper() if name == "iqm" else name.capitalize())
            ax.set_xlabel("human-normalized score")
        fig.tight_layout()
        written.append(_save(fig, out.with_name(out.name + "-aggregates.png"), FigureCanvasAgg))

        fig = Figure(figsize=(5, 3.5))
        ax = fig.add_subplot(1, 1, 1)
        top = max(float(m.max()) for m in matrices.values())
        taus = np.linspace(0.0, max(2.0, top), 201)
        for group, m in matrices.items():
            ax.plot(taus, performance_profile(m, taus), label=group, color=colors[group])
        ax.set_xlabel("human-normalized score (tau)")
        ax.set_ylabel("fraction of runs with score > tau")
        ax.legend()
        fig.tight_layout()
        written.append(_save(fig, out.with_name(out.name + "-profiles.png"), FigureCanvasAgg))

    games = sorted({r.game for rs in groups.values() for r in rs})
    cols = min(4, len(games))
    rows = math.ceil(len(games) / cols)
    fig = Figure(figsize=(3.2 * cols, 2.4 * rows))
    for k, game in enumerate(games):
        ax = fig.add_subplot(rows, cols, k + 1)
        for group, results in groups.items():
            for i, r in enumerate(x for x in results if x.game == game):
                if len(r.returns):
                    window = np.ones(min(100, len(r.returns))) / min(100, len(r.returns))
                    smooth = np.convolve(r.returns, window, mode="valid")
                    ax.plot(r.frames[len(r.frames) - len(smooth) :], smooth, color=colors[group],
                            alpha=0.8, label=group if i == 0 else None)  # fmt: skip
        ax.set_title(game, fontsize=9)
        ax.set_xlabel("frames", fontsize=8)
        ax.tick_params(labelsize=7)
        if k == 0:
            ax.legend(fontsize=7)
    fig.tight_layout()
    written.append(_save(fig, out.with_name(out.name + "-curves.png"), FigureCanvasAgg))
    return written


def _save(fig, path: Path, canvas_cls) -> Path:
    canvas_cls(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    group_by: str = "algo",
    reps: int = 2000,
    seed: int = 0,
) -> dict:
    """Print and write the report; returns ``{"estimates": ..., "runs": [...]}``."""
    if not run_dirs:
        raise ReportError("no run folders given")
    results = [read_run(d, group_by) for d in run_dirs]
    out = Path(out)
    groups: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        groups[r.group].append(r)
    lines = ["group  game  runs  score mean +- std  human-normalized  (score from)"]
    for group, rs in groups.items():
        for game in sorted({r.game for r in rs}):
            scores = np.array([r.score for r in rs if r.game == game])
            norm = human_normalized(game, float(scores.mean()))
            sources = sorted({r.source for r in rs if r.game == game})
            hn = f"{norm:.3f}" if not math.isnan(norm) else "-"
            lines.append(f"{group}  {game}  {len(scores)}  {scores.mean():.2f} +- "
                         f"{scores.std():.2f}  {hn}  ({', '.join(sources)})")  # fmt: skip
    for r in results:
        for record in r.changes:
            lines.append(f"{r.run_dir}: resumed at {record['frames']} frames with "
                         f"{describe_record(record)}")  # fmt: skip
    estimates: dict[str, dict] = {}
    matrices: dict[str, np.ndarray] = {}
    for group, rs in groups.items():
        games = sorted({r.game for r in rs if r.game in RANDOM_HUMAN})
        if not games:
            lines.append(f"{group}: no Atari game with human reference scores; raw scores only")
            continue
        matrix = score_matrix(rs, games)
        counts = {g: sum(r.game == g for r in rs) for g in games}
        if len(set(counts.values())) > 1:
            lines.append(f"{group}: games have {sorted(set(counts.values()))} runs; the "
                         f"aggregates use the first {matrix.shape[0]} by seed of each")  # fmt: skip
        est = interval_estimates(matrix, reps=reps, seed=seed)
        estimates[group], matrices[group] = est, matrix
        parts = [f"{n.upper() if n == 'iqm' else n} {p:.3f} [{lo:.3f}, {hi:.3f}]"
                 for n, (p, lo, hi) in est.items()]  # fmt: skip
        lines.append(f"{group}: {len(games)} game(s) x {matrix.shape[0]} run(s), human-normalized "
                     f"{', '.join(parts)} (95% stratified bootstrap, {reps} reps)")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines)
    print(text)
    out.with_name(out.name + ".txt").write_text(text + "\n")
    with open(out.with_name(out.name + "-runs.csv"), "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["run_dir", "group", "game", "seed", "score", "human_normalized", "source"])
        for r in results:
            writer.writerow([r.run_dir, r.group, r.game, r.seed, r.score, r.normalized, r.source])
    for path in write_plots(dict(groups), estimates, matrices, out):
        print(f"wrote {path}")
    return {"estimates": estimates, "runs": results}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m accelrl.tools.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("run_dirs", nargs="+", help="run folders written by recipes")
    p.add_argument("-o", "--out", default="report", help="output prefix (default: report)")
    p.add_argument("--group-by", default="algo", help="config field that names a group")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    args = p.parse_args(argv)
    try:
        report(args.run_dirs, args.out, group_by=args.group_by, reps=args.reps, seed=args.seed)
    except ReportError as err:
        print(f"accelrl.tools.report: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
