"""The learning-parity benchmark's plumbing: the CartPole table and the Atari parity runs give
both implementations one recipe ``Config`` that the plain loops read their settings from, the
plain Atari loop records whole-game scores, and ``compare`` reads run folders of either kind.
(The learning figures themselves are in docs/results/learning.md.)"""

from __future__ import annotations

import csv
import importlib
import json

import numpy as np
import pytest

from benchmarks import learning, learning_cartpole
from reference import atari_actor_critic, atari_dqn, classic
from reference.atari import iterations_for
from reference.cartpole_presets import KINDS, cartpole_config
from reference.common import batch_layout

DQN_FLAGS = {  # (double, dueling, n_step, prioritized, distributional)
    "dqn": (False, False, 1, False, False),
    "double-dueling": (True, True, 1, False, False),
    "double-dueling-nstep": (True, True, 3, False, False),
    "nstep-prioritized": (False, False, 3, True, False),
    "c51": (False, False, 1, False, True),
    "rainbow": (True, True, 3, True, True),
}


def test_cartpole_config_holds_every_setting_once():
    """One recipe ``Config`` per algorithm carries RL-zoo's CartPole settings; the recipe run
    and the plain loop both take it."""
    assert set(KINDS) == {"ppo", "a2c", "pqn", *DQN_FLAGS}
    for algo, kind in KINDS.items():
        cfg = cartpole_config(algo, seed=3, eval_episodes=7, run_dir="unused")
        assert type(cfg) is importlib.import_module(f"recipes.{kind}_atari").Config
        assert (cfg.seed, cfg.run_dir, cfg.device, cfg.log.eval_episodes) == (3, "unused", "cpu", 7)
        assert (cfg.env.game, cfg.env.num_envs) == ("CartPole-v1", 8)
        quick = cartpole_config(algo, quick=True)
        assert quick.total_frames == cfg.total_frames // 10
        if kind == "dqn":
            d = cfg.dqn
            assert cfg.total_frames == 50_000 and cfg.collector.steps_per_batch == 256
            assert tuple(cfg.model.mlp_hidden) == (256, 256)
            lr = 1e-3 if algo == "double-dueling-nstep" else 2.3e-3
            assert (d.lr, d.adam_eps, d.batch_size, d.training_intensity) == (
                lr, 1e-8, 64, 32.0)  # fmt: skip
            assert (d.learning_starts_frames, d.replay_capacity, d.target_update_interval) == (
                1000, 100_000, 128)  # fmt: skip
            assert (d.eps_start, d.eps_end, d.eps_decay_frames, d.tau) == (1.0, 0.04, 8000, 0.0)
            assert (d.gamma, d.max_grad_norm, d.v_min, d.v_max, d.atoms) == (
                0.99, 10.0, 0.0, 100.0, 51)  # fmt: skip
            assert (d.double, d.dueling, d.n_step, d.prioritized, d.distributional) == (
                DQN_FLAGS[algo])  # fmt: skip
            assert d.preset == "none"
        elif kind == "ppo":
            p = cfg.ppo
            assert cfg.total_frames == 150_000 and cfg.collector.steps_per_batch == 8 * 32
            assert tuple(cfg.model.mlp_hidden) == (64, 64)
            assert (p.lr, p.clip_epsilon, p.epochs, p.minibatches) == (1e-3, 0.2, 20, 1)
            assert (p.gamma, p.gae_lambda, p.entropy_coef, p.value_coef) == (0.98, 0.8, 0.0, 0.5)
            assert (p.anneal_lr, p.anneal_clip, p.clip_value, p.normalize_advantage) == (
                True, True, True, True)  # fmt: skip
            assert (p.max_grad_norm, p.adam_eps) == (0.5, 1e-5)
        elif kind == "pqn":
            q = cfg.pqn
            assert cfg.total_frames == 100_000 and cfg.collector.steps_per_batch == 8 * 32
            assert tuple(cfg.model.mlp_hidden) == (120, 84)
            assert (q.lr, q.anneal_lr, q.gamma, q.q_lambda, q.epochs, q.minibatches) == (
                1e-3, True, 0.99, 0.65, 4, 4)  # fmt: skip
            assert (q.eps_start, q.eps_end, q.eps_decay_fraction, q.max_grad_norm) == (
                1.0, 0.05, 0.5, 10.0)  # fmt: skip
        else:
            a = cfg.a2c
            assert cfg.total_frames == 150_000 and cfg.collector.steps_per_batch == 8 * 5
            assert tuple(cfg.model.mlp_hidden) == (64, 64)
            assert (a.optimizer, a.lr, a.rms_alpha, a.eps, a.anneal_lr) == (
                "rmsprop", 4e-3, 0.99, 1e-5, True)  # fmt: skip
            assert (a.gamma, a.gae_lambda, a.entropy_coef, a.value_coef) == (0.99, 1.0, 0.0, 0.5)
            assert (a.max_grad_norm, a.normalize_advantage) == (0.5, False)


