"""DQN family: presets, schedules, update step, recipe mechanics (CartPole and Atari)."""

import math

import pytest
import torch

from accelrl.algos.dqn import DQN, DQNConfig, apply_preset, preset_num_envs, validate_dqn
from accelrl.config import ConfigError, EnvConfig
from accelrl.envs import make_env
from accelrl.replay import FrameReplay, ReplayConfig
from recipes.dqn_atari import Config, resolve, train


def test_rainbow_preset_turns_everything_on_and_explicit_flags_win():
    cfg = apply_preset(DQNConfig(preset="rainbow"))
    assert cfg.double and cfg.dueling and cfg.prioritized and cfg.distributional
    assert cfg.n_step == 3
    mine = apply_preset(DQNConfig(preset="rainbow", n_step=5, lr=1e-3))
    assert mine.n_step == 5 and mine.lr == 1e-3


def test_large_batch_presets_scale_simulators_and_learning_rate():
    cfg = resolve(Config(dqn=DQNConfig(preset="cat-dqn-2048")))
    assert cfg.dqn.batch_size == 2048 and cfg.dqn.distributional
    assert cfg.env.num_envs == preset_num_envs(cfg.dqn) == 256
    assert cfg.collector.frames_per_batch % cfg.env.num_envs == 0
    assert cfg.dqn.lr == pytest.approx(6.25e-5 * math.sqrt(2048 / 32))
    small = resolve(Config(dqn=DQNConfig(preset="dqn-512")))
    assert small.dqn.batch_size == 512 and small.env.num_envs == 64


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"preset": "rainbow-9000"}, "dqn.preset"),
        ({"distributional": True, "v_min": 5.0, "v_max": -5.0}, "dqn.v_min"),
        ({"n_step": 0}, "dqn.n_step"),
        ({"batch_size": 0}, "dqn.batch_size"),
        ({"replay_capacity": 16, "batch_size": 32}, "dqn.replay_capacity"),
        ({"eps_end": 1.5}, "dqn.eps_end"),
    ],
)
def test_bad_dqn_values_are_refused(changes, field):
    with pytest.raises(ConfigError, match=f"--{field.replace('_', '-')}="):
        validate_dqn(DQNConfig(**changes))


def cartpole_dqn(**changes) -> DQN:
    return DQN(
        DQNConfig(**changes),
        obs_key="observation",
        obs_shape=(4,),
        num_actions=2,
        device=torch.device("cpu"),
    )


def test_epsilon_and_beta_schedules():
    dqn = cartpole_dqn(eps_start=1.0, eps_end=0.1, eps_decay_frames=1000, priority_beta=0.4)
    assert dqn.epsilon(0) == 1.0 and dqn.epsilon(500) == pytest.approx(0.55)
    assert dqn.epsilon(5000) == pytest.approx(0.1)
    assert dqn.beta(0.0) == pytest.approx(0.4) and dqn.beta(1.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"double": True, "dueling": True},
        {"n_step": 3, "prioritized": True},
        {"distributional": True, "dueling": True, "n_step": 3, "prioritized": True},
    ],
    ids=["dqn", "double-dueling", "nstep-prioritized", "rainbow"],
)
def test_update_from_replay_moves_weights_and_returns_priorities(flags):
    torch.manual_seed(0)
    dqn = cartpole_dqn(**flags)
    env = make_env(EnvConfig(game="CartPole-v1", num_envs=4), seed=0)
    with torch.no_grad():
        batch = env.rollout(64, dqn.policy, break_when_any_done=False)
    replay = FrameReplay(
        ReplayConfig(capacity=4096, prioritized=dqn.cfg.prioritized, n_step=dqn.cfg.n_step),
        num_envs=4,
        obs_key="observation",
        obs_shape=(4,),
        stack=1,
        gamma=0.99,
    )
    replay.extend(batch)
    before = [p.detach().clone() for p in dqn.greedy.parameters()]
    sample = replay.sample(32, beta=0.4)
    metrics, priority = dqn.update(sample)
    replay.update_priority(sample["index"], priority)
    assert priority.shape == (32,) and (priority >= 0).all()
    assert all(math.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, dqn.greedy.parameters(), strict=True))


