"""The run folder as a record: one live writer (an OS lock), resumes that refuse changes to what
a run learns and record the others, repairs of damaged files that lose nothing, standard JSON,
and the code version that wrote it. Tiny CartPole runs in this process (the recipe's command
line, as ``tests/test_bad_input.py``), plus one pair of real processes racing for a folder."""

from __future__ import annotations

from pathlib import Path

from accelrl.logging import RunLogger

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
