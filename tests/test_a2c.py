"""A2C's update step and recipe mechanics (learning on CartPole is tracked as open work)."""

import math

import torch

from accelrl.algos.a2c import A2C, A2CConfig
from accelrl.config import EnvConfig
from accelrl.envs import make_env
from accelrl.models import make_actor_critic
from recipes.a2c_atari import Config, train


def test_one_update_moves_every_parameter_and_reports_metrics():
    torch.manual_seed(0)
    env = make_env(EnvConfig(game="CartPole-v1", num_envs=4), seed=0)
    model = make_actor_critic("observation", (4,), 2)
    with torch.no_grad():
        batch = env.rollout(5, model, break_when_any_done=False)
    a2c = A2C(model, A2CConfig(), torch.device("cpu"))
    before = [p.detach().clone() for p in model.parameters()]
    metrics = a2c.update(batch, progress=0.5)
    assert metrics["train/lr"] == 7e-4 * 0.5
    for key in ["loss/policy", "loss/value", "loss/entropy", "train/entropy", "train/grad_norm"]:
        assert math.isfinite(metrics[key]), key
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_recipe_runs_and_resumes(tmp_path):
    cfg = Config(total_frames=1600, run_dir=str(tmp_path / "a2c"))
    cfg.env.game = "CartPole-v1"
    cfg.log.progress = False
    cfg.log.eval_episodes = 1
    cfg.log.checkpoint_every_frames = 800
    assert train(cfg)["updates"] == 20
    cfg.total_frames = 2400
    cfg.resume = True
    summary = train(cfg)
    assert summary["frames"] == 2400 and summary["updates"] == 30