def test_a_recipe_config_change_reaches_the_plain_loop(monkeypatch):
    """The plain CartPole DQN reads ``cfg.dqn`` itself: a changed learning rate, warm-up or
    training intensity changes what it does."""
    import torch

    lrs: list[float] = []
    updates: list[int] = []
    clip = torch.nn.utils.clip_grad_norm_

    class SpyAdam(torch.optim.Adam):
        def __init__(self, params, lr, **kw):
            lrs.append(lr)
            super().__init__(params, lr=lr, **kw)

    def counting_clip(*args, **kw):
        updates.append(1)
        return clip(*args, **kw)

    monkeypatch.setattr(torch.optim, "Adam", SpyAdam)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", counting_clip)
    counts = {}
    for starts in (0, 300):
        cfg = cartpole_config("dqn", eval_episodes=0)
        cfg.total_frames = 512  # two batches of 256 steps
        cfg.dqn.lr = 1e-3
        cfg.dqn.training_intensity = 1.0  # 256 / 64 = 4 updates a batch
        cfg.dqn.learning_starts_frames = starts
        updates.clear()
        classic.plain_dqn(cfg)
        counts[starts] = len(updates)
    assert lrs == [1e-3, 1e-3]
    assert counts == {0: 8, 300: 4}


def test_plain_loops_refuse_what_they_do_not_implement():
    cfg = cartpole_config("a2c")
    cfg.a2c.optimizer = "adam"
    with pytest.raises(ValueError, match="a2c.optimizer='adam'"):
        classic.plain_a2c(cfg)
    atari = learning.atari_config("a2c", "Pong", 1000, seed=0)
    atari.a2c.life_loss_boundary = False
    with pytest.raises(ValueError, match="a2c.life_loss_boundary=False"):
        atari_actor_critic.plain_a2c(atari)
    atari = learning.atari_config("dqn", "Pong", 1000, seed=0)
    atari.dqn.tau = 0.005
    with pytest.raises(ValueError, match="dqn.tau=0.005"):
        atari_dqn.plain_dqn(atari)


