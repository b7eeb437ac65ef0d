"""Bad configs fail before any worker starts, with one line naming field, value and fix."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from accelrl.validate import ConfigError
from recipes.ppo_atari import Config, train

ROOT = Path(__file__).resolve().parents[1]


def cfg_with(**changes) -> Config:
    # Small and quiet, so a check that wrongly passes fails the test quickly instead of training
    # for 10M frames.
    cfg = Config(total_frames=1024)
    cfg.log.progress = False
    cfg.log.eval_episodes = 0
    for dotted, value in changes.items():
        *path, name = dotted.split("__")
        target = cfg
        for part in path:
            target = getattr(target, part)
        assert hasattr(target, name), dotted
        setattr(target, name, value)
    return cfg


BAD = [
    ({"env__game": "Pongg"}, "env.game", "Pongg"),
    ({"env__num_envs": 0}, "env.num-envs", "0"),
    ({"env__num_envs": -3}, "env.num-envs", "-3"),
    ({"env__backend": "envpool"}, "env.backend", "envpool"),
    ({"env__sticky_actions": 1.5}, "env.sticky-actions", "1.5"),
    ({"env__async_batch_size": 8}, "env.async-batch-size", "8"),
    ({"env__frameskip": 0}, "env.frameskip", "0"),
    ({"env__async_batch_size": 4}, "env.async-batch-size", "4"),
    ({"collector__steps_per_batch": 1001}, "collector.steps-per-batch", "1001"),
    ({"collector__num_workers": -1}, "collector.num-workers", "-1"),
    ({"ppo__lr": -1e-3}, "ppo.lr", "-0.001"),
    ({"ppo__minibatches": 3}, "ppo.minibatches", "3"),
    ({"ppo__gamma": 1.5}, "ppo.gamma", "1.5"),
    ({"ppo__epochs": 0}, "ppo.epochs", "0"),
    ({"total_frames": 0}, "total-frames", "0"),
    ({"device": "tpu"}, "device", "tpu"),
    ({"log__keep_checkpoints": 0}, "log.keep-checkpoints", "0"),
]


@pytest.mark.parametrize("changes,field,value", BAD, ids=[b[1] for b in BAD])
def test_bad_value_raises_config_error_naming_it(changes, field, value, tmp_path):
    with pytest.raises(ConfigError) as info:
        train(cfg_with(run_dir=str(tmp_path / "run"), **changes))
    message = str(info.value)
    assert f"--{field}=" in message and value in message
    assert "\n" not in message


def test_cuda_requested_without_cuda_is_refused():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        train(cfg_with(device="cuda", run_dir=str(Path("/nonexistent/never-created"))))


def test_run_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "not_a_dir"
    path.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        train(cfg_with(run_dir=str(path)))


def test_resume_without_checkpoint_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no checkpoint"):
        train(cfg_with(run_dir=str(tmp_path / "empty"), resume=True))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "ppo_atari.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_bad_value_exits_2_with_one_line():
    proc = run_cli("--env.game", "Pongg", "--log.no-progress")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "--env.game='Pongg'" in lines[0] and "pong" in lines[0]
    assert "Traceback" not in proc.stderr


def test_cli_help_shows_every_knob():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for flag in [
        "--env.game",
        "--env.num-envs",
        "--env.backend",
        "--total-frames",
        "--device",
        "--seed",
        "--run-dir",
        "--resume",
        "--collector.num-workers",
        "--collector.steps-per-batch",
        "--ppo.lr",
        "--ppo.clip-epsilon",
        "--threads.torch-threads",
        "--log.checkpoint-every-frames",
    ]:
        assert flag in proc.stdout, flag


def test_config_is_a_plain_dataclass():
    assert dataclasses.is_dataclass(Config)
    assert Config().collector.steps_per_batch == Config().env.num_envs * 128
