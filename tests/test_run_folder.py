"""The run folder as a record: one live writer (an OS lock), resumes that refuse changes to what
a run learns and record the others, repairs of damaged files that lose nothing, standard JSON,
and the code version that wrote it. Tiny CartPole runs in this process (the recipe's command
line, as ``tests/test_bad_input.py``), plus one pair of real processes racing for a folder."""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import accelrl
from accelrl.cli import run_recipe
from accelrl.config import to_dict
from accelrl.run.lock import FolderInUse, FolderLock
from accelrl.run.logger import RunLogger
from accelrl.run.record import (
    LEARNED,
    RESUME_CHANGES,
    classify,
    code_version,
    dumps,
    flatten,
    read_changes,
)
from tests.test_async import child_pids
from tests.test_bad_input import CARTPOLE, assert_one_clear_line
from tests.test_distributed import wait_for

REPO = Path(__file__).resolve().parents[1]
RECIPES = ("ppo_atari", "a2c_atari", "appo_atari", "dqn_atari")


def no_nan(text: str):
    """``json.loads`` that fails on NaN / Infinity, as jq and JavaScript do."""

    def refuse(name: str):
        raise AssertionError(f"bare {name} in {text[:200]}")

    return json.loads(text, parse_constant=refuse)


def cli(argv: list[str], recipe: str = "ppo_atari") -> tuple[int, str, str]:
    """Exit code, stdout and stderr of the recipe's command line, run in this process."""
    module = importlib.import_module(f"recipes.{recipe}")
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            run_recipe(module.Config, module.train, description="", argv=argv)
        except SystemExit as stop:
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def tiny(run: Path, frames: int, *flags: str) -> list[str]:
    return [
        *CARTPOLE,
        "--ppo.minibatches",
        "2",
        "--total-frames",
        str(frames),
        "--run-dir",
        str(run),
        *flags,
    ]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, str]:
    """A finished 128-frame run whose mean return is missing (NaN), and its printed summary."""
    run = tmp_path_factory.mktemp("finished") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RunLogger, "mean_return", lambda self, last=100: float("nan"))
        code, out, err = cli(tiny(run, 128))
    assert code == 0, err
    return run, out.strip().splitlines()[-1]


def copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


# ----- the record -------------------------------------------------------------------------------


def test_every_config_field_of_every_recipe_is_classified_for_resume():
    keys = set()
    for name in RECIPES:
        keys |= set(flatten(to_dict(importlib.import_module(f"recipes.{name}").Config())))
    unclassified = sorted(k for k in keys if classify(k) is None)
    assert not unclassified, f"add these to accelrl.run.record.RESUME_CHANGES: {unclassified}"
    stale = [
        k
        for k in RESUME_CHANGES
        if k not in keys and k.split(".")[0] not in ("resolved", "accelrl")
    ]
    assert not stale, f"RESUME_CHANGES names fields no recipe has: {stale}"
    assert classify("ppo.lr") == classify("env.game") == classify("seed") == LEARNED
    assert classify("total_frames") != LEARNED and classify("device") != LEARNED


def test_missing_values_are_null_in_summary_json_and_the_printed_line(finished):
    run, line = finished
    assert no_nan(line)["mean_return_100"] is None
    assert no_nan((run / "summary.json").read_text())["mean_return_100"] is None
    assert dumps({"a": float("inf"), "b": [float("nan"), 1.5]}) == '{"a": null, "b": [null, 1.5]}'


def test_config_records_code_version_and_folder_format(finished):
    run, _ = finished
    saved = no_nan((run / "config.json").read_text())
    assert saved["folder_format"] == 1 and saved["resolved"]["world_size"] == 1
    assert saved["accelrl"]["version"]
    source = Path(accelrl.__file__).resolve().parents[1]

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=source, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    commit = saved["accelrl"]["commit"]
    if git("rev-parse", "--show-toplevel") == str(source):  # run from a checkout
        assert commit.removesuffix("-dirty") == git("rev-parse", "HEAD")
    else:  # an installed package
        assert commit is None


