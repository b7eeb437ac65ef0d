"""The report of a study folder: learning curves per setting and each setting's score at fixed
fractions of the frame budget, relative to the algorithm's standard setting.

A cell's score at a point (emulator frames) is the mean return of its training episodes that
ended in the window of ``window`` x budget frames up to the point (the last episode before the
point when none ended in it), from episodes.csv. A setting's score is the mean over seeds; its
relative score the ratio of its mean to the standard setting's, per game, and over games the
mean of the per-game ratios. Intervals are 95% stratified-bootstrap percentile intervals over
seeds (``accelrl.tools.report.bootstrap_interval``: seeds resampled within each setting and game). A
point enters the table for the seeds whose runs of both settings have logged past it.

``against`` (``report --against ALGO``) adds the race against one algorithm of the grid, the
yardstick: per game and seed, the yardstick's final score (the mean return of its last 100
training episodes), the minutes each setting of the other algorithms took to first reach it
(the mean of its last 100 episodes at or above it) over the minutes the yardstick took, and
both scores at equal wall time (when the shorter run ended). Ratios are summarised by their
median over seeds (a seed that never reached the score counts as an infinite ratio), with a
95% bootstrap interval.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accelrl.run.record import code_version
from accelrl.study.grid import RECORD_NAME, cell_folder
from accelrl.tools.plot import wall_minutes
from accelrl.tools.report import bootstrap_interval, csv_rows, stratified_bootstrap


class StudyReportError(ValueError):
    """A study folder that cannot be reported; the message is one line."""


@dataclass
class CellRun:
    """What one cell's run folder holds so far."""

    algorithm: str
    setting: str
    game: str
    seed: int
    frames: np.ndarray
    """Emulator frames at the end of each training episode."""
    returns: np.ndarray
    minutes: np.ndarray | None
    """Wall-clock minutes of the run at the end of each episode."""
    reached: float
    """Frames the run has logged (its latest metrics.csv row)."""


def read_record(study_dir: Path) -> dict:
    path = study_dir / RECORD_NAME
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise StudyReportError(f"{study_dir} has no {RECORD_NAME}: not a study folder (python "
                               "-m accelrl.study run GRID writes it)") from None  # fmt: skip
    except (OSError, ValueError) as err:
        raise StudyReportError(f"{path} cannot be read ({err})") from None


def read_cells(study_dir: Path, record: dict) -> tuple[list[CellRun], list[str]]:
    """The runs of the record's cells that have logged anything, and the names of the others."""
    runs, missing = [], []
    for algo, spec in record["algorithms"].items():
        for setting in spec["settings"]:
            for game in spec["games"]:
                for seed in spec["seeds"]:
                    name = cell_folder(algo, setting, game, seed)
                    run_dir = study_dir / name
                    metrics = csv_rows(run_dir / "metrics.csv", "frames")
                    episodes = csv_rows(run_dir / "episodes.csv", "frames", "return")
                    if not metrics or not episodes:
                        missing.append(name)
                        continue
                    frames = np.array([r["frames"] for r in episodes])
                    runs.append(CellRun(algo, setting, game, seed, frames,
                                        np.array([r["return"] for r in episodes]),
                                        wall_minutes(run_dir, frames),
                                        max(r["frames"] for r in metrics)))  # fmt: skip
    return runs, missing


def window_score(x: np.ndarray, returns: np.ndarray, point: float, width: float) -> float:
    """Mean of ``returns`` whose ``x`` lies in ``(point - width, point]``; the last one at or
    before ``point`` when none does; NaN when none ends by ``point``."""
    inside = (x > point - width) & (x <= point)
    if inside.any():
        return float(returns[inside].mean())
    before = np.flatnonzero(x <= point)
    return float(returns[before[-1]]) if len(before) else math.nan


def _ratio(m: np.ndarray) -> float:
    """Mean of the first half of the columns over the mean of the second half, column by column
    (one game each), averaged over games; NaN where a standard mean is not positive."""
    games = m.shape[1] // 2
    setting, standard = m[:, :games].mean(axis=0), m[:, games:].mean(axis=0)
    if (standard <= 0).any():
        return math.nan
    return float((setting / standard).mean())


def _mean(m: np.ndarray) -> float:
    return float(m.mean())