def small_dqn_config(run_dir, total_frames: int, **dqn) -> Config:
    cfg = Config(total_frames=total_frames, run_dir=str(run_dir))
    cfg.env.game = "CartPole-v1"
    cfg.env.num_envs = 4
    cfg.collector.frames_per_batch = 64
    cfg.dqn = DQNConfig(batch_size=32, learning_starts=128, replay_capacity=4096, **dqn)
    cfg.log.progress = False
    cfg.log.eval_episodes = 1
    cfg.log.checkpoint_every_frames = 256
    return cfg


def test_recipe_runs_keeps_replay_ratio_and_resumes(tmp_path):
    cfg = small_dqn_config(tmp_path / "run", 512, n_step=3, prioritized=True, double=True)
    first = train(cfg)
    assert first["frames"] == 512
    import csv

    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    # Intensity 8 at 64 collected / 32 per sample: 16 updates per batch once learning starts.
    assert all(row["loss/q"] == "nan" for row in rows[:1])
    assert all(row["loss/q"] != "nan" for row in rows[2:])
    cfg.total_frames = 768
    cfg.resume = True
    assert train(cfg)["frames"] == 768


@pytest.mark.slow
def test_atari_rainbow_run_with_memmap_replay(tmp_path):
    cfg = Config(total_frames=2048, run_dir=str(tmp_path / "pong"))
    cfg.env.num_envs = 4
    cfg.collector.frames_per_batch = 64
    cfg.dqn = DQNConfig(
        preset="rainbow",
        batch_size=32,
        learning_starts=512,
        replay_capacity=2048,
        replay_dir=str(tmp_path / "replay"),
    )
    cfg.log.progress = False
    cfg.log.eval_episodes = 0
    summary = train(cfg)
    assert summary["frames"] == 2048
    assert any((tmp_path / "replay").iterdir()), "replay frames live in the memmap folder"


def cartpole_learning_config(run_dir, seed: int, **flags) -> Config:
    """DQN on CartPole at a 100k-step budget (lr 2.5e-4, batch 64, target copy every 256
    updates, training intensity 8, 256x256 MLP)."""
    cfg = Config(total_frames=100_000, seed=seed, run_dir=str(run_dir))
    cfg.env.game = "CartPole-v1"
    cfg.env.num_envs = 8
    cfg.collector.frames_per_batch = 256
    cfg.model.mlp_hidden = (256, 256)
    cfg.dqn = DQNConfig(
        lr=2.5e-4,
        batch_size=64,
        replay_capacity=100_000,
        learning_starts=1000,
        eps_end=0.04,
        eps_decay_frames=10_000,
        target_update_interval=256,
        training_intensity=8,
        **flags,
    )
    cfg.log.progress = False
    cfg.log.tensorboard = False
    cfg.log.eval_episodes = 4
    return cfg


def first_episodes_mean(run_dir, n: int = 100) -> float:
    import csv

    rows = list(csv.DictReader(open(run_dir / "episodes.csv")))[:n]
    return sum(float(r["return"]) for r in rows) / len(rows)


CARTPOLE = [
    # (flags, minimum last-100 mean at 100k steps). Seeds 0, 1, 2 reached: plain 304/315/123,
    # double+dueling 119/259/166, prioritized+3-step 323/348/270, C51 197/160/111, rainbow
    # 221/284/126 (first 100 episodes: 19-31). The thresholds sit below the worst seed; none of
    # these settings solves CartPole (>= 475) within 100k steps yet (README).
    ({}, 100),
    ({"double": True, "dueling": True}, 90),
    ({"prioritized": True, "n_step": 3}, 200),
    ({"distributional": True, "v_min": 0.0, "v_max": 100.0}, 90),
    ({"preset": "rainbow", "v_min": 0.0, "v_max": 100.0}, 100),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags,minimum",
    CARTPOLE,
    ids=["dqn", "double-dueling", "prioritized-nstep", "distributional", "rainbow"],
)
def test_dqn_variants_learn_cartpole(tmp_path, flags, minimum):
    run = tmp_path / "run"
    summary = train(cartpole_learning_config(run, seed=0, **flags))
    # Returns rise from the random policy's ~22 (first 100 episodes) to the threshold.
    assert first_episodes_mean(run) < 60
    assert summary["mean_return_100"] >= minimum, summary