def test_resume_refuses_changes_to_what_is_learned_and_records_the_others(
    finished, tmp_path, monkeypatch
):
    run = copy(finished[0], tmp_path)
    original = (run / "config.json").read_bytes()
    code, _, err = cli(tiny(run, 128, "--resume", "--ppo.lr", "0.5", "--seed", "3"))
    assert_one_clear_line(
        code, err, ["--ppo.lr 0.00025 -> 0.5", "--seed 0 -> 3", "--allow-config-change"]
    )
    assert not (run / "config_changes.jsonl").exists()

    # Accepted, and recorded with the frame count they apply from; a new code version too.
    monkeypatch.setattr(
        "accelrl.run.opening.code_version", lambda: {**code_version(), "commit": "abc123"}
    )
    longer = ["--resume", "--log.checkpoint-every-frames", "64"]
    code, _, err = cli(tiny(run, 256, *longer))
    assert code == 0, err
    (record,) = read_changes(run)[0]
    assert record["frames"] == 128
    changes = {c["key"]: (c["old"], c["new"], c["learned"]) for c in record["changes"]}
    assert changes == {
        "total_frames": (128, 256, False),
        "log.checkpoint_every_frames": (1_000_000, 64, False),
        "accelrl.commit": (code_version()["commit"], "abc123", False),
    }
    # The same flags again change nothing; the original config stays as it was.
    assert cli(tiny(run, 256, *longer))[0] == 0
    assert len(read_changes(run)[0]) == 1
    assert (run / "config.json").read_bytes() == original

    code, _, err = cli(tiny(run, 320, *longer, "--ppo.lr", "0.5", "--allow-config-change"))
    assert code == 0, err
    last = read_changes(run)[0][-1]
    assert last["frames"] == 256
    assert {"key": "ppo.lr", "old": 0.00025, "new": 0.5, "learned": True} in last["changes"]

    # Reports list the changes; plots draw a line where each happened.
    from matplotlib.axes import Axes

    from accelrl.tools.plot import plot_runs
    from accelrl.tools.report import report

    with contextlib.redirect_stdout(io.StringIO()):
        report([run], tmp_path / "r", reps=10)
    text = (tmp_path / "r.txt").read_text()
    assert "resumed at 128 frames with --log.checkpoint-every-frames 1000000 -> 64" in text
    assert "--ppo.lr 0.00025 -> 0.5 (changes what is learned)" in text
    lines, real = [], Axes.axvline
    monkeypatch.setattr(Axes, "axvline", lambda ax, x, **kw: lines.append(x) or real(ax, x, **kw))
    plot_runs([run], tmp_path / "p.png")
    assert lines == [128, 256]


# ----- damage -----------------------------------------------------------------------------------