@dataclass
class Row:
    algorithm: str
    setting: str
    standard: str
    fraction: float
    frames: int
    game: str
    """A game, or ``all`` for the mean over games."""
    seeds: int
    of_seeds: int
    score: tuple[float, float, float]
    relative: tuple[float, float, float]


def score_table(
    runs: Sequence[CellRun],
    record: dict,
    fractions: Sequence[float],
    window: float,
    reps: int,
    seed: int = 0,
) -> list[Row]:
    """One row per algorithm x budget fraction x game (then all games, when there are
    several) x setting."""
    rng = np.random.default_rng(seed)
    found = {(r.algorithm, r.setting, r.game, r.seed): r for r in runs}
    rows = []
    for algo, spec in record["algorithms"].items():
        budget, standard = spec["frames"], spec["standard"]
        for setting in spec["settings"]:
            for fraction in fractions:
                point, width = fraction * budget, window * budget
                scores: dict[str, dict[int, tuple[float, float]]] = {}
                for game in spec["games"]:
                    pairs = {}
                    for s in spec["seeds"]:
                        mine, theirs = (
                            found.get((algo, setting, game, s)),
                            found.get((algo, standard, game, s)),
                        )
                        if mine and theirs and min(mine.reached, theirs.reached) >= point:
                            pairs[s] = (
                                window_score(mine.frames, mine.returns, point, width),
                                window_score(theirs.frames, theirs.returns, point, width),
                            )
                    scores[game] = pairs
                    rows.append(_row(algo, setting, standard, fraction, point, game,
                                     [pairs], len(spec["seeds"]), reps, rng))  # fmt: skip
                if len(scores) > 1:
                    common = set.intersection(*(set(p) for p in scores.values()))
                    kept = [{s: p[s] for s in sorted(common)} for p in scores.values()]
                    rows.append(_row(algo, setting, standard, fraction, point, "all", kept,
                                     len(spec["seeds"]), reps, rng))  # fmt: skip
    # Settings side by side at each point and game.
    order = {
        (a, s): (i, j)
        for i, (a, spec) in enumerate(record["algorithms"].items())
        for j, s in enumerate(spec["settings"])
    }
    games = {g: k for spec in record["algorithms"].values() for k, g in enumerate(spec["games"])}
    return sorted(
        rows,
        key=lambda r: (order[r.algorithm, r.setting][0], r.fraction,
                       games.get(r.game, len(games)), order[r.algorithm, r.setting][1]),
    )  # fmt: skip


def _row(algo, setting, standard, fraction, point, game, per_game, of_seeds, reps, rng) -> Row:
    """A table row from ``per_game``: for each game, {seed: (score, standard's score)}."""
    n = min(len(p) for p in per_game)
    nan3 = (math.nan, math.nan, math.nan)
    if n == 0:
        return Row(algo, setting, standard, fraction, int(point), game, 0, of_seeds, nan3, nan3)
    mine = np.array([[v[0] for v in p.values()] for p in per_game]).T  # [seeds, games]
    theirs = np.array([[v[1] for v in p.values()] for p in per_game]).T
    score = bootstrap_interval(mine, _mean, reps, rng)
    if setting == standard:
        relative = (1.0, 1.0, 1.0)
    else:
        relative = bootstrap_interval(np.concatenate([mine, theirs], axis=1), _ratio, reps, rng)
    return Row(algo, setting, standard, fraction, int(point), game, n, of_seeds, score, relative)


# ---------------------------------------------------------------------------------------------
# the race against a yardstick algorithm

LAST = 100  # episodes in a run's running score (the mean return of its last LAST episodes)


def running_score(returns: np.ndarray, last: int = LAST) -> np.ndarray:
    """The mean return of the last ``last`` episodes (fewer at the start) at each episode."""
    n = len(returns)
    total = np.cumsum(returns, dtype=np.float64)
    dropped = np.concatenate([np.zeros(last), total[: n - last]]) if n > last else np.zeros(n)
    return (total - dropped) / np.minimum(np.arange(1, n + 1), last)


def first_minutes(run: CellRun, target: float) -> float:
    """Wall-clock minutes at which ``run``'s running score first reached ``target`` (inf:
    never)."""
    hit = np.flatnonzero(running_score(run.returns) >= target)
    return float(run.minutes[hit[0]]) if len(hit) else math.inf


