"""Experiment trackers (TorchRL's W&B and MLflow loggers), offline: a run logs its metrics to
both, keeps their run ids in the run folder, and ``--resume`` continues the same W&B run and
the same MLflow run instead of starting new ones; a tracker whose package is missing is a
one-line error before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cartpole_flags

REPO = Path(__file__).resolve().parents[1]
CARTPOLE = cartpole_flags(
    "--ppo.minibatches", "2", "--ppo.epochs", "1", "--log.checkpoint-every-frames", "256",
    eval_episodes=1,
)  # fmt: skip


def run(run_dir: Path, frames: int, *extra: str, env: dict | None = None):
    cmd = [sys.executable, str(REPO / "recipes" / "ppo_atari.py"), *CARTPOLE,
           "--total-frames", str(frames), "--run-dir", str(run_dir), *extra]  # fmt: skip
    full_env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", **(env or {})}
    full_env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=full_env)  # fmt: skip


@pytest.mark.slow
def test_wandb_and_mlflow_log_and_resume_into_the_same_runs(tmp_path):
    pytest.importorskip("wandb")
    mlflow = pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    folder = tmp_path / "run"
    first = run(folder, 512, "--log.trackers", "wandb", "mlflow")
    assert first.returncode == 0, first.stderr[-2000:]
    ids = json.loads((folder / "trackers.json").read_text())
    second = run(folder, 1024, "--log.trackers", "wandb", "mlflow", "--resume")
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads((folder / "trackers.json").read_text()) == ids

    # W&B (offline): one offline run folder per process, both under the run's id.
    offline = sorted(p.name for p in (folder / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(name.endswith(ids["wandb"]) for name in offline)

    # MLflow: one run in the store, with the metrics of both processes up to 1024 frames.
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "accelrl"]
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [ids["mlflow"]]
    history = client.get_metric_history(ids["mlflow"], "episode/return_mean100")
    assert max(m.step for m in history) == 1024 and min(m.step for m in history) <= 512
    assert {m.step for m in client.get_metric_history(ids["mlflow"], "eval/greedy_return")} == {
        512,
        1024,
    }
    assert runs[0].data.params["env.game"] == "CartPole-v1"


def test_a_tracker_without_its_package_is_a_one_line_error(tmp_path, monkeypatch):
    from accelrl.run import trackers

    monkeypatch.setitem(trackers.PACKAGES, "wandb", {"surely_not_installed_pkg": "wandb"})
    from accelrl.validate import ConfigError, validate_common
    from recipes.ppo_atari import Config

    cfg = Config()
    cfg.log.trackers = ("wandb",)
    with pytest.raises(ConfigError) as err:
        validate_common(cfg)
    assert str(err.value) == "invalid --log.trackers='wandb': needs wandb: pip install wandb"
