"""Run logging: csv files, TensorBoard scalars and a progress bar, all keyed by emulator frames.

Files in ``run_dir``:

- ``metrics.csv``: one row per ``RunLogger.log`` call (``frames, time_s, episodes,
  return_mean100`` then the metric keys of the first call, sorted).
- ``episodes.csv``: one row per finished episode (``frames, return, length``).
- ``eval.csv``: one row per ``RunLogger.eval`` call (``frames, time_s`` then its keys, sorted).
- ``tb/``: TensorBoard event files.

Emulator frames (agent steps x frame skip) are the x axis everywhere so that runs with different
numbers of simulators, frame skips or GPUs line up. Every csv row is flushed when written, so a
SIGKILL loses at most the row being written (on resume, a line cut mid-row is moved to
``<name>.damaged`` with a warning).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import numbers
import os
import re
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import torch
from tqdm import tqdm

_WINDOW = 100
_METRIC_BASE = ("frames", "time_s", "episodes", "return_mean100")
_EVAL_BASE = ("frames", "time_s")
_EPISODE_COLUMNS = ("frames", "return", "length")
# A bar redrawn every 0.1 s floods SLURM log files; 5 s keeps them readable.
_MININTERVAL_TTY_S = 0.1
_MININTERVAL_FILE_S = 5.0
_CURSOR_MOVES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

log = logging.getLogger("accelrl")


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{float(value):.7g}"


def _as_list(values: Sequence[float] | Sequence[int] | torch.Tensor, kind: type) -> list:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().reshape(-1).tolist()
    return [kind(v) for v in values]


class _CsvFile:
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


class _LineStream:
    """Turns tqdm's carriage-return redraws into one line per redraw, for log files."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, s: str) -> int:
        # tqdm moves the cursor between stacked bars (ESC [ A); a file gets plain lines.
        line = _CURSOR_MOVES.sub("", s).replace("\r", "").rstrip()
        if line:
            self._stream.write(line + "\n")
        return len(s)

    def flush(self) -> None:
        self._stream.flush()


