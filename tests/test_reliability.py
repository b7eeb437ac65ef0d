"""Faults during a run: non-finite losses, a full disk at checkpoint time, SIGKILL at random
points (resume must continue exactly), a dead collector worker."""

import math
from pathlib import Path

import pytest
import torch

import accelrl.algos.ppo as ppo_module
from accelrl.checkpoint import list_checkpoints, load_latest
from accelrl.cli import run_recipe
from recipes import ppo_atari

REPO = Path(__file__).resolve().parents[1]
CARTPOLE = [
    "--env.game", "CartPole-v1", "--env.num-envs", "4", "--collector.frames-per-batch", "64",
    "--ppo.minibatches", "2", "--ppo.epochs", "2", "--log.eval-episodes", "0",
    "--log.no-tensorboard", "--log.no-progress", "--log.checkpoint-every-frames", "256",
]  # fmt: skip


def poison_loss(monkeypatch, from_call: int) -> None:
    """Make PPO's total loss NaN from the ``from_call``-th minibatch on."""
    real = ppo_module.total_loss
    calls = {"n": 0}

    def total_loss(out):
        calls["n"] += 1
        loss = real(out)
        return loss * float("nan") if calls["n"] >= from_call else loss

    monkeypatch.setattr(ppo_module, "total_loss", total_loss)


def finite_weights(state: dict) -> bool:
    tensors = [
        v
        for v in state["components"]["ppo"]["loss"].values()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    ]
    return bool(tensors) and all(torch.isfinite(t).all() for t in tensors)


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    # 2 epochs x 2 minibatches = 4 loss calls per update: NaN appears in update 11 (640 frames).
    poison_loss(monkeypatch, from_call=41)
    argv = [*CARTPOLE, "--total-frames", "2048", "--run-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        run_recipe(ppo_atari.Config, ppo_atari.train, description="", argv=argv)
    assert stop.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "loss is nan" in err and "at 704 frames, update 11" in err, err
    assert "ckpt_000000000512.pt" in err
    state, path = load_latest(tmp_path)
    assert path.name == "ckpt_000000000512.pt" and finite_weights(state)


def test_nan_loss_can_be_skipped_and_counted(tmp_path, monkeypatch, capsys):
    poison_loss(monkeypatch, from_call=41)
    argv = [*CARTPOLE, "--total-frames", "1024", "--run-dir", str(tmp_path), "--on-nonfinite",
            "skip"]  # fmt: skip
    summary = run_recipe(ppo_atari.Config, ppo_atari.train, description="", argv=argv)
    assert summary["frames"] == 1024 and math.isfinite(summary["weights_checksum"])
    last = (tmp_path / "metrics.csv").read_text().splitlines()
    column = last[0].split(",").index("train/skipped_steps")
    assert int(float(last[-1].split(",")[column])) == 24  # updates 11-16, 4 steps each
    state, _ = load_latest(tmp_path)
    assert finite_weights(state)


def test_full_disk_at_checkpoint_reports_and_keeps_the_previous(tmp_path, monkeypatch, capsys):
    import accelrl.checkpoint as ckpt

    real_save = torch.save
    calls = {"n": 0}

    def save(obj, f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            f.write(b"partial")
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(ckpt.torch, "save", save)
    argv = [*CARTPOLE, "--total-frames", "2048", "--run-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        run_recipe(ppo_atari.Config, ppo_atari.train, description="", argv=argv)
    assert stop.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "No space left on device" in err and "ckpt_000000000512.pt" in err, err
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["ckpt_000000000256.pt"], names
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.suffix != ".pt"]