def score_at_minutes(run: CellRun, minutes: float) -> float:
    """``run``'s running score at its last episode ended by ``minutes`` (NaN: none yet)."""
    before = np.flatnonzero(run.minutes <= minutes)
    return float(running_score(run.returns)[before[-1]]) if len(before) else math.nan


@dataclass
class Race:
    """One setting of one algorithm against the yardstick on one game (or ``all``)."""

    algorithm: str
    setting: str
    game: str
    """A game, or ``all``: the seeds that finished every game, all games together."""
    counts: tuple[int, int, int]
    """Seeds: whose runs of the setting and the yardstick both finished; of the grid, both
    have; on which the setting reached the yardstick's final score."""
    final: tuple[float, float, float]
    """The setting's final score (mean over seeds, interval)."""
    yardstick_final: tuple[float, float, float]
    equal_minutes: float
    """Mean over seeds of the shorter run's minutes, where both scores below are taken."""
    at_equal: tuple[float, float]
    """(the setting's, the yardstick's) running score at the shorter run's end, means."""
    minutes: tuple[float, float]
    """(the setting's, the yardstick's) minutes to the yardstick's final score, medians."""
    ratio: tuple[float, float, float]
    """The setting's minutes over the yardstick's: median over seeds, interval."""

    @property
    def seeds(self) -> int:
        return self.counts[0]

    @property
    def of_seeds(self) -> int:
        return self.counts[1]

    @property
    def reached(self) -> int:
        return self.counts[2]


def _median_interval(
    m: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """The median of ``m`` (seeds x games, inf allowed) and its stratified-bootstrap 95%
    percentile interval (a median at or next to an infinite value is infinite)."""
    huge = 1e300

    def stat(x: np.ndarray) -> float:
        med = float(np.median(np.where(np.isinf(x), huge, x)))
        return math.inf if med >= huge / 4 else med

    boot = stratified_bootstrap(m, stat, reps, rng)
    low, high = np.percentile(np.where(np.isinf(boot), huge, boot), [2.5, 97.5])
    return stat(m), *(math.inf if v >= huge / 4 else float(v) for v in (low, high))


def race_table(
    runs: Sequence[CellRun], record: dict, yardstick: str, reps: int, seed: int = 0
) -> list[Race]:
    """One row per algorithm (other than ``yardstick``) x setting x game, then ``all`` games
    when there are several: its finished runs against the yardstick's standard setting's
    finished runs of the same game and seed."""
    algorithms = record["algorithms"]
    if yardstick not in algorithms:
        raise StudyReportError(f"--against {yardstick}: the study has "
                               f"{', '.join(algorithms)}")  # fmt: skip
    yard = algorithms[yardstick]
    rng = np.random.default_rng(seed)
    done = {
        (r.algorithm, r.setting, r.game, r.seed): r
        for r in runs
        if r.minutes is not None and r.reached >= algorithms[r.algorithm]["frames"]
    }
    rows = []
    for algo, spec in algorithms.items():
        if algo == yardstick:
            continue
        for setting in spec["settings"]:
            per_game: dict[str, list[dict[str, float]]] = {}
            for game in (g for g in spec["games"] if g in yard["games"]):
                seeds = [s for s in spec["seeds"] if s in yard["seeds"]]
                cells = []
                for s in seeds:
                    mine = done.get((algo, setting, game, s))
                    theirs = done.get((yardstick, yard["standard"], game, s))
                    if mine is None or theirs is None:
                        continue
                    target = float(running_score(theirs.returns)[-1])
                    end = min(float(mine.minutes[-1]), float(theirs.minutes[-1]))
                    cells.append({
                        "seed": s,
                        "final": float(running_score(mine.returns)[-1]),
                        "yardstick_final": target,
                        "equal_minutes": end,
                        "mine_at_equal": score_at_minutes(mine, end),
                        "theirs_at_equal": score_at_minutes(theirs, end),
                        "mine_minutes": first_minutes(mine, target),
                        "theirs_minutes": first_minutes(theirs, target),
                    })  # fmt: skip
                per_game[game] = cells
                rows.append(_race(algo, setting, game, [cells], len(seeds), reps, rng))
            if len(per_game) > 1:
                common = set.intersection(*({c["seed"] for c in v} for v in per_game.values()))
                kept = [[c for c in v if c["seed"] in common] for v in per_game.values()]
                of = len([s for s in spec["seeds"] if s in yard["seeds"]])
                rows.append(_race(algo, setting, "all", kept, of, reps, rng))
    return rows


def _race(algo, setting, game, per_game, of_seeds, reps, rng) -> Race:
    """A race row from ``per_game``: for each game, its seeds' cells (dicts)."""
    n = min(len(cells) for cells in per_game)
    nan2, nan3 = (math.nan, math.nan), (math.nan, math.nan, math.nan)
    if n == 0:
        return Race(algo, setting, game, (0, of_seeds, 0), nan3, nan3, math.nan, nan2, nan2, nan3)

    def matrix(key: str) -> np.ndarray:  # [seeds, games]
        return np.array([[c[key] for c in cells] for cells in per_game]).T

    mine, theirs = matrix("mine_minutes"), matrix("theirs_minutes")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isinf(mine), math.inf, mine / theirs)
    return Race(
        algo, setting, game, (n, of_seeds, int(np.isfinite(mine).sum())),
        final=bootstrap_interval(matrix("final"), _mean, reps, rng),
        yardstick_final=bootstrap_interval(matrix("yardstick_final"), _mean, reps, rng),
        equal_minutes=float(matrix("equal_minutes").mean()),
        at_equal=(float(matrix("mine_at_equal").mean()), float(matrix("theirs_at_equal").mean())),
        minutes=(float(np.median(mine)), float(np.median(theirs))),
        ratio=_median_interval(ratio, reps, rng),
    )  # fmt: skip