class RunLogger:
    """Writes a run's csv files, TensorBoard scalars and progress bar (rank 0 only: the other
    ranks of a data-parallel run log to ``accelrl.run_folder.NullLogger``).

    Resume: pass ``start_frames`` and call ``load_state_dict`` with the dict that
    ``state_dict`` returned when the checkpoint was written. It restores the counters (episodes
    seen, recent returns, elapsed wall time, frames) and truncates ``metrics.csv``,
    ``episodes.csv`` and ``eval.csv`` to the rows with ``frames`` <= the restored frame count,
    i.e. drops rows written after the checkpoint and before the kill; TensorBoard hides those
    events through ``purge_step``. The resumed run then appends with no duplicated or missing
    rows, provided the checkpoint is taken after the logging calls for its frame count. A run
    started without ``load_state_dict`` drops rows with frames > ``start_frames`` on its first
    write, so a fresh run in an old folder does not mix with the old rows.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        total_frames: int,
        start_frames: int = 0,
        tensorboard: bool = True,
        progress: bool = True,
        trackers: tuple[str, ...] = (),
        project: str = "accelrl",
        config: dict | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.total_frames = int(total_frames)
        self._use_tb = tensorboard
        self._episodes_seen = 0
        self._recent: deque[float] = deque(maxlen=_WINDOW)
        self._elapsed_before = 0.0
        self._t0 = time.monotonic()
        self._frames = int(start_frames)
        self._cut = int(start_frames)
        self._rate_mark = (self._frames, self._t0)
        self._fps = float("nan")
        self._opened = False
        self._closed = False
        self._warned: set[str] = set()
        self._metrics = _CsvFile(self.run_dir / "metrics.csv")
        self._episodes = _CsvFile(self.run_dir / "episodes.csv")
        self._evals = _CsvFile(self.run_dir / "eval.csv")
        self._tb: Any = None
        self._tracker_names, self._project, self._config = tuple(trackers), project, config or {}
        self._trackers: Any = None
        self._bar: tqdm | None = None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if progress:
            self._bar = self._make_bar(self._frames)

    def _make_bar(self, initial: int, **kwargs: Any) -> tqdm:
        stream = sys.stderr
        tty = stream.isatty()
        return tqdm(
            **{"total": self.total_frames, "initial": initial, **kwargs},
            unit="frames",
            unit_scale=True,
            dynamic_ncols=tty,
            mininterval=_MININTERVAL_TTY_S if tty else _MININTERVAL_FILE_S,
            file=stream if tty else _LineStream(stream),
        )

    @contextmanager
    def side_bar(self, what: str, parts: int) -> Iterator[Callable[[int, int], None] | None]:
        """A second progress bar, under the main one, for work outside training (evaluation):
        emulator frames so far (of one simulator: an Atari episode stops at
        ``--env.max-episode-frames``) and ``what`` done of ``parts``. Yields ``tick(frames, done)``
        (add ``frames``, ``done`` parts finished), or None when the run shows no progress bar."""
        if self._bar is None or self._closed:
            yield None
            return
        count = [0]
        tty = sys.stderr.isatty()  # a terminal's bar goes away after, a log file keeps the last
        bar = self._make_bar(0, total=None, desc=f"{what} 0/{parts}", leave=not tty,
                             position=1 if tty else None)  # fmt: skip

        def tick(frames: int, done: int) -> None:
            if done:
                count[0] += done
                bar.set_description_str(f"{what} {count[0]}/{parts}", refresh=False)
            bar.update(frames)

        try:
            yield tick
        finally:
            bar.close()

    def _time_s(self) -> float:
        return self._elapsed_before + time.monotonic() - self._t0

    def _sinks(self) -> bool:
        """Opens the files and writer on first use; returns whether anything should be written."""
        if self._closed:
            return False
        if not self._opened:
            for f in (self._metrics, self._episodes, self._evals):
                f.open(self._cut)
            if self._use_tb:
                from torch.utils.tensorboard import SummaryWriter

                # Hides events logged after the checkpoint by the killed run.
                self._tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=self._cut + 1)
            if self._tracker_names:
                from accelrl.trackers import Trackers

                self._trackers = Trackers(
                    self.run_dir, self._tracker_names, self._project, self._config
                )
            self._opened = True
        return True

    def _close_sinks(self) -> None:
        for f in (self._metrics, self._episodes, self._evals):
            f.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._trackers is not None:
            self._trackers.close()
            self._trackers = None
        self._opened = False

    def episodes(
        self,
        returns: Sequence[float] | torch.Tensor,
        lengths: Sequence[int] | torch.Tensor,
        frames: int,
    ) -> None:
        """Record finished episodes (unclipped returns, lengths in agent steps) seen at emulator
        frame count ``frames``; returns nothing."""
        rets, lens = _as_list(returns, float), _as_list(lengths, int)
        if len(rets) != len(lens):
            raise ValueError(f"got {len(rets)} returns but {len(lens)} lengths")
        frames = int(frames)
        self._episodes_seen += len(rets)
        self._recent.extend(rets)
        self._frames = max(self._frames, frames)
        if not rets or not self._sinks():
            return
        rows = [
            {"frames": frames, "return": r, "length": n} for r, n in zip(rets, lens, strict=True)
        ]
        self._episodes.write(rows, _EPISODE_COLUMNS)
        if self._tb is not None:
            for r, n in zip(rets, lens, strict=True):
                self._tb.add_scalar("episode/return", r, frames)
                self._tb.add_scalar("episode/length", n, frames)

    def log(self, frames: int, metrics: Mapping[str, float], *, step: int | None = None) -> None:
        """Append one row to metrics.csv and scalars to TensorBoard at x = emulator frames;
        update the progress bar. ``step`` (e.g. learner updates) is logged as metric ``step``."""
        frames = int(frames)
        self._frames = max(self._frames, frames)
        values = dict(metrics) if step is None else {**metrics, "step": step}
        now = time.monotonic()
        mark_frames, mark_t = self._rate_mark
        if now > mark_t and frames > mark_frames:
            self._fps = (frames - mark_frames) / (now - mark_t)
        self._rate_mark = (frames, now)
        mean = self.mean_return()
        if self._bar is not None and not self._closed:
            fps = "?" if math.isnan(self._fps) else tqdm.format_sizeof(self._fps)
            self._bar.set_postfix({"ret": f"{mean:.1f}", "fps": fps}, refresh=False)
            self._bar.update(max(0, frames - self._bar.n))
        if not self._sinks():
            return
        row = {
            "frames": frames,
            "time_s": round(self._time_s(), 3),
            "episodes": self._episodes_seen,
            "return_mean100": mean,
            **values,
        }
        self._warn_unknown(self._metrics, values)
        self._metrics.write([row], [*_METRIC_BASE, *sorted(values)])
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

    def eval(self, frames: int, metrics: Mapping[str, float]) -> None:
        """Append one row to eval.csv and scalars to TensorBoard at x = emulator frames; returns
        nothing. Keys are logged as given, e.g. ``eval/greedy_return``."""
        frames = int(frames)
        self._frames = max(self._frames, frames)
        if not self._sinks():
            return
        self._warn_unknown(self._evals, metrics)
        row = {"frames": frames, "time_s": round(self._time_s(), 3), **metrics}
        self._evals.write([row], [*_EVAL_BASE, *sorted(metrics)])
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, _to_float(value), frames)
        if self._trackers is not None:
            self._trackers.log({k: _to_float(v) for k, v in metrics.items()}, frames)

    def video(self, frames: int, mp4: Path, tag: str = "eval/video") -> None:
        """Show a recorded MP4 in TensorBoard as an animated GIF at x = emulator frames (the
        form TensorBoard plays; converted by imageio-ffmpeg's ffmpeg, no moviepy needed)."""
        if not self._sinks() or self._tb is None:
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

    def _warn_unknown(self, f: _CsvFile, metrics: Mapping[str, Any]) -> None:
        if f.columns is None:
            return
        new = [k for k in metrics if k not in f.columns and k not in self._warned]
        if new:
            self._warned.update(new)
            warnings.warn(
                f"{f.path.name}: columns are fixed by the first row; keys {new} go to "
                "TensorBoard only",
                stacklevel=3,
            )

    def mean_return(self, last: int = _WINDOW) -> float:
        """Mean unclipped return of the last ``last`` (at most 100) episodes; nan if none."""
        if not 1 <= last <= _WINDOW:
            raise ValueError(f"last must be in 1..{_WINDOW}, got {last}")
        recent = list(self._recent)[-last:]
        return sum(recent) / len(recent) if recent else float("nan")

    @property
    def episodes_seen(self) -> int:
        """Number of finished episodes recorded so far, across resumes."""
        return self._episodes_seen

    def state_dict(self) -> dict:
        """Counters needed for an exact resume: episodes, recent returns, elapsed s, frames."""
        return {
            "episodes_seen": self._episodes_seen,
            "recent_returns": list(self._recent),
            "elapsed_s": self._time_s(),
            "frames": self._frames,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore counters and truncate the csv files to rows with frames <= state frames."""
        self._episodes_seen = int(state["episodes_seen"])
        self._recent = deque((float(r) for r in state["recent_returns"]), maxlen=_WINDOW)
        self._elapsed_before = float(state["elapsed_s"])
        self._t0 = time.monotonic()
        self._frames = self._cut = int(state["frames"])
        self._rate_mark = (self._frames, self._t0)
        if self._closed:
            return
        for f, written in ((self._metrics, self._frames), (self._episodes, self._episodes_seen)):
            if written and not f.path.exists():
                log.warning(
                    "%s is missing: its rows up to %d frames are lost; a new one starts here",
                    f.path,
                    self._frames,
                )
        self._close_sinks()
        self._sinks()
        if self._bar is not None and self._bar.n != self._frames:
            # A fresh bar so that tqdm's rate and ETA do not count the restored frames.
            self._bar.close()
            self._bar = self._make_bar(self._frames)

    def close(self) -> None:
        """Flush and close files, TensorBoard writer and progress bar; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._close_sinks()
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _to_float(value: Any) -> float:
    return value.item() if isinstance(value, torch.Tensor) else float(value)
