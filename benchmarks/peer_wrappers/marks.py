"""The lines a peer's wrapper writes on stderr for ``benchmarks.peers`` to read. Standard library
only: the wrappers import it from their own folder, in each peer's venv."""

import os
import time

MARK = "accelrl-peers-mark"  # agent steps so far, perf_counter: the end of one update
EPISODE = "accelrl-peers-episode"  # agent steps so far, game score, perf_counter


def note(*fields: object) -> None:
    """``fields`` and ``time.perf_counter()`` as one line. One write of the whole line: the
    peer's other processes share this stderr pipe, and print() writes a line in pieces that
    their output could split."""
    line = " ".join(str(f) for f in (*fields, time.perf_counter()))
    os.write(2, f"{line}\n".encode())
