"""A study's finished cells, kept small enough to carry or commit.

A study folder holds each cell's whole run folder: checkpoints, a DQN cell's replay (hundreds of
MB), TensorBoard files. What ``report`` reads of a finished cell is far less: its
``summary.json``, its episodes' frames and returns, and the frames and wall time of its metrics.
A *kept* folder holds only that, in the study folder's layout (``study.json``, then
``algorithm/setting/game/seedN/``), so it is itself a study folder that ``report`` reads:

    python -m accelrl.study run GRID --dir DIR --keep KEPT  # skips KEPT's cells, adds new ones
    python -m accelrl.study pack DIR -o KEPT                # adds DIR's finished cells
    python -m accelrl.study report KEPT

A study that runs over several machines or days (a cluster's scratch space wiped between jobs, a
laptop) continues from the kept folder alone: cells it holds count as finished, so the next
``run`` starts with the rest. Each kept cell is written file by file through a temporary name
and its ``summary.json`` last, so a cell is kept whole or not at all.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from pathlib import Path

from accelrl.study.grid import (
    RECORD_NAME,
    Cell,
    Grid,
    GridError,
    cell_folder,
    summary_frames,
    write_record,
)

METRICS_ROWS = 1000
"""At most about this many metrics.csv rows are kept per cell (evenly over its frames, and the
last): the wall-clock curves need no more."""


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _columns(path: Path, names: tuple[str, ...]) -> list[list[str]]:
    """``names`` columns of a CSV file, as the strings written (no float round trip)."""
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        rows = []
        for row in csv.DictReader(fh):
            values = [row.get(n) for n in names]
            if all(v not in (None, "") for v in values):
                rows.append(values)  # type: ignore[arg-type]
    return rows


def _csv_text(header: Iterable[str], rows: Iterable[list[str]]) -> str:
    return "\n".join(",".join(r) for r in [list(header), *rows]) + "\n"


def thin(rows: list[list[str]], budget: float, keep: int = METRICS_ROWS) -> list[list[str]]:
    """The first row at or past each ``budget / keep`` step of frames (column 0), and the last."""
    out, next_at = [], 0.0
    for i, row in enumerate(rows):
        frames = float(row[0])
        if frames >= next_at or i == len(rows) - 1:
            out.append(row)
            next_at = (frames // (budget / keep) + 1) * (budget / keep)
    return out


def pack_cell(run_dir: Path, dest: Path, budget: int) -> None:
    """Keep one finished cell of ``run_dir`` in ``dest``: episodes' frames and returns, metrics'
    frames and time (thinned), the greedy evaluations, then ``summary.json``."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "summary.json").unlink(missing_ok=True)  # not kept until every file is
    episodes = _columns(run_dir / "episodes.csv", ("frames", "return"))
    _write_atomic(dest / "episodes.csv", _csv_text(("frames", "return"), episodes))
    metrics = _columns(run_dir / "metrics.csv", ("frames", "time_s"))
    _write_atomic(dest / "metrics.csv", _csv_text(("frames", "time_s"), thin(metrics, budget)))
    if (run_dir / "eval.csv").is_file():
        _write_atomic(dest / "eval.csv", (run_dir / "eval.csv").read_text(encoding="utf-8"))
    _write_atomic(dest / "summary.json", (run_dir / "summary.json").read_text(encoding="utf-8"))


def check_kept_folder(kept: Path, study_dir: Path) -> None:
    """Refuse a kept folder that is the study folder itself or inside it."""
    kept, study_dir = kept.absolute(), study_dir.absolute()
    if kept == study_dir or study_dir in kept.parents:
        raise GridError(f"--keep {kept}: is inside the study folder {study_dir}; give a folder "
                        "of its own (e.g. docs/results/large-batches/cells/<study>)")  # fmt: skip


def kept_cells(kept: Path, record: dict) -> set[str]:
    """Names of the record's cells that ``kept`` holds finished (summary.json at the budget)."""
    names = set()
    for algo, spec in record["algorithms"].items():
        for setting in spec["settings"]:
            for game in spec["games"]:
                for seed in spec["seeds"]:
                    name = cell_folder(algo, setting, game, seed)
                    frames = summary_frames(kept / name)
                    if frames is not None and frames >= spec["frames"]:
                        names.add(name)
    return names


def pack_study(study_dir: Path, kept: Path, record: dict | None = None) -> list[str]:
    """Keep every finished cell of ``study_dir`` not yet in ``kept`` (the record: ``study_dir``'s
    own, unless given); returns the cells added."""
    check_kept_folder(kept, study_dir)
    if record is None:
        try:
            record = json.loads((study_dir / RECORD_NAME).read_text())
        except (OSError, ValueError):
            raise GridError(f"{study_dir} has no readable {RECORD_NAME}: not a study folder "
                            "(python -m accelrl.study run GRID writes it)") from None  # fmt: skip
    write_record(kept, record)
    done = kept_cells(kept, record)
    added = []
    for name in sorted(kept_cells(study_dir, record) - done):
        algo = name.split("/", 1)[0]
        pack_cell(study_dir / name, kept / name, record["algorithms"][algo]["frames"])
        added.append(name)
    return added


def keep_grid_cell(grid: Grid, kept: Path, cell: Cell) -> bool:
    """Keep the grid's ``cell`` when its run finished its budget; True when kept."""
    frames = summary_frames(cell.run_dir)
    if frames is None or frames < cell.algorithm.frames:
        return False
    write_record(kept, grid.record())
    pack_cell(cell.run_dir, kept / cell.name, cell.algorithm.frames)
    return True
