"""A run's progress bar on stderr: emulator frames of ``total_frames``, the mean return and the
frame rate, and a second bar under it for evaluations. A terminal gets tqdm's redrawn bar; a log
file (SLURM's) gets one plain line per redraw, every 5 s at most."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from tqdm import tqdm

# A bar redrawn every 0.1 s floods SLURM log files; 5 s keeps them readable.
_MININTERVAL_TTY_S = 0.1
_MININTERVAL_FILE_S = 5.0
_CURSOR_MOVES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class LineStream:
    """Writes tqdm's carriage-return redraws as one line per redraw, for log files."""

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


class ProgressBar:
    """The frames bar of a run, starting at ``initial`` frames of ``total_frames``."""

    def __init__(self, total_frames: int, initial: int) -> None:
        self.total_frames = total_frames
        self._bar = self._make(initial)

    def _make(self, initial: int, **kwargs: Any) -> tqdm:
        stream = sys.stderr
        tty = stream.isatty()
        return tqdm(
            **{"total": self.total_frames, "initial": initial, **kwargs},
            unit="frames",
            unit_scale=True,
            dynamic_ncols=tty,
            mininterval=_MININTERVAL_TTY_S if tty else _MININTERVAL_FILE_S,
            file=stream if tty else LineStream(stream),
        )

    @property
    def n(self) -> int:
        """Frames the bar shows."""
        return self._bar.n

    def show(self, frames: int, mean_return: float, fps: float) -> None:
        """Move the bar to ``frames`` (never back) with the mean return and frame rate."""
        rate = "?" if math.isnan(fps) else tqdm.format_sizeof(fps)
        self._bar.set_postfix({"ret": f"{mean_return:.1f}", "fps": rate}, refresh=False)
        self._bar.update(max(0, frames - self._bar.n))

    def restart(self, frames: int) -> None:
        """A fresh bar at ``frames`` (a resume), so that tqdm's rate and ETA do not count the
        restored frames."""
        self._bar.close()
        self._bar = self._make(frames)

    @contextmanager
    def side_bar(self, what: str, parts: int) -> Iterator[Callable[[int, int], None]]:
        """A second bar under this one; see ``accelrl.run.logger.RunLogger.side_bar``."""
        count = [0]
        tty = sys.stderr.isatty()  # a terminal's bar goes away after, a log file keeps the last
        bar = self._make(0, total=None, desc=f"{what} 0/{parts}", leave=not tty,
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

    def close(self) -> None:
        self._bar.close()
