"""The study tool: grid files and their one-line refusals, cell states (skip, resume), the SLURM
job arrays it prints, the report's scores and intervals on hand-written run folders, and one
tiny grid run for real through submitit's local executor, then reported."""

import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from accelrl.run.lock import FolderLock
from accelrl.study.__main__ import main
from accelrl.study.grid import FINISHED, NEW, RESUME, RUNNING, cell_state, load_grid
from accelrl.study.keep import thin
from accelrl.study.report import report, window_score
from accelrl.study.runner import plan_cells
from slurm.study import main as slurm_main
from tests.helpers import run_main

ROOT = Path(__file__).resolve().parents[1]

GRID = """
[study]
games = ["CartPole-v1"]
seeds = [0, 1]
flags = "--log.no-progress --log.no-tensorboard --log.eval-episodes 0 --env.num-envs 4"

[algorithms.ppo]
recipe = "recipes.ppo_atari"
frames = 2048
standard = "small"
flags = "--log.checkpoint-every-frames 1024"
settings = { small = "--collector.steps-per-batch 64", big = "--collector.steps-per-batch 256 --env.num-envs 16" }
"""  # noqa: E501


def write_grid(tmp_path: Path, text: str = GRID, name: str = "grid.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def study(capsys, *argv: str) -> tuple[int, str, str]:
    return run_main(main, capsys, *argv)


def slurm_study(capsys, *argv: str) -> tuple[int, str, str]:
    """The same command line with SLURM job arrays (``python -m slurm.study``)."""
    return run_main(slurm_main, capsys, *argv)


# ---------------------------------------------------------------------------------------------
# grid files


def test_grid_gives_each_cell_its_folder_and_flags(tmp_path):
    text = GRID.replace(
        'flags = "--log.checkpoint', 'flags = "--log.project {run_dir}/x --log.checkpoint'
    )
    grid = load_grid(write_grid(tmp_path, text), tmp_path / "s")
    cells = grid.cells()
    assert [c.name for c in cells] == [
        "ppo/small/CartPole-v1/seed0",
        "ppo/small/CartPole-v1/seed1",
        "ppo/big/CartPole-v1/seed0",
        "ppo/big/CartPole-v1/seed1",
    ]
    big1 = cells[3]
    assert big1.run_dir == tmp_path / "s" / "ppo" / "big" / "CartPole-v1" / "seed1"
    assert big1.recipe_args(threads=1) == [
        *("--log.no-progress", "--log.no-tensorboard", "--log.eval-episodes", "0"),
        *("--env.num-envs", "4", "--log.project", f"{big1.run_dir}/x"),
        *("--log.checkpoint-every-frames", "1024"),
        *("--collector.steps-per-batch", "256", "--env.num-envs", "16"),
        *("--threads.torch-threads", "1", "--total-frames", "2048", "--seed", "1"),
        *("--env.game", "CartPole-v1", "--run-dir", str(big1.run_dir)),
    ]
    # A grid that sets the threads keeps them; --frames replaces every budget.
    again = load_grid(write_grid(tmp_path, GRID.replace('64"', '64 --threads.torch-threads 2"')),
                      tmp_path / "s", frames=512)  # fmt: skip
    small0 = again.cells()[0]
    assert small0.recipe_args(threads=1).count("--threads.torch-threads") == 1
    assert small0.algorithm.frames == 512


BAD_GRIDS = [
    ("[study\n", "not valid TOML"),
    (GRID.replace("seeds = [0, 1]", "seed = [0, 1]"), "unknown key 'seed'; did you mean 'seeds'?"),
    (GRID.replace("[0, 1]", "[0, 0]"), "a seed is listed twice"),
    (GRID.replace("frames = 2048", "frames = 2.5e3"), "frames = 2500.0: expected a positive"),
    (GRID.replace('standard = "small"', 'standard = "tiny"'), "standard = 'tiny': not one of"),
    (GRID.replace("big =", '"big/x" ='), "name 'big/x' cannot be a folder name"),
    (
        GRID.replace('"--collector.steps-per-batch 64"', '"--seed 3"'),
        "--seed is set by the study; give it in the study's seeds",
    ),
    (GRID.replace("recipes.ppo_atari", "recipes.ppo_atary"), "unknown recipe module"),
    (
        GRID.replace("--collector.steps-per-batch 64", "--collector.steps-per-btch 64"),
        "settings.small (CartPole-v1, seed 0): recipe flags:",
    ),
    (
        GRID.replace("--collector.steps-per-batch 64", "--collector.steps-per-batch 62"),
        "--collector.steps-per-batch=62: must be a multiple of",
    ),
    (GRID + "[slurm]\ntime = 0\n", "[slurm]: --time must be >= 1"),
    (GRID + "[slurm]\npartion = 'x'\n", "[slurm]: unknown key 'partion'"),
]


@pytest.mark.parametrize("path", sorted((ROOT / "studies").glob("*.toml")), ids=lambda p: p.name)
def test_the_shipped_grids_plan_every_cell(path, tmp_path):
    """Every grid under studies/ parses, and each cell's flags pass its recipe's parser and
    checks (as a SLURM array would plan them), so a grid cannot rot while no one runs it."""
    grid = load_grid(path, tmp_path / "s")
    planned = plan_cells(grid, threads=1, runs_here=False)
    assert len(planned) == len(grid.cells()) >= 2 and all(p.run is not None for p in planned)
    for algo in grid.algorithms.values():
        assert algo.standard in algo.settings


@pytest.mark.parametrize("text, message", BAD_GRIDS)
def test_bad_grid_is_refused_in_one_line_before_anything_runs(text, message, tmp_path, capsys):
    path = write_grid(tmp_path, text)
    on_slurm = "[slurm]" in text
    command, prog = (slurm_study, "slurm") if on_slurm else (study, "accelrl")
    flag = "--print-array" if on_slurm else "--dry-run"
    code, out, err = command(capsys, "run", str(path), "--dir", str(tmp_path / "s"), flag)
    assert code == 2, out + err
    assert message in err
    assert err.count("\n") == 1 and err.startswith(f"python -m {prog}.study: error: ")
    assert not (tmp_path / "s").exists()


def test_the_unknown_flag_line_names_the_cell_and_the_flag(tmp_path, capsys):
    bad = GRID.replace("--collector.steps-per-batch 64", "--collector.steps-per-btch 64")
    code, _, err = study(capsys, "run", str(write_grid(tmp_path, bad)), "--dry-run")
    assert code == 2
    assert "[algorithms.ppo] settings.small" in err and "--collector.steps-per-btch" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--frames", "100"], "--frames 100: give a budget >= 1 and a --dir of its own"),
        (["--frames", "100", "--dir", "runs/grid"], "is the study's own folder"),
        (["--threads", "0"], "--threads 0: must be >= 1"),
        (["--parallel", "0"], "--parallel 0: must be >= 1"),
        (["--only", "dqn/*"], "--only dqn/*: matches no cell"),
    ],
)
def test_bad_run_flags_are_refused_in_one_line(flags, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = study(capsys, "run", str(write_grid(tmp_path)), "--dry-run", *flags)
    assert code == 2 and err.count("\n") == 1 and message in err


# ---------------------------------------------------------------------------------------------
# cell states


def fake_checkpoint(run_dir: Path, frames: int) -> None:
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints" / f"ckpt_{frames:012d}.pt").write_bytes(b"")


def test_finished_cells_are_skipped_and_unfinished_ones_resume(tmp_path, capsys):
    grid = load_grid(write_grid(tmp_path), tmp_path / "s")
    small0, small1, big0, big1 = grid.cells()
    # finished: summary.json at the budget
    fake_checkpoint(small0.run_dir, 2048)
    (small0.run_dir / "summary.json").write_text(json.dumps({"frames": 2048}))
    # stopped after a checkpoint; and one whose summary is from a smaller budget
    fake_checkpoint(small1.run_dir, 1024)
    fake_checkpoint(big0.run_dir, 1024)
    (big0.run_dir / "summary.json").write_text(json.dumps({"frames": 1024}))
    assert [cell_state(c) for c in grid.cells()] == [FINISHED, RESUME, RESUME, NEW]
    planned = {p.cell.name: p for p in plan_cells(grid, threads=1, runs_here=True)}
    assert planned[small0.name].run is None
    for cell in (small1, big0):
        p = planned[cell.name]
        assert p.run.cfg.resume and "--resume" in p.args
        assert p.run.cfg.run_dir == str(cell.run_dir) and p.run.cfg.total_frames == 2048
    assert not planned[big1.name].run.cfg.resume and "--resume" not in planned[big1.name].args
    # a cell that a live run holds is left to it
    lock = FolderLock(small1.run_dir)
    lock.acquire()
    try:
        assert cell_state(small1) == RUNNING
        code, out, _ = study(capsys, "run", str(grid.path), "--dir", str(grid.dir), "--dry-run")
    finally:
        lock.release()
    assert code == 0
    assert "4 cells: 1 finished (skipped), 1 to resume, 1 new, 1 running elsewhere" in out
    assert f"finished {small0.name}\n" in out and f"running  {small1.name}\n" in out


def write_episodes(run_dir: Path, returns: list[float], step: int = 10, tail: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{(i + 1) * step},{r},5\n" for i, r in enumerate(returns))
    (run_dir / "episodes.csv").write_text("frames,return,length\n" + rows + tail)


def test_status_shows_each_cells_frames_and_last_100_return(tmp_path, capsys):
    grid = load_grid(write_grid(tmp_path), tmp_path / "s")
    small0, small1, big0, big1 = grid.cells()
    # finished: its summary's frames and last-100 return (the last 100 of 150 episodes)
    write_episodes(small0.run_dir, [0.0] * 50 + [2.0] * 100)
    (small0.run_dir / "summary.json").write_text(json.dumps({"frames": 2048}))
    # stopped with a checkpoint at 1024 frames: episodes after it are not counted (it resumes
    # from there), those before are (the last 100 up to 1024: 2.0 each)
    write_episodes(small1.run_dir, [1.0] * 2 + [2.0] * 100 + [9.0] * 50)
    fake_checkpoint(small1.run_dir, 1024)
    # running: the last whole metrics row's frames; a row being written is left out
    write_episodes(big0.run_dir, [3.0, 5.0], tail="300,100")
    (big0.run_dir / "metrics.csv").write_text("frames,time_s\n256,1.0\n512,2.0\n768,3")
    lock = FolderLock(big0.run_dir)
    lock.acquire()
    try:
        code, out, _ = study(capsys, "status", str(grid.path), "--dir", str(grid.dir))
    finally:
        lock.release()
    assert code == 0
    lines = {line.split()[1]: line.split() for line in out.splitlines() if "/" in line}
    assert lines[small0.name][0] == "finished" and lines[small0.name][2] == "2,048"
    assert lines[small0.name][-1] == "2.00"
    assert lines[small1.name][0] == "resume" and lines[small1.name][2] == "1,024"
    assert lines[small1.name][-1] == "2.00"
    assert lines[big0.name][0] == "running" and lines[big0.name][2] == "512"
    assert lines[big0.name][-1] == "4.00"
    assert lines[big1.name] == ["new", big1.name]
    assert "ppo/small: 2 cells: 1 finished, 1 to resume" in out
    assert "ppo/big: 2 cells: 1 running, 1 new" in out


def test_csv_tail_returns_only_whole_rows_wherever_the_read_starts(tmp_path):
    from accelrl.study.status import csv_tail

    path = tmp_path / "episodes.csv"
    rows = [[float(16 * (i + 1)), float(i % 7) - 2.5] for i in range(40)]
    lines = [f"{int(f)},{r},{i}\n" for i, (f, r) in enumerate(rows)]
    text = "frames,return,length\n" + "".join(lines)
    path.write_text(text + "656,12")  # a row being written
    assert csv_tail(path, ["frames", "return"], 1000, None) == rows
    for tail_bytes in range(1, len(text) + 10):  # every cut: no partial row, a suffix of the rows
        got = csv_tail(path, ["frames", "return"], 1000, tail_bytes)
        assert got == rows[len(rows) - len(got) :], tail_bytes
    assert csv_tail(path, ["frames", "return"], 3) == rows[-3:]
    assert csv_tail(path, ["frames", "score"], 3) == []
    assert csv_tail(tmp_path / "no", ["x"], 3) == []


def test_status_reads_a_long_files_end_only_and_counts_kept_cells(tmp_path, capsys, monkeypatch):
    from accelrl.study import status

    monkeypatch.setattr(status, "TAIL_BYTES", 200)  # the tail starts inside a row
    grid = load_grid(write_grid(tmp_path, GRID.replace("seeds = [0, 1]", "seeds = [0]")),
                     tmp_path / "s")  # fmt: skip
    small0, big0 = grid.cells()
    write_episodes(small0.run_dir, [1.0] * 300 + [7.0] * 30, tail="3310,1000")
    fake_checkpoint(small0.run_dir, 2048)
    (small0.run_dir / "summary.json").write_text(json.dumps({"frames": 2048}))
    kept = tmp_path / "kept"  # a cell kept finished elsewhere, its run folder gone
    write_episodes(kept / big0.name, [4.0] * 10)
    (kept / big0.name / "summary.json").write_text(json.dumps({"frames": 2048}))
    code, out, _ = study(capsys, "status", str(grid.path), "--dir", str(grid.dir), "--keep",
                         str(kept), "--only", "ppo/*")  # fmt: skip
    assert code == 0
    lines = {line.split()[1]: line.split() for line in out.splitlines() if "/" in line}
    assert lines[small0.name][-1] == "7.00"  # only whole rows of the end: the 30 last
    assert lines[big0.name][:3] == ["kept", big0.name, "2,048"] and lines[big0.name][-1] == "4.00"
    assert "ppo/big: 1 cells: 1 finished" in out
    code, _, err = study(capsys, "status", str(grid.path), "--dir", str(grid.dir), "--only", "x/*")
    assert code == 2 and "--only x/*: matches no cell" in err


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_status_into_a_closed_pipe_stops_quietly(tmp_path, unbuffered):
    # ``status | head -3``: once the reader has gone, the rest of the output is dropped, without
    # a traceback or (stdout buffered, as in a shell) the interpreter's "Exception ignored" on
    # its final flush.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(ROOT)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    grid = load_grid(write_grid(tmp_path), tmp_path / "s")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "accelrl.study", "status", str(grid.path), "--dir",
             str(grid.dir)],
            env=env, stdout=write_end,
            stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr


def test_the_runners_progress_lines_outlive_their_reader(tmp_path, monkeypatch):
    # The runner reports through _say: a reader that went away must not end the study (its
    # cells would run on unwatched); the lines go to /dev/null from then on.
    from accelrl.study import __main__ as cli

    class GonePipe:
        def __init__(self, fd: int):
            self.fd, self.gone = fd, True

        def write(self, text: str) -> int:
            if self.gone:
                raise BrokenPipeError(32, "Broken pipe")
            return len(text)

        def flush(self) -> None:
            pass

        def fileno(self) -> int:
            return self.fd

    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        pipe = GonePipe(fd)
        monkeypatch.setattr(sys, "stdout", pipe)
        cli._say("[1/2] start ...")  # must not raise
        assert os.path.samestat(os.fstat(fd), os.stat(os.devnull))
        pipe.gone = False
        cli._say("[2/2] start ...")
    finally:
        os.close(fd)


def test_print_array_lists_one_job_array_per_recipe_with_its_cells(tmp_path, capsys):
    text = GRID + '\n[algorithms.a2c]\nrecipe = "recipes.a2c_atari"\nframes = 1024\n'
    text += 'standard = "s"\nsettings = { s = "" }\n\n[slurm]\npartition = "cpu"\ntime = 30\n'
    grid = load_grid(write_grid(tmp_path, text), tmp_path / "s")
    finished = grid.cells()[0]
    finished.run_dir.mkdir(parents=True)
    (finished.run_dir / "summary.json").write_text(json.dumps({"frames": 2048}))
    code, out, err = slurm_study(
        capsys, "run", str(grid.path), "--dir", str(grid.dir), "--print-array"
    )
    assert code == 0, err
    scripts = out.split("#!/bin/bash")
    assert len(scripts) == 3  # the plan line, then one script per recipe
    a2c, ppo = ("\n".join(s.splitlines()) for s in scripts[1:])
    assert "#SBATCH --array=0-1%2" in a2c and "#SBATCH --job-name=accelrl-a2c_atari" in a2c
    assert "#SBATCH --array=0-2%3" in ppo and "#SBATCH --partition=cpu" in ppo
    assert "#SBATCH --time=30" in ppo
    # seed by seed: whole comparisons first
    assert f"array index 0: ppo/big/CartPole-v1/seed0 (new) -> {grid.dir}/ppo/big/" in ppo
    assert "array index 2: ppo/small/CartPole-v1/seed1 (new)" in ppo
    assert finished.name not in out.split("job array")[-1]
    assert sorted(p.name for p in grid.dir.iterdir()) == ["ppo"]  # printing writes nothing


def test_slurm_without_a_cluster_says_what_to_do_instead(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("slurm.study.shutil.which", lambda name: None)
    path = write_grid(tmp_path)
    code, _, err = slurm_study(capsys, "run", str(path), "--dir", str(tmp_path / "s"), "--slurm")
    assert code == 2 and err.count("\n") == 1
    assert "no SLURM cluster found (sbatch not on PATH)" in err and "--print-array" in err


@pytest.mark.parametrize("flag", ["--slurm", "--print-array"])
def test_job_arrays_without_slurm_study_name_the_command_that_runs_them(flag, tmp_path, capsys):
    code, out, err = study(capsys, "run", str(write_grid(tmp_path)), "--dir", str(tmp_path), flag)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{flag}: SLURM job arrays are run by python -m slurm.study" in err


# ---------------------------------------------------------------------------------------------
# the report


def write_run(
    run_dir: Path, episodes: list[tuple[int, float]], reached: int, s_per_frame: float = 0.01
) -> None:
    run_dir.mkdir(parents=True)
    with open(run_dir / "episodes.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["frames", "return", "length"])
        w.writerows([f, r, 10] for f, r in episodes)
    with open(run_dir / "metrics.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["frames", "time_s", "episodes", "return_mean100"])
        w.writerows([f, f * s_per_frame, 0, 0] for f in range(0, reached + 1, 100))


def test_window_score_takes_the_episodes_ending_in_the_window():
    x, r = np.array([10.0, 50, 90, 100, 130]), np.array([1.0, 2, 3, 5, 7])
    assert window_score(x, r, 100, 20) == 4.0  # 90 and 100; 130 is after the point
    assert window_score(x, r, 80, 20) == 2.0  # none in (60, 80]: the last one before
    assert np.isnan(window_score(x, r, 5, 20))


def test_report_scores_settings_relative_to_the_standard_with_intervals(tmp_path):
    budget = 10_000
    record = {
        "grid": "g.toml",
        "algorithms": {
            "dqn": {
                "recipe": "recipes.dqn_atari", "frames": budget, "standard": "b32",
                "flags": [], "settings": {"b32": [], "b512": ["--dqn.batch-size", "512"]},
                "games": ["G1", "G2"], "seeds": [0, 1, 2],
            }
        },
    }  # fmt: skip
    (tmp_path / "study.json").write_text(json.dumps(record))
    standard = {0: 10.0, 1: 12.0, 2: 14.0}
    for game, scale in (("G1", 1.0), ("G2", 2.0)):
        for seed in (0, 1, 2):
            # Episodes before the last 5% of the budget (return 0) must not count at 100%.
            early = [(f, 0.0) for f in range(500, 9_500, 500)]
            ours = [(9_600, 5.0 * scale), (9_900, 7.0 * scale)]  # mean 6 x scale
            theirs = [(9_700, standard[seed] * scale), (10_000, standard[seed] * scale)]
            reached = 9_000 if (game, seed) == ("G2", 2) else budget  # b512 still running
            write_run(tmp_path / f"dqn/b512/{game}/seed{seed}", early + ours, reached)
            write_run(tmp_path / f"dqn/b32/{game}/seed{seed}", early + theirs, budget)
    rows = report(tmp_path, fractions=(0.5, 1.0), reps=500, say=lambda _: None)
    full = {(r.setting, r.game): r for r in rows if r.fraction == 1.0}
    g1 = full["b512", "G1"]
    assert g1.seeds == 3 and g1.score == (6.0, 6.0, 6.0)
    point, low, high = g1.relative
    assert point == pytest.approx(0.5)  # 6 / mean(10, 12, 14)
    assert 6 / 14 <= low < 0.5 < high <= 6 / 10
    assert full["b512", "G2"].seeds == 2  # seed 2 has not reached the budget
    assert full["b512", "G2"].relative[0] == pytest.approx(12 / 22)
    both = full["b512", "all"]  # the seeds that reached it in every game
    assert both.seeds == 2 and both.relative[0] == pytest.approx((6 / 11 + 12 / 22) / 2)
    assert full["b32", "G1"].relative == (1.0, 1.0, 1.0)
    half = {(r.setting, r.game): r for r in rows if r.fraction == 0.5}
    assert half["b512", "G1"].score[0] == 0.0 and np.isnan(half["b512", "G1"].relative[0])
    out = tmp_path / "report"
    text = (out / "report.md").read_text()
    assert "| b512 | 10,000 (100%) | G1 | 3/3 | 6 [6, 6] | 0.5 [" in text
    assert "| b512 | 10,000 (100%) | G2 | 2/3 |" in text
    with open(out / "scores.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(rows) == 2 * 2 * 3  # settings x fractions x (games + all)
    assert sorted(p.name for p in out.glob("*.png")) == ["dqn-G1.png", "dqn-G2.png"]


def first_minutes_by_hand(episodes, target, s_per_frame):
    """The first episode end whose mean of the last 100 returns reaches ``target``, in minutes."""
    for i, (frames, _) in enumerate(episodes):
        last = [r for _, r in episodes[max(0, i - 99) : i + 1]]
        if sum(last) / len(last) >= target:
            return frames * s_per_frame / 60
    return math.inf


def test_the_race_against_a_yardstick_times_each_seed_to_its_final_score(tmp_path, capsys):
    budget = 10_000
    one = {"frames": budget, "flags": [], "games": ["G"], "seeds": [0, 1, 2]}
    record = {"grid": "g.toml", "algorithms": {
        "pqn": {**one, "recipe": "recipes.pqn_atari", "standard": "p32", "settings": {"p32": []}},
        "dqn": {**one, "recipe": "recipes.dqn_atari", "standard": "d", "settings": {"d": []}},
    }}  # fmt: skip
    (tmp_path / "study.json").write_text(json.dumps(record))
    ends = range(50, budget + 1, 50)  # 200 episodes
    # The yardstick rises, then falls: its final mean of 100 (3.1375) is first reached well
    # before its end, at 0.01 s a frame.
    dqn = [(f, i / 20 if i <= 150 else 0.0) for i, f in enumerate(ends, 1)]
    fast = [(f, 0.0 if i <= 100 else 20.0) for i, f in enumerate(ends, 1)]
    never = [(f, 1.0) for f in ends]
    pqn = {0: (fast, 0.001), 1: (never, 0.001), 2: (fast, 0.005)}  # seconds a frame
    for seed, (episodes, pace) in pqn.items():
        write_run(tmp_path / f"dqn/d/G/seed{seed}", dqn, budget)
        write_run(tmp_path / f"pqn/p32/G/seed{seed}", episodes, budget, pace)
    target = sum(r for _, r in dqn[-100:]) / 100
    theirs = first_minutes_by_hand(dqn, target, 0.01)
    assert theirs < budget * 0.01 / 60 / 1.5  # reached long before the yardstick's end
    ratios = [first_minutes_by_hand(e, target, pace) / theirs for e, pace in pqn.values()]
    assert ratios[1] == math.inf and 0 < ratios[0] < ratios[2] < 1

    code, out, err = study(capsys, "report", str(tmp_path), "--against", "dqn", "--reps", "200")
    assert code == 0, err
    races = list(csv.DictReader(open(tmp_path / "report" / "races.csv")))
    (race,) = races  # one game: no "all" row; the yardstick has no row of its own
    assert (race["algorithm"], race["setting"], race["seeds"], race["reached"]) == (
        "pqn", "p32", "3", "2")  # fmt: skip
    assert float(race["yardstick_final"]) == pytest.approx(target)
    assert float(race["yardstick_minutes"]) == pytest.approx(theirs)
    assert float(race["ratio"]) == pytest.approx(sorted(ratios)[1])  # the median seed
    assert float(race["ratio_high"]) == math.inf  # resamples of the seed that never reached it
    assert float(race["final"]) == pytest.approx((20 + 1 + 20) / 3)
    # Equal wall time: the PQN runs' ends (10 s, 10 s, 50 s), both scores then.
    dqn_at = [sum(r for _, r in dqn[: int(t / 0.01) // 50][-100:]) / min(100, int(t / 0.01) // 50)
              for t in (10, 10, 50)]  # fmt: skip
    assert float(race["yardstick_at_equal"]) == pytest.approx(sum(dqn_at) / 3)
    assert float(race["equal_minutes"]) == pytest.approx((10 + 10 + 50) / 3 / 60)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Against dqn (`d`): time to its final score" in text
    assert "| pqn / p32 | G | 3/3 | 2/3 |" in text
    code, _, err = study(capsys, "report", str(tmp_path), "--against", "c51")
    assert code == 2 and "--against c51: the study has pqn, dqn" in err


def test_report_of_some_algorithms_leaves_the_others_out(tmp_path, capsys):
    settings = {"s": [], "b": ["--x"]}
    one = {"recipe": "r", "frames": 1000, "standard": "s", "flags": [], "settings": settings,
           "games": ["G"], "seeds": [0]}  # fmt: skip
    record = {"grid": "g.toml", "algorithms": {"dqn": one, "ppo": one}}
    (tmp_path / "study.json").write_text(json.dumps(record))
    for algo in ("dqn", "ppo"):
        for setting in settings:
            write_run(tmp_path / f"{algo}/{setting}/G/seed0", [(900, 1.0), (1000, 2.0)], 1000)
    code, out, err = study(capsys, "report", str(tmp_path), "--algorithms", "ppo", "--reps", "50")
    assert code == 0, err
    report_dir = tmp_path / "report"
    text = (report_dir / "report.md").read_text()
    assert "## ppo" in text and "## dqn" not in text and "dqn/" not in text
    assert [p.name for p in report_dir.glob("*.png")] == ["ppo-G.png"]
    assert {row["algorithm"] for row in csv.DictReader(open(report_dir / "scores.csv"))} == {"ppo"}
    code, _, err = study(capsys, "report", str(tmp_path), "--algorithms", "dqn,c51")
    assert code == 2 and err.count("\n") == 1
    assert "--algorithms dqn,c51: the study has dqn, ppo" in err


def test_report_of_a_folder_without_a_study_is_one_line(tmp_path, capsys):
    code, _, err = study(capsys, "report", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "not a study folder" in err


# ---------------------------------------------------------------------------------------------
# for real


def test_tiny_grid_runs_locally_then_skips_then_reports(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_grid(tmp_path, GRID.replace("seeds = [0, 1]", "seeds = [0]"))
    code, out, err = study(capsys, "run", str(path), "--parallel", "2")
    assert code == 0, out + err
    assert "2 cell(s) run, 0 failed" in out
    study_dir = tmp_path / "runs" / "grid"
    for setting in ("small", "big"):
        summary = json.loads(
            (study_dir / f"ppo/{setting}/CartPole-v1/seed0/summary.json").read_text()
        )
        assert summary["frames"] == 2048
    code, out, _ = study(capsys, "run", str(path))
    assert code == 0 and "2 finished (skipped)" in out and "nothing to run" in out
    code, out, err = study(capsys, "report", str(study_dir), "--reps", "100")
    assert code == 0, err
    assert "| big | 2,048 (100%) | CartPole-v1 | 1/1 |" in out
    assert (study_dir / "report" / "ppo-CartPole-v1.png").stat().st_size > 10_000


def test_kept_cells_carry_a_study_to_a_folder_that_has_lost_its_runs(tmp_path, capsys):
    """``run --keep``: a finished cell is kept small (no checkpoints), a study folder that is
    gone (another machine, a wiped scratch space) continues from the kept folder alone, and the
    kept folder reports the same scores as the study folder did."""
    path = write_grid(tmp_path, GRID.replace("seeds = [0, 1]", "seeds = [0]"))
    study_dir, kept = tmp_path / "s", tmp_path / "kept"
    small = "ppo/small/CartPole-v1/seed0"
    code, out, err = study(capsys, "run", str(path), "--dir", str(study_dir), "--keep",
                           str(kept), "--only", "ppo/small/*")  # fmt: skip
    assert code == 0, out + err
    assert f"kept {small} in {kept}" in out
    files = sorted(f.name for f in (kept / small).iterdir())
    assert files == ["episodes.csv", "eval.csv", "metrics.csv", "summary.json"]
    with open(kept / small / "metrics.csv") as fh:
        assert next(csv.reader(fh)) == ["frames", "time_s"]
    code, _, err = study(capsys, "report", str(study_dir), "-o", str(tmp_path / "r1"))
    assert code == 0, err

    shutil.rmtree(study_dir)
    code, out, _ = study(capsys, "run", str(path), "--dir", str(study_dir), "--keep",
                         str(kept), "--dry-run")  # fmt: skip
    assert "2 cells: 1 finished (1 in the kept folder) (skipped), 0 to resume, 1 new" in out
    assert f"kept     {small}\n" in out
    code, out, err = study(capsys, "run", str(path), "--dir", str(study_dir), "--keep", str(kept))
    assert code == 0, out + err
    assert "1 cell(s) run, 0 failed" in out and "kept ppo/big/CartPole-v1/seed0" in out
    assert not (study_dir / small).exists()
    code, _, err = study(capsys, "report", str(kept), "-o", str(tmp_path / "r2"))
    assert code == 0, err

    def rows(folder: Path, setting: str) -> list[dict]:
        with open(folder / "scores.csv") as fh:
            return [r for r in csv.DictReader(fh) if r["setting"] == setting]

    assert rows(tmp_path / "r1", "small") == rows(tmp_path / "r2", "small")
    assert len(rows(tmp_path / "r2", "big")) == 3 and rows(tmp_path / "r2", "big")[-1]["score"]

    # A study with nothing left to run still keeps its finished cells in a new kept folder.
    code, out, _ = study(capsys, "run", str(path), "--dir", str(study_dir), "--keep",
                         str(tmp_path / "kept2"), "--only", "ppo/big/*")  # fmt: skip
    assert code == 0 and "nothing to run" in out and "1 finished cell(s)" in out
    assert (tmp_path / "kept2" / "ppo/big/CartPole-v1/seed0/summary.json").exists()


def test_pack_keeps_only_finished_cells_and_refuses_a_folder_inside_the_study(tmp_path, capsys):
    grid = load_grid(write_grid(tmp_path), tmp_path / "s")
    grid.write_record()
    done, stopped = grid.cells()[:2]
    for cell, frames in ((done, 2048), (stopped, 1024)):
        fake_checkpoint(cell.run_dir, frames)
        (cell.run_dir / "summary.json").write_text(json.dumps({"frames": frames}))
        (cell.run_dir / "episodes.csv").write_text("frames,return,length\n64,9.0,9\n128,12.5,12\n")
        rows = "".join(f"{f},{f / 100},0.5\n" for f in range(64, frames + 1, 64))
        (cell.run_dir / "metrics.csv").write_text("frames,time_s,loss\n" + rows)
    code, out, _ = study(capsys, "pack", str(grid.dir), "-o", str(tmp_path / "kept"))
    assert code == 0 and "1 finished cell(s) added" in out and done.name in out
    kept = tmp_path / "kept" / done.name
    assert (kept / "episodes.csv").read_text() == "frames,return\n64,9.0\n128,12.5\n"
    assert not (tmp_path / "kept" / stopped.name).exists()
    assert not (kept / "checkpoints").exists()
    code, out, _ = study(capsys, "pack", str(grid.dir), "-o", str(tmp_path / "kept"))
    assert "0 finished cell(s) added" in out  # already kept
    code, _, err = study(capsys, "pack", str(grid.dir), "-o", str(grid.dir / "kept"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "inside the study folder" in err


def test_a_grid_that_grew_or_shrank_keeps_every_cell_of_the_folder_in_its_record(tmp_path):
    """The record is merged, not replaced: a run of an older or newer version of the grid into
    the same study or kept folder leaves every setting, game and seed there in the report."""
    first = load_grid(write_grid(tmp_path), tmp_path / "s")
    first.write_record()
    grown = GRID.replace("seeds = [0, 1]", "seeds = [0, 2]").replace(
        'big = "--collector.steps-per-batch 256 --env.num-envs 16"',
        'huge = "--collector.steps-per-batch 512 --env.num-envs 32"',
    )
    second = load_grid(write_grid(tmp_path, grown, "grown.toml"), tmp_path / "s")
    second.write_record()
    record = json.loads((tmp_path / "s" / "study.json").read_text())
    ppo = record["algorithms"]["ppo"]
    assert list(ppo["settings"]) == ["small", "huge", "big"]
    assert ppo["settings"]["big"] == ["--collector.steps-per-batch", "256", "--env.num-envs", "16"]
    assert ppo["seeds"] == [0, 2, 1] and record["grid"].endswith("grown.toml")
    first.write_record()  # the older grid again: still every setting
    assert set(json.loads((tmp_path / "s" / "study.json").read_text())["algorithms"]["ppo"][
        "settings"]) == {"small", "big", "huge"}  # fmt: skip


@pytest.mark.parametrize(
    "change, message",
    [
        (('small = "--collector.steps-per-batch 64"', 'small = "--collector.steps-per-batch 32"'),
         "setting ppo/small: flags '--collector.steps-per-batch 32' in the grid, but its cells in"),
        (("frames = 2048", "frames = 4096"), "algorithm ppo: frames 4096 in the grid, but its"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("folder", ["dir", "keep"])
def test_a_setting_whose_flags_changed_under_its_name_is_refused(
    change, message, folder, tmp_path, capsys
):
    first = load_grid(write_grid(tmp_path), tmp_path / "s")
    where = {"dir": tmp_path / "s", "keep": tmp_path / "kept"}[folder]
    from accelrl.study.grid import write_record

    write_record(where, first.record())
    changed = write_grid(tmp_path, GRID.replace(*change), "changed.toml")
    code, out, err = study(capsys, "run", str(changed), "--dir", str(tmp_path / "s"), "--keep",
                           str(tmp_path / "kept"), "--dry-run")  # fmt: skip
    assert code == 2 and err.count("\n") == 1, out + err
    assert message in err and str(where) in err
    assert "study" not in out  # refused before the plan


def test_kept_metrics_are_thinned_evenly_and_keep_the_last_row():
    rows = [[str(f), str(f / 10)] for f in range(0, 100_001, 16)]
    thinned = thin(rows, 100_000, keep=100)
    assert 95 <= len(thinned) <= 102 and thinned[0] == rows[0] and thinned[-1] == rows[-1]
    steps = [float(r[0]) // 1000 for r in thinned[:-1]]
    assert steps == sorted(set(steps))  # one row per 1,000 frames


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_a_stop_leaves_every_cell_a_checkpoint_and_the_rerun_resumes(how, tmp_path):
    # ctrl-c: a terminal's Ctrl-C reaches the whole process group (the study, submitit's
    # controllers, the runs), and the controllers must not kill the runs before they checkpoint.
    # kill: SIGTERM to the study alone (one started in the background), which passes it on.
    # No periodic checkpoint within the test: the one found must come from the stop. Batches
    # of a few tenths of a second: a controller that passed on its own SIGINT would reach the
    # run mid-batch, before its checkpoint.
    text = (
        GRID.replace("frames = 2048", "frames = 50_000_000")
        .replace("--log.checkpoint-every-frames 1024", "--log.checkpoint-every-frames 50_000_000")
        .replace("steps-per-batch 64", "steps-per-batch 8192 --env.num-envs 16")
        .replace("steps-per-batch 256", "steps-per-batch 16384")
    )
    path = write_grid(tmp_path, text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "accelrl.study", "run", str(path), "--dir", str(tmp_path / "s")]
    cmd += ["--parallel", "2"]
    # Seed 1's cells wait in the queue (seed by seed): a stop must not wait for them either.
    proc = subprocess.Popen(
        cmd,
        env=env,
        preexec_fn=os.setpgrp,  # its own process group, as a terminal gives a command
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = [tmp_path / "s" / f"ppo/{s}/CartPole-v1/seed0/metrics.csv" for s in ("small", "big")]
    sig = signal.SIGINT if how == "ctrl-c" else signal.SIGTERM
    try:
        deadline = time.monotonic() + 120
        while not all(m.is_file() and m.stat().st_size > 200 for m in metrics):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.5)
        if how == "ctrl-c":
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the study did not stop: end it and its cells
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + sig, out
    assert "stopping 2 running cell(s)" in out and "Resume: python -m accelrl.study run" in out
    assert "stopped; 2 cell(s) not started" in out, out
    # Each stopped cell is reported as stopped with its checkpoint, not as failed.
    assert out.count("stopped ppo/") == 2 and "FAILED" not in out, out
    for m in metrics:
        assert list((m.parent / "checkpoints").glob("ckpt_*.pt")), out
        assert not (m.parent / "summary.json").exists()
    plan = subprocess.run(cmd + ["--dry-run"], env=env, capture_output=True, text=True)
    assert "4 cells: 0 finished (skipped), 2 to resume, 2 new" in plan.stdout, plan.stderr


@pytest.mark.slurm
@pytest.mark.slow  # 10-30 s: its jobs queue behind any others on the test cluster
def test_slurm_runs_the_grid_as_a_job_array_and_a_rerun_finds_nothing_to_do(tmp_path, capsys):
    text = GRID.replace("seeds = [0, 1]", "seeds = [0]") + "[slurm]\ntime = 5\ncpus_per_task = 1\n"
    path, study_dir = write_grid(tmp_path, text), tmp_path / "s"
    code, out, err = slurm_study(capsys, "run", str(path), "--dir", str(study_dir), "--slurm")
    assert code == 0, out + err
    jobs = [line.split()[2].rstrip(":") for line in out.splitlines() if line.startswith("# job ")]
    assert [j.split("_")[1] for j in jobs] == ["0", "1"] and len(
        {j.split("_")[0] for j in jobs}
    ) == 1
    summaries = [study_dir / f"ppo/{s}/CartPole-v1/seed0/summary.json" for s in ("small", "big")]
    deadline = time.monotonic() + 300
    while not all(p.is_file() for p in summaries):
        assert time.monotonic() < deadline, f"no summaries; logs in {study_dir / 'slurm_logs'}"
        time.sleep(2)
    assert all(json.loads(p.read_text())["frames"] == 2048 for p in summaries)
    code, out, _ = slurm_study(capsys, "run", str(path), "--dir", str(study_dir), "--slurm")
    assert code == 0 and "2 finished (skipped)" in out and "nothing to run" in out
