"""The learning-parity benchmark's plumbing: the CartPole table runs both implementations with
the same settings, the plain Atari loop records whole-game scores, and ``compare`` reads run
folders of either kind. (The learning figures themselves are in the README and docs/results.)"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from benchmarks import learning, learning_cartpole


def test_recipe_config_carries_every_plain_setting():
    for algo in learning_cartpole.SETTINGS:
        s = learning_cartpole.plain_settings(algo)
        cfg = learning_cartpole.recipe_config(algo, s, seed=3, run_dir="unused")
        assert cfg.seed == 3 and cfg.total_frames == s.total_steps
        assert cfg.env.num_envs == s.num_envs and tuple(cfg.model.mlp_hidden) == tuple(s.hidden)
        if learning_cartpole.SETTINGS[algo][0] == "dqn":
            d = cfg.dqn
            assert (d.lr, d.batch_size, d.training_intensity) == (
                s.lr, s.batch_size, s.training_intensity)  # fmt: skip
            assert (d.double, d.dueling, d.n_step, d.prioritized, d.distributional) == (
                s.double, s.dueling, s.n_step, s.prioritized, s.distributional)  # fmt: skip
            assert d.target_update_interval == s.target_update_interval
            assert cfg.collector.steps_per_batch == s.steps_per_batch


@pytest.mark.slow
def test_cartpole_table_quick(tmp_path, capsys):
    out = tmp_path / "table.json"
    learning_cartpole.main(["--quick", "--algos", "dqn", "--seeds", "0", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert {r["impl"] for r in rows} == {"plain", "accelrl"}
    assert all(r["episodes"] > 0 and np.isfinite(r["last100"]) for r in rows), rows
    assert "mean over seeds" in capsys.readouterr().out


def test_plain_atari_loop_records_whole_games(tmp_path):
    learning.run_plain_atari("ppo", "Pong", 4 * 1024 * 2, seed=0, run_dir=tmp_path)
    with open(tmp_path / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["frames"]) for r in rows] == [4096, 8192]
    # Pong games last thousands of steps: none ends in 2k agent steps, and none is invented.
    with open(tmp_path / "episodes.csv") as fh:
        assert list(csv.DictReader(fh)) == []


def test_compare_reads_both_kinds_and_writes_curves(tmp_path):
    for name, offset in (("a", 0.0), ("b", 5.0)):
        d = tmp_path / name
        d.mkdir()
        with open(d / "episodes.csv", "w") as fh:
            fh.write("frames,return,length\n")
            for i in range(150):
                fh.write(f"{(i + 1) * 100},{i + offset},10\n")
        with open(d / "metrics.csv", "w") as fh:
            fh.write("frames,time_s,episodes,return_mean100\n15000,30.0,150,0\n")
    rows = learning.compare([tmp_path / "a", tmp_path / "b"], tmp_path / "out" / "cmp")
    # Last 100 of 0..149 is 50..149: mean 99.5; with the offset 104.5.
    assert [r["last100_mean"] for r in rows] == [99.5, 104.5]
    assert (tmp_path / "out" / "cmp.png").stat().st_size > 0
    with open(tmp_path / "out" / "cmp.csv") as fh:
        assert len(fh.read().splitlines()) == 1 + 300
