"""Where a grid stands, while it runs or after a stop: each cell's state, the frames it has
reached of its budget and the mean return of its last 100 episodes, and a count per setting.

    python -m accelrl.study status GRID [--dir DIR] [--keep KEPT] [--only PATTERN]

It reads the run folders only (summary.json, the newest checkpoint's frame count, the tails of
metrics.csv and episodes.csv), so it is quick and safe beside running cells, here or on a
cluster's shared file system.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accelrl.run.checkpoint import list_checkpoints
from accelrl.study import keep
from accelrl.study.grid import (
    FINISHED,
    KEPT,
    RESUME,
    RUNNING,
    Cell,
    Grid,
    cell_state,
    summary_frames,
)

TAIL_BYTES = 64 * 1024
"""Bytes read from a CSV's end: a few thousand rows of episodes.csv, far more than 100."""


@dataclass
class CellStatus:
    cell: Cell
    state: str
    """``grid.cell_state``, or ``kept`` for a cell the kept folder holds finished."""
    frames: int | None
    """Frames reached: the summary's, a running cell's last logged batch, a stopped cell's
    newest checkpoint (where it resumes); None when nothing was written yet."""
    last100: float | None
    """Mean return of the last 100 finished episodes (of those up to ``frames``)."""


def csv_tail(
    path: Path, columns: Sequence[str], rows: int, tail_bytes: int | None = TAIL_BYTES
) -> list[list[float]]:
    """The last ``rows`` complete rows of ``path``'s ``columns``, read from its last
    ``tail_bytes`` (None: all of it); a row being written is left out. [] when the file or a
    column is missing."""
    try:
        with open(path, "rb") as f:
            header = f.readline().decode().strip().split(",")
            start = f.tell()
            size = f.seek(0, 2)
            skip = 0 if tail_bytes is None else max(0, size - tail_bytes - start)
            f.seek(start + skip)
            tail = f.read().decode(errors="replace")
    except OSError:
        return []
    if any(c not in header for c in columns):
        return []
    index = [header.index(c) for c in columns]
    lines = tail.split("\n")
    if skip:
        lines = lines[1:]  # the first line read may be a row's end
    out = []
    for line in lines[:-1]:  # the last piece has no newline yet: a row being written, or ""
        fields = line.split(",")
        try:
            out.append([float(fields[i]) for i in index])
        except (IndexError, ValueError):
            continue
    return out[-rows:]


def cell_status(cell: Cell, kept: Path | None, kept_names: set[str]) -> CellStatus:
    state = cell_state(cell)
    folder = cell.run_dir
    if state != FINISHED and cell.name in kept_names:
        state, folder = KEPT, kept / cell.name  # type: ignore[operator]
    frames: int | None = None
    if state in (FINISHED, KEPT):
        frames = summary_frames(folder)
    elif state == RESUME:  # ckpt_<frames>.pt
        frames = int(list_checkpoints(folder)[-1].stem.removeprefix("ckpt_"))
    elif state == RUNNING:
        last = csv_tail(folder / "metrics.csv", ["frames"], 1)
        frames = int(last[-1][0]) if last else None
    episodes = csv_tail(folder / "episodes.csv", ["frames", "return"], 100_000,
                        None if state == RESUME else TAIL_BYTES)  # fmt: skip
    if state == RESUME:  # its episodes after the checkpoint are dropped when it resumes
        episodes = [e for e in episodes if e[0] <= frames]
    returns = [e[1] for e in episodes[-100:]]
    return CellStatus(cell, state, frames, sum(returns) / len(returns) if returns else None)


def grid_status(grid: Grid, only: Sequence[str] = (), kept: Path | None = None) -> list[CellStatus]:
    """Every cell of ``grid`` (those matching an ``only`` pattern, when given) and where it is."""
    cells = grid.selected(only)
    kept_names = keep.kept_cells(kept, grid.record()) if kept is not None else set()
    return [cell_status(c, kept, kept_names) for c in cells]


def _number(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def status_text(statuses: Sequence[CellStatus]) -> str:
    """One line per cell (state, name, frames of the budget, last-100 return), then one per
    setting counting its cells by state."""
    width = max(len(s.cell.name) for s in statuses)
    lines = []
    for s in statuses:
        budget = s.cell.algorithm.frames
        reached = ""
        if s.frames is not None:
            reached = f"{s.frames:>12,} of {budget:,} ({s.frames / budget:4.0%})"
        score = "" if s.frames is None and s.last100 is None else f"last-100 {_number(s.last100)}"
        lines.append(f"{s.state:8s} {s.cell.name:{width}s} {reached:32s} {score}".rstrip())
    lines.append("")
    settings: dict[str, list[CellStatus]] = {}
    for s in statuses:
        settings.setdefault(f"{s.cell.algorithm.name}/{s.cell.setting}", []).append(s)
    for name, group in settings.items():
        counts: dict[str, int] = {}
        for s in group:
            state = FINISHED if s.state == KEPT else s.state
            counts[state] = counts.get(state, 0) + 1
        order = [FINISHED, RUNNING, RESUME, "new"]
        parts = [f"{counts[k]} {'to resume' if k == RESUME else k}" for k in order if k in counts]
        lines.append(f"{name}: {len(group)} cells: " + ", ".join(parts))
    return "\n".join(lines)
