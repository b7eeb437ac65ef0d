"""Where ``accelrl.run.logger.RunLogger`` writes: a run's CSV files, TensorBoard events and
trackers.

The CSV files are append-only with their columns fixed by the header; every row is flushed when
written, and on (re)opening the rows past a frame count are dropped and lines that are not rows
(one cut mid-line by a kill) are set aside in ``<name>.damaged``. TensorBoard hides the events
past that frame count through ``purge_step``.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import numbers
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch

METRIC_BASE = ("frames", "time_s", "episodes", "return_mean100")
EVAL_BASE = ("frames", "time_s")
EPISODE_COLUMNS = ("frames", "return", "length")

log = logging.getLogger("accelrl")


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{float(value):.7g}"


def _to_float(value: Any) -> float:
    return value.item() if isinstance(value, torch.Tensor) else float(value)


class CsvFile:
    """An append-only csv file whose column set is fixed by its header."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] | None = None
        self._fh: TextIO | None = None
        self._writer: Any = None

    def open(self, cut: int) -> None:
        """Reopen for appending after dropping rows with frames > ``cut``. Lines that are not
        rows of the header's columns (the last one cut mid-line by a kill, a hand edit) are
        moved to ``<name>.damaged`` with a warning."""
        self.close()
        self.columns = None
        text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        if text:
            # Rows are flushed whole, so a kill can only cut the last line: it lacks its newline.
            lines = text.split("\n")
            torn = lines.pop()
            rows = list(csv.reader(lines))
            header = rows[0] if rows else None
            whole = [header is not None and self._whole(r, len(header)) for r in rows]
            damaged = [line for line, ok in zip(lines[1:], whole[1:], strict=True) if not ok]
            kept = [
                r for r, ok in zip(rows[1:], whole[1:], strict=True) if ok and float(r[0]) <= cut
            ]
            damaged = [line for line in [*damaged, torn] if line.strip()]
            if damaged:
                self._set_aside(damaged)
            if len(kept) != len(rows) - 1 or torn:
                self._rewrite([header, *kept] if header else [])
            self.columns = header
        self._fh = open(self.path, "a", newline="", encoding="utf-8")
        self._writer = csv.writer(self._fh, lineterminator="\n")

    @staticmethod
    def _whole(row: list[str], ncols: int) -> bool:
        if len(row) != ncols:
            return False
        try:
            float(row[0])
        except ValueError:
            return False
        return True

    def _set_aside(self, lines: list[str]) -> None:
        side = self.path.with_name(self.path.name + ".damaged")
        with open(side, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
        log.warning(
            "%s: %d line(s) cut mid-line or not matching its header moved to %s; the rows "
            "before and after them are kept",
            self.path,
            len(lines),
            side.name,
        )

    def _rewrite(self, rows: list[list[str]]) -> None:
        # Replace atomically so a kill during resume cannot lose the rows being kept.
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            fh.write(buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def write(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
        """Append ``rows``; ``columns`` become the header if the file has none yet."""
        assert self._writer is not None and self._fh is not None
        if self.columns is None:
            self.columns = list(columns)
            self._writer.writerow(self.columns)
        for row in rows:
            self._writer.writerow([_fmt(row.get(c)) for c in self.columns])
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = self._writer = None


class LogSinks:
    """``metrics.csv``, ``episodes.csv``, ``eval.csv``, TensorBoard under ``tb/`` and the
    trackers of one run folder, opened together on first use."""

    def __init__(
        self,
        run_dir: Path,
        *,
        tensorboard: bool,
        trackers: tuple[str, ...],
        project: str,
        config: dict,
    ) -> None:
        self.run_dir = run_dir
        self._use_tb = tensorboard
        self._opened = False
        self._warned: set[str] = set()
        self.metrics = CsvFile(run_dir / "metrics.csv")
        self.episodes = CsvFile(run_dir / "episodes.csv")
        self.evals = CsvFile(run_dir / "eval.csv")
        self._tb: Any = None
        self._tracker_names, self._project, self._config = tuple(trackers), project, config
        self._trackers: Any = None

    def open(self, cut: int) -> None:
        """Open the files and writers unless open: CSV rows and TensorBoard events past ``cut``
        frames (logged after the checkpoint by a killed run) are dropped or hidden."""
        if self._opened:
            return
        for f in (self.metrics, self.episodes, self.evals):
            f.open(cut)
        if self._use_tb:
            from torch.utils.tensorboard import SummaryWriter

            # Hides events logged after the checkpoint by the killed run.
            self._tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=cut + 1)
        if self._tracker_names:
            from accelrl.run.trackers import Trackers

            self._trackers = Trackers(
                self.run_dir, self._tracker_names, self._project, self._config
            )
        self._opened = True

    def close(self) -> None:
        for f in (self.metrics, self.episodes, self.evals):
            f.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._trackers is not None:
            self._trackers.close()
            self._trackers = None
        self._opened = False

    def write_episodes(self, frames: int, returns: list[float], lengths: list[int]) -> None:
        rows = [
            {"frames": frames, "return": r, "length": n}
            for r, n in zip(returns, lengths, strict=True)
        ]
        self.episodes.write(rows, EPISODE_COLUMNS)
        if self._tb is not None:
            for r, n in zip(returns, lengths, strict=True):
                self._tb.add_scalar("episode/return", r, frames)
                self._tb.add_scalar("episode/length", n, frames)

    def write_metrics(
        self, frames: int, row: Mapping[str, Any], values: Mapping[str, Any], mean: float
    ) -> None:
        """``row`` (the base columns and ``values``) to metrics.csv; ``values`` and the mean
        return (unless nan) to TensorBoard and the trackers."""
        self._warn_unknown(self.metrics, values)
        self.metrics.write([row], [*METRIC_BASE, *sorted(values)])
        if self._tb is not None:
            for key, value in values.items():
                self._tb.add_scalar(key, _to_float(value), frames)
            if not math.isnan(mean):
                self._tb.add_scalar("episode/return_mean100", mean, frames)
        if self._trackers is not None:
            scalars = {k: _to_float(v) for k, v in values.items()}
            if not math.isnan(mean):
                scalars["episode/return_mean100"] = mean
            self._trackers.log(scalars, frames)

    def write_eval(self, frames: int, row: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
        self._warn_unknown(self.evals, metrics)
        self.evals.write([row], [*EVAL_BASE, *sorted(metrics)])
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, _to_float(value), frames)
        if self._trackers is not None:
            self._trackers.log({k: _to_float(v) for k, v in metrics.items()}, frames)

    def write_video(self, frames: int, mp4: Path, tag: str) -> None:
        """``mp4`` to TensorBoard as an animated GIF; nothing without TensorBoard."""
        if self._tb is None:
            return
        import subprocess

        import imageio_ffmpeg
        from tensorboard.compat.proto.summary_pb2 import Summary

        gif = mp4.with_suffix(".gif")
        subprocess.run(
            [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-loglevel", "error", "-i", str(mp4), str(gif)],
            check=True,
        )
        meta = imageio_ffmpeg.read_frames(str(mp4))
        width, height = next(meta)["size"]
        meta.close()
        image = Summary.Image(
            height=height, width=width, colorspace=3, encoded_image_string=gif.read_bytes()
        )
        gif.unlink()
        self._tb.file_writer.add_summary(
            Summary(value=[Summary.Value(tag=tag, image=image)]), global_step=int(frames)
        )

    def warn_missing(self, frames: int, episodes_seen: int) -> None:
        """Warn when a resumed run's metrics.csv or episodes.csv, which held rows, is gone."""
        for f, written in ((self.metrics, frames), (self.episodes, episodes_seen)):
            if written and not f.path.exists():
                log.warning(
                    "%s is missing: its rows up to %d frames are lost; a new one starts here",
                    f.path,
                    frames,
                )

    def _warn_unknown(self, f: CsvFile, metrics: Mapping[str, Any]) -> None:
        if f.columns is None:
            return
        new = [k for k in metrics if k not in f.columns and k not in self._warned]
        if new:
            self._warned.update(new)
            warnings.warn(
                f"{f.path.name}: columns are fixed by the first row; keys {new} go to "
                "TensorBoard only",
                stacklevel=4,  # RunLogger.log's or .eval's caller
            )
