"""The run folder as a record: one live writer (an OS lock), resumes that refuse changes to what
a run learns and record the others, repairs of damaged files that lose nothing, standard JSON,
and the code version that wrote it. Tiny CartPole runs in this process (the recipe's command
line, as ``tests/test_bad_input.py``), plus one pair of real processes racing for a folder."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from accelrl.logging import RunLogger
from accelrl.run_lock import FolderInUse, FolderLock

REPO = Path(__file__).resolve().parents[1]
RECIPES = ("ppo_atari", "a2c_atari", "appo_atari", "dqn_atari")


def test_a_line_that_is_not_a_row_is_set_aside_on_resume(tmp_path):
    lg = RunLogger(tmp_path, total_frames=1000, tensorboard=False, progress=False)
    for f in (100, 200, 300):
        lg.log(f, {"x": f})
    lg.close()
    path = tmp_path / "metrics.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1], "hand,edit", lines[2], lines[3][:6]]))
    lg = RunLogger(tmp_path, total_frames=1000, tensorboard=False, progress=False)
    lg.load_state_dict({"episodes_seen": 0, "recent_returns": [], "elapsed_s": 1.0, "frames": 200})
    lg.close()
    assert path.read_text().splitlines() == lines[:3]
    assert (tmp_path / "metrics.csv.damaged").read_text() == f"hand,edit\n{lines[3][:6]}\n"


# ----- the lock ---------------------------------------------------------------------------------


HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from accelrl.run_lock import FolderLock
    lock = FolderLock(Path(sys.argv[1]))
    lock.acquire()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
""")


def hold(folder: Path, seconds: float, **env: str) -> subprocess.Popen:
    """A process that holds ``folder``'s lock for ``seconds``, once it has printed a line."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    assert proc.stdout.readline() == "locked\n"
    return proc


def test_a_killed_holder_leaves_no_lock_behind(tmp_path):
    proc = hold(tmp_path, 60)
    try:
        with pytest.raises(FolderInUse, match=f"pid {proc.pid} on"):
            FolderLock(tmp_path).acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lock = FolderLock(tmp_path)
    assert lock.acquire()
    lock.release()


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    lock = FolderLock(tmp_path)
    lock.acquire()
    ready, started = os.pipe()
    pid = os.fork()
    if pid == 0:  # a collector worker started with fork, outliving the run
        try:
            os.write(started, b"x")
            time.sleep(30)
        finally:
            os._exit(0)
    try:
        assert os.read(ready, 1) == b"x"  # the child runs (its fork handlers have run)
        lock.release()
        again = FolderLock(tmp_path)
        assert again.acquire()
        again.release()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready)
        os.close(started)


def test_a_file_system_without_locks_warns_and_goes_on(tmp_path, monkeypatch, caplog):
    def no_locks(fd, op):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr("accelrl.run_lock.fcntl.flock", no_locks)
    assert FolderLock(tmp_path).acquire() is False
    assert "has no file locks" in caplog.text and "nothing stops a second run" in caplog.text


def test_a_requeued_slurm_job_waits_for_its_previous_attempt(tmp_path, monkeypatch):
    monkeypatch.setattr("accelrl.run_lock.REQUEUE_WAIT_S", 30.0)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    holder = hold(tmp_path, 1.0, SLURM_JOB_ID="77")
    lock = FolderLock(tmp_path)
    assert lock.acquire(), "the previous attempt's lock is awaited, not refused"
    lock.release()
    holder.wait()
    other = hold(tmp_path, 60, SLURM_JOB_ID="78")
    try:
        with pytest.raises(FolderInUse, match="SLURM job 78"):
            FolderLock(tmp_path).acquire()
    finally:
        other.kill()
        other.wait()
