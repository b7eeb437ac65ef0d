"""Asynchronous sampling: collector kinds, policy lag, the replay-ratio throttle, clean
shutdown, and APPO / asynchronous DQN learning CartPole."""

import csv
import dataclasses
import math
import os
from pathlib import Path

import pytest
import torch
from tensordict.nn import TensorDictSequential

from accelrl.algos.dqn import DQNConfig
from accelrl.collectors import VersionStamp, make_collector, plan_threads, policy_lag
from accelrl.config import CollectorConfig, EnvConfig, ThreadsConfig
from accelrl.models import make_actor_critic
from accelrl.validate import ConfigError, validate_common
from recipes import appo_atari, dqn_atari
from reference.cartpole_presets import cartpole_config
from tests.helpers import cartpole_recipe_config, first_episodes_mean


def child_pids() -> set[int]:
    """Live processes whose parent is this one (zombies excluded), apart from
    multiprocessing's resource tracker: one per parent, started on first use, it lives until
    the parent exits and then unlinks any shared memory left behind."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z" and b"resource_tracker" not in cmdline:
            found.add(int(entry))
    return found


def assert_rows_follow_simulators(batch, key):
    """Each row is one simulator through time: next obs of step t is the obs of step t+1."""
    assert (batch["env_id"] == batch["env_id"][..., :1, :]).all()
    t, dim = batch.shape[-1], batch.ndim - 1
    nxt = batch["next", key].narrow(dim, 0, t - 1)
    root = batch[key].narrow(dim, 1, t - 1)
    same = (nxt == root).flatten(batch.ndim).all(-1)
    assert (same | batch["next", "done"][..., :-1, 0]).all()


def collect(kind, env_cfg, model, workers, frames, batches=3, stamp=None):
    policy = model if stamp is None else TensorDictSequential(model, stamp)
    collector = make_collector(
        env_cfg,
        CollectorConfig(kind=kind, num_workers=workers, steps_per_batch=frames),
        policy,
        seed=0,
        plan=plan_threads(ThreadsConfig(), workers),
        learner_device="cpu",
    )
    out = []
    try:
        for i, batch in enumerate(collector):
            out.append(batch)
            if stamp is not None:
                stamp.bump()
            collector.update_policy_weights_()
            if i + 1 == batches:
                break
    finally:
        collector.shutdown()
    return out


def test_alternating_sampler_keeps_each_row_on_one_simulator():
    model = make_actor_critic("pixels", (4, 84, 84), 6)
    batches = collect("alternating", EnvConfig(game="Pong", num_envs=4), model, 0, 64)
    for batch in batches:
        assert batch.batch_size == (4, 16)
        assert_rows_follow_simulators(batch, "pixels")
        assert {"action_log_prob", "state_value"} <= set(batch.keys())


def test_async_batches_carry_the_version_of_the_weights_that_acted():
    model = make_actor_critic("observation", (4,), 2)
    stamp = VersionStamp(start=10)
    batches = collect("async", EnvConfig(game="CartPole-v1", num_envs=4), model, 2, 64, 6, stamp)
    versions = [int(b["policy_version"].max()) for b in batches]
    assert versions[0] == 10 and versions[-1] > 10, versions
    for i, batch in enumerate(batches):
        assert batch.batch_size == (4, 16)
        assert_rows_follow_simulators(batch, "observation")
        lag_max, _ = policy_lag(batch, 10 + i)
        assert 0 <= lag_max <= 3  # two workers: at most a couple of updates behind


def test_batched_inference_server_regroups_steps_per_simulator():
    model = make_actor_critic("observation", (4,), 2)
    batches = collect("batched", EnvConfig(game="CartPole-v1", num_envs=2), model, 2, 64)
    for batch in batches:
        assert batch.batch_size == (4, 16)
        assert_rows_follow_simulators(batch, "observation")
        assert "policy_version" in batch.keys()
    assert int(batches[-1]["policy_version"].max()) >= 1


@pytest.mark.parametrize(
    "kind,workers,num_envs,match",
    [
        ("async", 0, 4, "collector.num-workers"),
        ("alternating", 1, 4, "collector.num-workers"),
        ("alternating", 0, 3, "env.num-envs"),
        ("fast", 0, 4, "collector.kind"),
    ],
)
def test_impossible_collector_combinations_are_refused(kind, workers, num_envs, match):
    cfg = appo_atari.Config()
    cfg.env.num_envs = num_envs
    cfg.collector = CollectorConfig(kind=kind, num_workers=workers, steps_per_batch=96)
    with pytest.raises(ConfigError, match=f"--{match}="):
        validate_common(cfg)


@pytest.mark.parametrize("kind", ["async", "batched"])
def test_shutdown_leaves_no_worker_process(kind):
    before = child_pids()
    model = make_actor_critic("observation", (4,), 2)
    collect(kind, EnvConfig(game="CartPole-v1", num_envs=2), model, 2, 32, batches=2)
    deadline = 50
    while child_pids() - before and deadline:
        torch.multiprocessing.active_children()  # reaps exited children
        import time

        time.sleep(0.1)
        deadline -= 1
    assert not child_pids() - before, f"left behind: {child_pids() - before}"


def appo_cartpole(run_dir, total_frames, **appo) -> appo_atari.Config:
    """The CartPole PPO settings (``reference.cartpole_presets``) for APPO, with ``appo``'s
    values over them, at ``total_frames`` steps, seed 0."""
    cfg = cartpole_recipe_config(appo_atari.Config, "appo", run_dir, eval_episodes=2)
    cfg.total_frames = total_frames
    cfg.appo = dataclasses.replace(cfg.appo, **appo)
    return cfg


def metric_rows(run_dir) -> list[dict]:
    return list(csv.DictReader(open(Path(run_dir) / "metrics.csv")))


def test_appo_drops_batches_beyond_the_policy_lag_bound(tmp_path, monkeypatch):
    """Every batch is judged by its own lag, whatever the scheduling: accepted iff its oldest
    step is at most max_policy_lag updates old; dropped frames count exactly the rejected
    batches; a lagged batch reaches the learner without the collected values (recomputed with
    the current critic), a current one with them."""
    from accelrl.algos.ppo import PPO as APPO  # the APPO recipe runs PPO's update
    from accelrl.collectors import PolicyLag

    judged: list[tuple[float, bool, int]] = []
    seen: list[tuple[float, bool]] = []
    real_accept, real_update = PolicyLag.accept, APPO.update

    def accept(self, batch, progress):
        ok = real_accept(self, batch, progress)
        judged.append((self.metrics["async/policy_lag_max"], ok, batch.numel()))
        return ok

    def update(self, batch, progress):
        seen.append((judged[-1][0], "state_value" in batch.keys()))
        return real_update(self, batch, progress)

    monkeypatch.setattr(PolicyLag, "accept", accept)
    monkeypatch.setattr(APPO, "update", update)
    cfg = appo_cartpole(tmp_path / "run", 6144)
    cfg.collector.num_workers = 3
    cfg.collector.max_policy_lag = 1
    before = child_pids()
    summary = appo_atari.train(cfg)
    rows = metric_rows(cfg.run_dir)
    assert summary["frames"] >= 6144
    assert all(ok == (lag <= 1) for lag, ok, _ in judged), judged
    assert all(float(r["async/policy_lag_max"]) <= 1 for r in rows)
    rejected = sum(n for _, ok, n in judged if not ok)
    assert float(rows[-1]["perf/dropped_frames"]) == rejected, (rows[-1], judged)
    assert all(has_values == (lag == 0) for lag, has_values in seen), seen
    assert not child_pids() - before


def test_async_dqn_throttle_holds_the_replay_ratio(tmp_path):
    cfg = dqn_atari.Config(total_frames=12_800, run_dir=str(tmp_path / "run"))
    cfg.env.game = "CartPole-v1"
    cfg.env.num_envs = 4
    cfg.collector.steps_per_batch = 64
    cfg.dqn = DQNConfig(
        batch_size=32, learning_starts_frames=256, replay_capacity=8192, asynchronous=True
    )
    cfg.log.progress = False
    cfg.log.tensorboard = False
    cfg.log.eval_episodes = 0
    before = child_pids()
    assert dqn_atari.train(cfg)["frames"] == 12_800
    ratios = [float(r["train/replay_ratio"]) for r in metric_rows(cfg.run_dir)]
    settled = [r for r in ratios if not math.isnan(r)][20:]
    assert settled, ratios
    # The intensity is 8 replayed samples per collected step; once 20 batches have been
    # collected after learning started, the throttle keeps it within 10%.
    assert all(abs(r - 8.0) <= 0.8 for r in settled), settled
    assert not child_pids() - before


@pytest.mark.slow
def test_appo_with_vtrace_learns_cartpole(tmp_path):
    # Seed 0 reached a last-100 mean of 500 and greedy 500 at 100k steps (2 workers, lag 1-3);
    # without V-trace 500 at 150k.
    # As without V-trace (below), a run may fall back after reaching 500: it must reach 450
    # and end far above the random policy's ~22.
    summary = appo_atari.train(appo_cartpole(tmp_path / "run", 100_000, vtrace=True))
    rows = metric_rows(tmp_path / "run")
    assert max(float(r["async/policy_lag_max"]) for r in rows) >= 1, "batches must lag"
    assert max(float(r["return_mean100"]) for r in rows) >= 450, summary
    assert summary["mean_return_100"] >= 250, summary


@pytest.mark.slow
def test_appo_without_vtrace_learns_cartpole(tmp_path, capsys):
    # GAE on lagged batches, values recomputed with the current critic: seed 0 reached 500 at
    # 150k steps (2026-11-30). The workers' timing makes each run differ: on a 2-core Zen 1
    # (2026-12-05) one reached a last-100 of 500 at 77k steps, fell to 297 at 115k (the
    # collapse PPO shows on CartPole without annealing) and ended at 403. So: the run reaches
    # 450, and ends far above the random policy's ~22.
    summary = appo_atari.train(appo_cartpole(tmp_path / "run", 150_000, vtrace=False))
    rows = metric_rows(tmp_path / "run")
    best = max(float(r["return_mean100"]) for r in rows)
    with capsys.disabled():
        print(f"\n  appo (GAE) seed 0: best last-100 {best:.1f}, "
              f"at the end {summary['mean_return_100']:.1f}")  # fmt: skip
    assert max(float(r["async/policy_lag_max"]) for r in rows) >= 1, "batches must lag"
    assert best >= 450, summary
    assert summary["mean_return_100"] >= 250, summary


@pytest.mark.slow
def test_async_dqn_learns_cartpole(tmp_path, capsys):
    """Prioritized 3-step DQN collecting in a background thread, with the parity benchmark's
    CartPole settings (RL-zoo: intensity 32, held by the throttle) at 60k steps."""
    run = tmp_path / "run"
    cfg = cartpole_config("nstep-prioritized", 0, run_dir=str(run))
    cfg.dqn.asynchronous = True
    cfg.total_frames = 60_000
    summary = dqn_atari.train(cfg)
    with capsys.disabled():
        print(f"\n  async dqn seed 0: last-100 {summary['mean_return_100']:.1f}")
    # Random play is ~22; seed 0 reached 256 (2026-11-30).
    assert first_episodes_mean(run) < 60
    assert summary["mean_return_100"] >= 200, summary
