"""A short Atari PPO run writes every run-dir artifact, resumes, and plots."""

import csv
import json
import subprocess
import sys

import pytest

from accelrl.run.checkpoint import list_checkpoints
from recipes.ppo_atari import Config, train


def small_pong(run_dir, total_frames: int, resume: bool = False) -> Config:
    cfg = Config(total_frames=total_frames, run_dir=str(run_dir), resume=resume)
    cfg.env.num_envs = 4
    cfg.collector.steps_per_batch = 256
    cfg.ppo.minibatches = 2
    cfg.ppo.epochs = 1
    cfg.log.progress = False
    cfg.log.eval_episodes = 1
    cfg.log.eval_every_frames = 4096
    cfg.log.checkpoint_every_frames = 4096
    cfg.log.keep_checkpoints = 2
    return cfg


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_pong_run_writes_artifacts_and_resumes(tmp_path):
    run = tmp_path / "pong"
    first = train(small_pong(run, 8192))
    assert first["frames"] == 8192 and first["updates"] == 8
    for name in ["config.json", "metrics.csv", "episodes.csv", "eval.csv", "summary.json"]:
        assert (run / name).is_file(), name
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert json.loads((run / "config.json").read_text())["algo"] == "ppo"
    assert [p.name for p in list_checkpoints(run)] == [
        "ckpt_000000004096.pt",
        "ckpt_000000008192.pt",
    ]
    rows = read_rows(run / "metrics.csv")
    assert [int(r["frames"]) for r in rows] == [1024 * i for i in range(1, 9)]
    for column in [
        "loss/policy",
        "loss/value",
        "train/kl_approx",
        "train/clip_fraction",
        "train/entropy",
        "train/explained_variance",
        "train/lr",
        "perf/fps",
        "perf/collect_s",
        "perf/update_s",
    ]:
        assert rows[-1][column] != "", column
    evals = read_rows(run / "eval.csv")
    assert {"eval/greedy_return", "eval/sampled_return"} <= set(evals[0])

    second = train(small_pong(run, 12288, resume=True))
    assert second["frames"] == 12288 and second["updates"] == 12
    frames = [int(r["frames"]) for r in read_rows(run / "metrics.csv")]
    assert frames == [1024 * i for i in range(1, 13)], "no duplicated or missing rows"
    # The schedule is a function of frames / total_frames, so the resumed run (with a longer
    # total) continues from the restored frame count, not from zero.
    for row in read_rows(run / "metrics.csv"):
        f = int(row["frames"])
        total = 8192 if f <= 8192 else 12288
        assert float(row["train/lr"]) == pytest.approx(2.5e-4 * (1 - f / total), abs=1e-9)

    out = tmp_path / "curve.png"
    subprocess.run(
        [sys.executable, "-m", "accelrl.tools.plot", str(run), "-o", str(out)],
        check=True,
        timeout=120,
    )
    assert out.stat().st_size > 0


def test_refuses_to_overwrite_a_run_with_checkpoints(tmp_path):
    from accelrl.run.checkpoint import save_checkpoint
    from accelrl.validate import ConfigError

    save_checkpoint(tmp_path, {"frames": 0}, 0)
    with pytest.raises(ConfigError, match="--resume"):
        train(small_pong(tmp_path, 1024))


@pytest.mark.slow
def test_gym_backend_and_collector_workers_train(tmp_path):
    cfg = small_pong(tmp_path / "gym", 512)
    cfg.env.backend = "gym"
    cfg.env.num_envs = 2
    cfg.collector.steps_per_batch = 64
    cfg.log.eval_episodes = 0
    assert train(cfg)["frames"] == 512

    cfg = small_pong(tmp_path / "workers", 1024)
    cfg.env.num_envs = 2
    cfg.collector.num_workers = 2
    cfg.collector.steps_per_batch = 128
    cfg.log.eval_episodes = 0
    summary = train(cfg)
    assert summary["frames"] == 1024 and summary["updates"] == 2


@pytest.mark.slow
def test_a2c_and_dqn_atari_runs_write_run_dirs_and_resume(tmp_path):
    from accelrl.algos.dqn import DQNConfig
    from recipes import a2c_atari, dqn_atari

    a2c = a2c_atari.Config(total_frames=1280, run_dir=str(tmp_path / "a2c"))
    a2c.env.num_envs = 4
    a2c.collector.steps_per_batch = 20
    dqn = dqn_atari.Config(total_frames=1024, run_dir=str(tmp_path / "dqn"))
    dqn.env.num_envs = 4
    dqn.collector.steps_per_batch = 16
    dqn.dqn = DQNConfig(batch_size=16, learning_starts_frames=256, replay_capacity=1024)
    for module, cfg in [(a2c_atari, a2c), (dqn_atari, dqn)]:
        cfg.log.progress = False
        cfg.log.eval_episodes = 0
        cfg.log.checkpoint_every_frames = 512
        first = module.train(cfg)
        run = tmp_path / first["run_dir"].rsplit("/", 1)[-1]
        for name in ["config.json", "metrics.csv", "episodes.csv", "summary.json"]:
            assert (run / name).is_file(), (module.__name__, name)
        cfg.total_frames += 8 * cfg.collector.steps_per_batch * cfg.env.frameskip
        cfg.resume = True
        second = module.train(cfg)
        assert second["frames"] == cfg.total_frames, module.__name__
        frames = [int(r["frames"]) for r in read_rows(run / "metrics.csv")]
        assert frames == sorted(set(frames)), "no duplicated rows after resume"
