import csv
import io
import math
from pathlib import Path

import pytest
import torch

from accelrl.run.console import LineStream
from accelrl.run.logger import RunLogger


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def make(run_dir: Path, **kw) -> RunLogger:
    kw = {"total_frames": 10_000, "tensorboard": False, "progress": False, **kw}
    return RunLogger(run_dir, **kw)


def test_csv_rows_columns_and_flush(tmp_path: Path) -> None:
    run = tmp_path / "run"
    lg = make(run)
    lg.episodes(torch.tensor([1.0, 3.0]), torch.tensor([10, 30]), frames=400)
    lg.log(400, {"loss/value": 0.5, "loss/policy": torch.tensor(0.25)}, step=7)
    lg.episodes([5.0], [50], frames=800)
    with pytest.warns(UserWarning, match="new/key"):
        lg.log(800, {"loss/value": 0.1, "new/key": 1.0})
    # Read before close: rows must already be on disk for a SIGKILL not to lose them.
    rows = read_csv(run / "metrics.csv")
    with open(run / "metrics.csv") as fh:
        header = fh.readline().strip().split(",")
    assert header == [
        "frames", "time_s", "episodes", "return_mean100", "loss/policy", "loss/value", "step",
    ]  # fmt: skip
    assert [r["frames"] for r in rows] == ["400", "800"]
    assert rows[0]["episodes"] == "2" and float(rows[0]["return_mean100"]) == 2.0
    assert rows[0]["loss/policy"] == "0.25" and rows[0]["step"] == "7"
    assert float(rows[1]["return_mean100"]) == 3.0 and rows[1]["step"] == ""
    assert float(rows[1]["time_s"]) >= float(rows[0]["time_s"]) >= 0
    eps = read_csv(run / "episodes.csv")
    assert [(e["frames"], e["return"], e["length"]) for e in eps] == [
        ("400", "1", "10"),
        ("400", "3", "30"),
        ("800", "5", "50"),
    ]
    assert lg.episodes_seen == 3 and lg.mean_return(2) == 4.0
    lg.close()
    lg.close()


def test_mean_return_empty_and_window(tmp_path: Path) -> None:
    lg = make(tmp_path)
    assert math.isnan(lg.mean_return())
    lg.episodes(list(range(150)), [1] * 150, frames=10)
    assert lg.mean_return() == sum(range(50, 150)) / 100
    with pytest.raises(ValueError):
        lg.mean_return(101)
    with pytest.raises(ValueError, match="lengths"):
        lg.episodes([1.0], [1, 2], frames=10)
    lg.close()


def test_resume_truncates_and_continues_without_duplicates(tmp_path: Path) -> None:
    run = tmp_path / "run"
    lg = make(run)
    for f in (100, 200):
        lg.episodes([float(f)], [f], frames=f)
        lg.log(f, {"x": f})
    lg.eval(200, {"eval/greedy_return": 1.5})
    state = lg.state_dict()
    # Written after the checkpoint, then the process is killed mid-row.
    for f in (300, 400):
        lg.episodes([float(f)], [f], frames=f)
        lg.log(f, {"x": f})
    lg.eval(400, {"eval/greedy_return": 2.5})
    lg.close()
    with open(run / "metrics.csv", "a") as fh:
        fh.write("500,1.2")  # torn last line

    lg2 = make(run, start_frames=state["frames"])
    lg2.load_state_dict(state)
    assert [r["frames"] for r in read_csv(run / "metrics.csv")] == ["100", "200"]
    assert [r["frames"] for r in read_csv(run / "episodes.csv")] == ["100", "200"]
    assert [r["frames"] for r in read_csv(run / "eval.csv")] == ["200"]
    assert lg2.episodes_seen == 2 and lg2.mean_return() == 150.0
    lg2.episodes([300.0], [300], frames=300)
    lg2.log(300, {"x": 300})
    lg2.close()
    rows = read_csv(run / "metrics.csv")
    assert [r["frames"] for r in rows] == ["100", "200", "300"]
    assert [r["episodes"] for r in rows] == ["1", "2", "3"]
    # Wall time continues from the checkpoint rather than restarting at 0.
    assert float(rows[2]["time_s"]) >= state["elapsed_s"]
    assert [r["frames"] for r in read_csv(run / "episodes.csv")] == ["100", "200", "300"]


def test_fresh_run_in_old_folder_drops_old_rows(tmp_path: Path) -> None:
    lg = make(tmp_path)
    lg.log(100, {"x": 1})
    lg.close()
    lg = make(tmp_path)
    lg.log(50, {"x": 2})
    lg.close()
    assert [r["frames"] for r in read_csv(tmp_path / "metrics.csv")] == ["50"]


def test_tensorboard_and_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lg = RunLogger(tmp_path, total_frames=1000, start_frames=0, tensorboard=True, progress=True)
    lg.episodes([2.0], [5], frames=100)
    lg.log(100, {"perf/fps": 10.0})
    lg.eval(100, {"eval/greedy_return": 3.0})
    assert lg._bar is not None and lg._bar.n == 100
    lg.close()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    err = capsys.readouterr().err
    assert "frames" in err and "\r" not in err  # stderr is not a TTY under pytest


def test_line_stream_turns_redraws_into_lines() -> None:
    buf = io.StringIO()
    s = LineStream(buf)
    s.write("\r 10%|#   | 100/1000 ")
    s.write("\n")
    s.write("\r 20%|##  | 200/1000")
    assert buf.getvalue() == " 10%|#   | 100/1000\n 20%|##  | 200/1000\n"


def test_line_stream_drops_cursor_moves_of_stacked_bars() -> None:
    buf = io.StringIO()
    LineStream(buf).write("\x1b[A\r evaluation episodes 1/8: 2.0kframes\x1b[A")
    assert buf.getvalue() == " evaluation episodes 1/8: 2.0kframes\n"


def test_side_bar_counts_frames_and_parts_then_goes(tmp_path: Path, capsys) -> None:
    quiet = make(tmp_path / "quiet")
    with quiet.side_bar("evaluation episodes", 8) as tick:
        assert tick is None  # no progress bar, no side bar
    lg = RunLogger(tmp_path, total_frames=1000, tensorboard=False, progress=True)
    with lg.side_bar("evaluation episodes", 8) as tick:
        tick(4, 0)
        tick(4, 3)
    lg.close()
    err = capsys.readouterr().err
    assert "evaluation episodes 3/8: 8.00frames" in err