def race_markdown(races: Sequence[Race], yardstick: str, standard: str, reps: int) -> list[str]:
    lines = [
        "",
        f"## Against {yardstick} (`{standard}`): time to its final score",
        "",
        f"- Target, per game and seed: {yardstick}'s final score, the mean return of its last "
        f"{LAST} training episodes. Minutes: the first time a run's mean of its last {LAST} "
        "episodes reached it (both sides timed the same way, medians over seeds).",
        f"- Ratio: the setting's minutes over {yardstick}'s, the median over seeds (a seed that "
        f"never reached the target counts as infinite) with a 95% bootstrap interval ({reps} "
        "resamples, within each game).",
        "- At equal wall time: both runs' mean of the last 100 episodes when the shorter run "
        "ended (minutes: the mean over seeds of that end).",
        "- Only finished runs of both sides, on the same seeds, enter.",
        "",
        f"| algorithm / setting | game | seeds | reached | final [95% CI] | {yardstick} final "
        f"[95% CI] | at equal wall time: setting / {yardstick} (min) | minutes to target: "
        f"setting / {yardstick} | ratio [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in races:
        name = f"{r.algorithm} / {r.setting}"
        if r.seeds == 0:
            lines.append(f"| {name} | {r.game} | 0/{r.of_seeds} | | pending | | | | |")
            continue
        lines.append(
            f"| {name} | {r.game} | {r.seeds}/{r.of_seeds} | {r.reached}/{r.seeds} | "
            f"{_interval(r.final)} | {_interval(r.yardstick_final)} | {r.at_equal[0]:.3g} / "
            f"{r.at_equal[1]:.3g} ({r.equal_minutes:.3g}) | {_minutes(r.minutes[0])} / "
            f"{_minutes(r.minutes[1])} | {_interval(r.ratio)} |"
        )
    return lines


def _minutes(value: float) -> str:
    return "never" if math.isinf(value) else f"{value:.3g}"


# ---------------------------------------------------------------------------------------------
# figures


def _curves(
    runs: Sequence[CellRun], use_time: bool, points: int, window: float
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Grid points and, per setting, ``[seeds, points]`` windowed scores (NaN past a run's
    end); x is frames, or wall-clock minutes with ``use_time``."""
    xs = {id(r): (r.minutes if use_time else r.frames) for r in runs}
    if use_time:
        ends = {id(r): float(r.minutes[-1]) if r.minutes is not None else 0.0 for r in runs}
    else:
        ends = {id(r): r.reached for r in runs}
    top = max(ends.values(), default=0.0)
    grid = np.linspace(top / points, top, points)
    out: dict[str, list[np.ndarray]] = {}
    for r in runs:
        x = xs[id(r)]
        if x is None:
            continue
        values = [window_score(x, r.returns, p, window * top) if p <= ends[id(r)] else math.nan
                  for p in grid]  # fmt: skip
        out.setdefault(r.setting, []).append(np.array(values))
    return grid, {k: np.array(v) for k, v in out.items()}


def write_figure(
    runs: Sequence[CellRun], algo: str, game: str, settings: Sequence[str], path: Path,
    window: float, points: int = 60,
) -> Path:  # fmt: skip
    """Return vs frames and vs wall-clock minutes, one curve per setting: the mean over seeds
    with a band from the lowest to the highest seed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    fig = Figure(figsize=(11, 4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, use_time in zip(axes, (False, True), strict=True):
        grid, curves = _curves(runs, use_time, points, window)
        for i, setting in enumerate(settings):
            if setting not in curves:
                continue
            values = curves[setting]
            seen = ~np.isnan(values)
            shown = seen.any(axis=0)
            with np.errstate(all="ignore"):
                mean = np.nanmean(values[:, shown], axis=0)
                low = np.nanmin(values[:, shown], axis=0)
                high = np.nanmax(values[:, shown], axis=0)
            x = grid[shown]
            ax.plot(x, mean, color=f"C{i}", lw=1.6, label=f"{setting} (n={len(values)})")
            ax.fill_between(x, low, high, color=f"C{i}", alpha=0.2, lw=0)
        ax.grid(alpha=0.3)
        if use_time:
            ax.set_xlabel("wall-clock minutes")
        else:
            ax.set_xlabel("emulator frames")
            ax.xaxis.set_major_formatter(EngFormatter())
            ax.set_ylabel(f"episode return (mean over a {window:.0%} window)")
            ax.legend(fontsize="small")
    fig.suptitle(f"{algo} on {game}: mean over seeds, band from the lowest to the highest seed",
                 fontsize="medium")  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


# ---------------------------------------------------------------------------------------------
# the report


def _interval(v: tuple[float, float, float], digits: int = 3) -> str:
    point, low, high = v
    if math.isnan(point):
        return "n/a"
    if math.isnan(low):
        return f"{point:.{digits}g}"
    return f"{point:.{digits}g} [{low:.{digits}g}, {high:.{digits}g}]"


def markdown(rows: Sequence[Row], record: dict, study_dir: Path, window: float, reps: int,
             missing: Sequence[str], figures: Sequence[Path]) -> str:  # fmt: skip
    commit = code_version()["commit"] or "unknown"
    lines = [
        f"# Study report: {record.get('grid', study_dir)}",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M %Z')} from `{study_dir}` (accelrl commit "
        f"{commit}) by `python -m accelrl.study report`.",
        "",
        f"- Score at a point: the mean return of the training episodes that ended in the "
        f"{window:.0%} of the budget up to it (episodes.csv), then the mean over seeds.",
        "- Relative: a setting's mean score over the standard setting's at the same frames, per "
        "game; `all`: the mean of the per-game ratios.",
        f"- [low, high]: 95% stratified-bootstrap percentile interval over seeds ({reps} "
        "resamples; seeds resampled within each setting and game).",
        "- Seeds: those whose runs of both the setting and the standard reached the point.",
        "- Wall-clock curves: the time each run logged, with the study's cells sharing the "
        "machine's cores; compare them between settings run under the same load.",
    ]
    for algo, spec in record["algorithms"].items():
        lines += ["", f"## {algo}: budget {spec['frames']:,} frames, standard "
                      f"`{spec['standard']}`", ""]  # fmt: skip
        for setting, flags in spec["settings"].items():
            lines.append(f"- `{setting}`: `{' '.join(flags) or '(algorithm flags only)'}`")
        lines += ["", f"| setting | frames | game | seeds | score [95% CI] | relative to "
                      f"{spec['standard']} [95% CI] |", "|---|---|---|---|---|---|"]  # fmt: skip
        for r in (r for r in rows if r.algorithm == algo):
            rel = "1 (standard)" if r.setting == r.standard else _interval(r.relative)
            if r.seeds == 0:
                score = rel = "pending"
            else:
                score = _interval(r.score)
            lines.append(f"| {r.setting} | {r.frames:,} ({r.fraction:.0%}) | {r.game} | "
                         f"{r.seeds}/{r.of_seeds} | {score} | {rel} |")  # fmt: skip
    if figures:
        lines += ["", "## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figures]
    if missing:
        lines += ["", f"## Cells without data yet ({len(missing)})", ""]
        lines += [f"- {name}" for name in missing]
    return "\n".join(lines) + "\n"


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["algorithm", "setting", "standard", "budget_fraction", "frames", "game",
                    "seeds", "of_seeds", "score", "score_low", "score_high", "relative",
                    "relative_low", "relative_high"])  # fmt: skip
        for r in rows:
            w.writerow([r.algorithm, r.setting, r.standard, r.fraction, r.frames, r.game,
                        r.seeds, r.of_seeds, *r.score, *r.relative])  # fmt: skip


def write_race_csv(races: Sequence[Race], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["algorithm", "setting", "game", "seeds", "of_seeds", "reached", "final",
                    "final_low", "final_high", "yardstick_final", "yardstick_final_low",
                    "yardstick_final_high", "equal_minutes", "at_equal", "yardstick_at_equal",
                    "minutes", "yardstick_minutes", "ratio", "ratio_low",
                    "ratio_high"])  # fmt: skip
        for r in races:
            w.writerow([r.algorithm, r.setting, r.game, r.seeds, r.of_seeds, r.reached,
                        *r.final, *r.yardstick_final, r.equal_minutes, *r.at_equal,
                        *r.minutes, *r.ratio])  # fmt: skip


def report(
    study_dir: str | Path,
    out: str | Path | None = None,
    *,
    fractions: Sequence[float] = (0.25, 0.5, 1.0),
    window: float = 0.05,
    reps: int = 2000,
    algorithms: Sequence[str] | None = None,
    against: str | None = None,
    say: Callable[[str], None] = print,
) -> list[Row]:
    """Write ``report.md``, ``scores.csv`` and ``<algorithm>-<game>.png`` to ``out`` (default
    STUDY_DIR/report) for the grid's ``algorithms`` (None: all), with ``against`` the race
    against that algorithm (``race_table``; races.csv too); returns the table's rows."""
    study_dir = Path(study_dir)
    if not all(0 < f <= 1 for f in fractions):
        raise StudyReportError(f"--fractions {list(fractions)}: each must be in (0, 1]")
    if not 0 < window <= 1:
        raise StudyReportError(f"--window {window}: a fraction of the budget in (0, 1]")
    record = read_record(study_dir)
    if against is not None and against not in record["algorithms"]:
        raise StudyReportError(f"--against {against}: the study has "
                               f"{', '.join(record['algorithms'])}")  # fmt: skip
    if algorithms is not None:
        unknown = [a for a in algorithms if a not in record["algorithms"]]
        if unknown or not algorithms:
            raise StudyReportError(f"--algorithms {','.join(algorithms)}: the study has "
                                   f"{', '.join(record['algorithms'])}")  # fmt: skip
        if against is not None and against not in algorithms:
            algorithms = [*algorithms, against]
        record = {**record, "algorithms": {a: record["algorithms"][a] for a in algorithms}}
    out = Path(out) if out is not None else study_dir / "report"
    runs, missing = read_cells(study_dir, record)
    rows = score_table(runs, record, fractions, window, reps)
    figures = []
    for algo, spec in record["algorithms"].items():
        for game in spec["games"]:
            mine = [r for r in runs if r.algorithm == algo and r.game == game]
            if mine:
                path = out / f"{algo}-{game.replace('/', '_')}.png"
                figures.append(write_figure(mine, algo, game, list(spec["settings"]), path,
                                            window))  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, record, study_dir, window, reps, missing, figures)
    if against is not None:
        races = race_table(runs, record, against, reps)
        standard = record["algorithms"][against]["standard"]
        race_lines = race_markdown(races, against, standard, reps)
        cut = text.find("\n## Figures")
        cut = len(text) - 1 if cut < 0 else cut
        text = text[:cut] + "\n".join(race_lines) + "\n" + text[cut:]
        write_race_csv(races, out / "races.csv")
    (out / "report.md").write_text(text)
    write_csv(rows, out / "scores.csv")
    say(text)
    say(f"wrote {out / 'report.md'}, {out / 'scores.csv'} and {len(figures)} figure(s)")
    return rows