def test_atari_parity_runs_read_one_config():
    """``--impl plain`` runs with the config ``--impl accelrl`` parses from the same flags: the
    recipe defaults, plus double 3-step DQN with a 100k replay."""
    from accelrl.algos.a2c import A2CConfig
    from accelrl.algos.dqn import DQNConfig
    from accelrl.algos.ppo import PPOConfig
    from accelrl.config import EnvConfig

    layouts = {"ppo": (8, 128), "a2c": (16, 5), "dqn": (8, 4)}
    for algo, layout in layouts.items():
        cfg = learning.atari_config(algo, "Breakout", 2_000_000, seed=4, run_dir="r")
        assert (cfg.env.game, cfg.total_frames, cfg.seed, cfg.run_dir) == (
            "Breakout", 2_000_000, 4, "r")  # fmt: skip
        assert batch_layout(cfg) == layout
        assert iterations_for(cfg) == -(-2_000_000 // (layout[0] * layout[1] * 4))
        env = EnvConfig(game="Breakout", num_envs=layout[0])
        assert cfg.env == env
    assert learning.atari_config("ppo", "Breakout", 1, 0).ppo == PPOConfig()
    assert learning.atari_config("a2c", "Breakout", 1, 0).a2c == A2CConfig()
    dqn = learning.atari_config("dqn", "Breakout", 1, 0).dqn
    assert dqn == DQNConfig(
        double=True, n_step=3, replay_capacity=100_000, eps_decay_frames=250_000
    )
    assert dqn.learning_starts_frames == 80_000


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


def test_plain_a2c_loop_resumes_from_its_checkpoint(tmp_path):
    import torch

    from reference.atari import Checkpoint
    from reference.atari_actor_critic import plain_a2c

    cfg = learning.atari_config("a2c", "Pong", 10_000, seed=0, run_dir=str(tmp_path))
    envs, steps = batch_layout(cfg)
    per_iter = envs * steps * cfg.env.frameskip
    path = tmp_path / "plain_checkpoint.pt"
    first = plain_a2c(cfg, 2, checkpoint=Checkpoint(path, per_iter, str(cfg), False))
    assert torch.load(path, weights_only=True)["frames"] == 2 * per_iter == first[-1][0]
    with pytest.raises(SystemExit, match="--resume"):  # a finished or killed run is not redone
        Checkpoint(path, per_iter, str(cfg), resume=False)
    with pytest.raises(SystemExit, match="other settings"):
        Checkpoint(path, per_iter, str(cfg).replace("seed=0", "seed=1"), resume=True)
    resumed = plain_a2c(cfg, 4, checkpoint=Checkpoint(path, per_iter, str(cfg), True))
    # The resumed loop runs batches 3 and 4 only, on the restored optimizer (Adam's step count
    # goes on from 2), and saves again.
    assert [f for f, _ in resumed] == [3 * per_iter, 4 * per_iter]
    state = torch.load(path, weights_only=True)
    assert state["frames"] == 4 * per_iter
    assert int(state["optimizer"]["state"][0]["step"]) == 4


def test_episode_files_resume_drops_the_rows_after_the_checkpoint(tmp_path):
    with open(tmp_path / "episodes.csv", "w") as fh:
        fh.write("frames,return,length\n100,1.0,10\n200,2.0,10\n300,9.0,10\n")
    with open(tmp_path / "metrics.csv", "w") as fh:
        fh.write("frames,time_s,episodes,return_mean100\n100,5.0,1,1\n200,10.0,2,1.5\n300,15,3,4\n")
    files = learning.EpisodeFiles(tmp_path, resume_frames=200)
    assert files.returns == [1.0, 2.0]
    files.iteration(300, [(4.0, 10)])
    files.close()
    with open(tmp_path / "episodes.csv") as fh:
        assert [r["return"] for r in csv.DictReader(fh)] == ["1.0", "2.0", "4.0"]
    with open(tmp_path / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["frames"] for r in rows] == ["100", "200", "300"]
    assert float(rows[-1]["return_mean100"]) == pytest.approx(7 / 3, rel=1e-3)
    assert 10.0 <= float(rows[-1]["time_s"]) < 60.0  # the clock goes on from the kept rows


def test_plain_dqn_loop_resumes_with_its_replay_target_and_rng(tmp_path):
    import torch

    from reference.atari import Checkpoint
    from reference.atari_dqn import plain_dqn

    flags = ["--dqn.replay-capacity", "512", "--dqn.learning-starts-frames", "64",
             "--dqn.prioritized"]  # fmt: skip
    cfg = learning.atari_config("dqn", "Pong", 10_000, 0, str(tmp_path), flags)
    envs, steps = batch_layout(cfg)
    per_iter = envs * steps * cfg.env.frameskip
    upi = cfg.dqn.training_intensity * envs * steps // cfg.dqn.batch_size  # updates per batch
    # The target is copied after the 2nd batch's updates, just before the save, and not again
    # in the 3rd batch.
    cfg.dqn.target_update_interval = 2 * upi
    path = tmp_path / "plain_checkpoint.pt"
    plain_dqn(cfg, 2, checkpoint=Checkpoint(path, per_iter, str(cfg), False))
    first = torch.load(path, weights_only=True)
    saved = first["extra"]
    assert first["frames"] == 2 * per_iter
    assert saved["replay"]["written"] == 2 * steps
    assert saved["updates"] == int(first["optimizer"]["state"][0]["step"]) == 2 * upi
    assert all(torch.equal(v, first["model"][k]) for k, v in saved["target"].items())

    # Nothing left to run: the restore alone (numpy's RNG, which the replay samples with).
    plain_dqn(cfg, 2, checkpoint=Checkpoint(path, 1, str(cfg), True))
    assert np.array_equal(np.random.get_state()[1], saved["np_rng"].numpy().astype(np.uint32))

    resumed = plain_dqn(cfg, 3, checkpoint=Checkpoint(path, per_iter, str(cfg), True))
    assert [f for f, _ in resumed] == [3 * per_iter]
    last = torch.load(path, weights_only=True)["extra"]
    replay = last["replay"]
    # The replay goes on from the saved one, the n-step sums stop where the resumed simulators
    # started new episodes, the update count goes on, and the target network is the saved one
    # (not a copy of the restored online network's initial weights).
    assert replay["written"] == 3 * steps and last["updates"] == 3 * upi
    kept = 2 * steps
    for name in ("obs", "next_obs", "action", "reward"):
        assert torch.equal(replay[name][:kept], saved["replay"][name][:kept]), name
    assert bool(replay["done"][kept - 1].all())
    assert all(torch.equal(v, saved["target"][k]) for k, v in last["target"].items())
