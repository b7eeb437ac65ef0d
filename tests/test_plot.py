import subprocess
import sys
from pathlib import Path

import pytest

from accelrl.run.logger import RunLogger
from accelrl.tools.plot import PlotError, plot_runs


def fake_run(run_dir: Path, scale: float) -> None:
    lg = RunLogger(run_dir, total_frames=4000, tensorboard=False, progress=False)
    for i in range(1, 11):
        frames = 400 * i
        lg.episodes([scale * i, scale * i + 1.0], [100, 120], frames=frames)
        lg.log(frames, {"loss/policy": 0.1})
    lg.close()


def test_plot_two_runs_png(tmp_path: Path) -> None:
    a, b = tmp_path / "run_a", tmp_path / "run_b"
    fake_run(a, 1.0)
    fake_run(b, 2.0)
    out = plot_runs([a, b], tmp_path / "sub" / "cmp.png", smooth=3)
    data = out.read_bytes()
    assert len(data) > 5000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_run_without_metrics_and_bad_smooth(tmp_path: Path) -> None:
    fake_run(tmp_path, 1.0)
    (tmp_path / "metrics.csv").unlink()
    assert plot_runs([tmp_path], tmp_path / "r.png").stat().st_size > 0
    with pytest.raises(PlotError):
        plot_runs([tmp_path], tmp_path / "r.png", smooth=0)


def test_cli_default_output_and_missing_episodes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fake_run(run, 1.0)
    cmd = [sys.executable, "-m", "accelrl.tools.plot"]
    ok = subprocess.run([*cmd, str(run), "--smooth", "2"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert (run / "returns.png").stat().st_size > 0
    bad = subprocess.run([*cmd, str(run), str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "episodes.csv" in lines[0] and str(tmp_path) in lines[0]