def test_damaged_record_files_stop_with_one_line(finished, tmp_path, monkeypatch):
    run = copy(finished[0], tmp_path)
    config = run / "config.json"
    good = config.read_text()
    config.write_text(good[: len(good) // 2])
    code, _, err = cli(tiny(run, 256, "--resume"))
    assert_one_clear_line(code, err, [f"{config} is not valid JSON (line", "move it away"])
    from accelrl.tools.report import ReportError, read_run

    with pytest.raises(ReportError, match="is not valid JSON"):
        read_run(run)

    config.write_text(json.dumps({**json.loads(good), "folder_format": 99}))
    code, _, err = cli(tiny(run, 256, "--resume"))
    assert_one_clear_line(code, err, ["folder format 99", "upgrade accelrl"])
    config.write_text(good)

    real_iterdir = Path.iterdir

    def unreadable(path):
        if path.name == "checkpoints":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_iterdir(path)

    monkeypatch.setattr(Path, "iterdir", unreadable)
    code, _, err = cli(tiny(run, 256, "--resume"))
    assert_one_clear_line(code, err, ["checkpoints folder cannot be read", "Permission denied"])


def test_damaged_csvs_and_a_missing_config_are_repaired_without_losing_rows(
    finished, tmp_path, caplog
):
    run = copy(finished[0], tmp_path)
    metrics = run / "metrics.csv"
    text = metrics.read_text()
    cut = text[: len(text) - 5]  # the last row, at 128 frames, loses its end
    metrics.write_text(cut)
    (run / "episodes.csv").unlink()
    (run / "config.json").unlink()
    code, out, err = cli(tiny(run, 256, "--resume"))
    assert code == 0, err
    warned = caplog.text
    assert "metrics.csv.damaged" in warned and "episodes.csv is missing" in warned
    assert "no config.json" in warned
    assert (run / "metrics.csv.damaged").read_text() == cut.rsplit("\n", 1)[1] + "\n"
    frames = [row.split(",")[0] for row in metrics.read_text().splitlines()[1:]]
    assert frames == ["64", "192", "256"]
    assert no_nan((run / "config.json").read_text())["config"]["total_frames"] == 256


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
    from accelrl.run.lock import FolderLock
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


def test_a_second_start_on_a_locked_folder_stops_before_anything_starts(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lock = FolderLock(run)
    assert lock.acquire()
    try:
        before = child_pids()
        code, _, err = cli(tiny(run, 128))
        where = f"pid {os.getpid()} on {socket.gethostname()} since "
        assert_one_clear_line(code, err, [f"--run-dir='{run}'", f"is in use by {where}"])
        assert not child_pids() - before
        assert sorted(p.name for p in run.iterdir()) == ["run.lock"], "nothing written"
    finally:
        lock.release()
    assert cli(tiny(run, 64))[0] == 0, "free again once released"


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

    monkeypatch.setattr("accelrl.run.lock.fcntl.flock", no_locks)
    assert FolderLock(tmp_path).acquire() is False
    assert "has no file locks" in caplog.text and "nothing stops a second run" in caplog.text


def test_a_requeued_slurm_job_waits_for_its_previous_attempt(tmp_path, monkeypatch):
    monkeypatch.setattr("accelrl.run.lock.REQUEUE_WAIT_S", 30.0)
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


def test_two_starts_on_one_folder_leave_one_runs_rows(tmp_path):
    run = tmp_path / "run"
    script = str(REPO / "recipes" / "ppo_atari.py")
    first = subprocess.Popen(
        [sys.executable, script, *tiny(run, 10**8)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        metrics = run / "metrics.csv"
        assert wait_for(lambda: metrics.exists() and metrics.read_text().count("\n") > 2, 120)
        written = metrics.read_text().split("\n")[:-1]
        # A duplicate of a sweep's run name: a short run, as a second terminal would start it.
        second = subprocess.run(
            [sys.executable, script, *tiny(run, 256)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        first_ran_on = first.poll() is None
    finally:
        first.send_signal(signal.SIGKILL)  # no release, no checkpoint
        first.communicate()
    rows = metrics.read_text().split("\n")[:-1]  # whole lines: the kill may cut the last
    frames = [int(r.split(",")[0]) for r in rows[1:]]
    assert rows[0].startswith("frames,") and rows.count(rows[0]) == 1
    assert frames == list(range(64, 64 * len(frames) + 1, 64)), "one run's rows, once each"
    assert rows[: len(written)] == written, "the first run's rows, kept"
    assert first_ran_on and second.returncode == 2, second.stderr[-2000:]
    errors = [x for x in second.stderr.splitlines() if x.startswith("accelrl: error: ")]
    assert len(errors) == 1 and f"is in use by pid {first.pid} on" in errors[0], errors
    lock = FolderLock(run)
    assert lock.acquire(), "the killed run left no lock behind"
    lock.release()
