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
``<name>.damaged`` with a warning). The files and trackers are written by
``accelrl.run.sinks``, the bar drawn by ``accelrl.run.console``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from accelrl.run.console import ProgressBar
from accelrl.run.sinks import LogSinks

_WINDOW = 100


def _as_list(values: Sequence[float] | Sequence[int] | torch.Tensor, kind: type) -> list:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().reshape(-1).tolist()
    return [kind(v) for v in values]


class RunLogger:
    """Writes a run's csv files, TensorBoard scalars and progress bar (rank 0 only: the other
    ranks of a data-parallel run log to ``accelrl.run.folder.NullLogger``).

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
        self._episodes_seen = 0
        self._recent: deque[float] = deque(maxlen=_WINDOW)
        self._elapsed_before = 0.0
        self._t0 = time.monotonic()
        self._frames = int(start_frames)
        self._cut = int(start_frames)
        self._rate_mark = (self._frames, self._t0)
        self._fps = float("nan")
        self._closed = False
        self._sinks = LogSinks(
            self.run_dir,
            tensorboard=tensorboard,
            trackers=tuple(trackers),
            project=project,
            config=config or {},
        )
        self._bar: ProgressBar | None = None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if progress:
            self._bar = ProgressBar(self.total_frames, self._frames)

    @contextmanager
    def side_bar(self, what: str, parts: int) -> Iterator[Callable[[int, int], None] | None]:
        """A second progress bar, under the main one, for work outside training (evaluation):
        emulator frames so far (of one simulator: an Atari episode stops at
        ``--env.max-episode-frames``) and ``what`` done of ``parts``. Yields ``tick(frames, done)``
        (add ``frames``, ``done`` parts finished), or None when the run shows no progress bar."""
        if self._bar is None or self._closed:
            yield None
            return
        with self._bar.side_bar(what, parts) as tick:
            yield tick

    def _time_s(self) -> float:
        return self._elapsed_before + time.monotonic() - self._t0

    def _open(self) -> bool:
        """Opens the files and writers on first use; returns whether anything should be written."""
        if self._closed:
            return False
        self._sinks.open(self._cut)
        return True

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
        if not rets or not self._open():
            return
        self._sinks.write_episodes(frames, rets, lens)

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
            self._bar.show(frames, mean, self._fps)
        if not self._open():
            return
        row = {
            "frames": frames,
            "time_s": round(self._time_s(), 3),
            "episodes": self._episodes_seen,
            "return_mean100": mean,
            **values,
        }
        self._sinks.write_metrics(frames, row, values, mean)

    def eval(self, frames: int, metrics: Mapping[str, float]) -> None:
        """Append one row to eval.csv and scalars to TensorBoard at x = emulator frames; returns
        nothing. Keys are logged as given, e.g. ``eval/greedy_return``."""
        frames = int(frames)
        self._frames = max(self._frames, frames)
        if not self._open():
            return
        row = {"frames": frames, "time_s": round(self._time_s(), 3), **metrics}
        self._sinks.write_eval(frames, row, metrics)

    def video(self, frames: int, mp4: Path, tag: str = "eval/video") -> None:
        """Show a recorded MP4 in TensorBoard as an animated GIF at x = emulator frames (the
        form TensorBoard plays; converted by imageio-ffmpeg's ffmpeg, no moviepy needed)."""
        if self._open():
            self._sinks.write_video(frames, mp4, tag)

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
        self._sinks.warn_missing(self._frames, self._episodes_seen)
        self._sinks.close()
        self._open()
        if self._bar is not None and self._bar.n != self._frames:
            self._bar.restart(self._frames)

    def close(self) -> None:
        """Flush and close files, TensorBoard writer and progress bar; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._sinks.close()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
