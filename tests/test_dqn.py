"""DQN family: presets, schedules, update step, recipe mechanics (CartPole and Atari)."""

import math
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import EGreedyModule

from accelrl.algos.dqn import (
    DQN,
    DQNConfig,
    ScheduledEGreedy,
    apply_preset,
    preset_num_envs,
    validate_dqn,
)
from accelrl.collectors import plan_threads, run_collector
from accelrl.config import EnvConfig
from accelrl.envs import make_env
from accelrl.replay.memory import FrameReplay
from accelrl.run.progress import Progress
from accelrl.validate import ConfigError
from recipes.dqn_atari import ALGORITHM, Config, train
from tests.helpers import count_batches


def test_rainbow_preset_turns_everything_on_and_explicit_flags_win():
    cfg = apply_preset(DQNConfig(preset="rainbow"))
    assert cfg.double and cfg.dueling and cfg.prioritized and cfg.distributional
    assert cfg.n_step == 3
    mine = apply_preset(DQNConfig(preset="rainbow", n_step=5, lr=1e-3))
    assert mine.n_step == 5 and mine.lr == 1e-3


def test_large_batch_presets_scale_simulators_and_learning_rate():
    cfg = ALGORITHM.resolve(Config(dqn=DQNConfig(preset="cat-dqn-2048")))
    assert cfg.dqn.batch_size == 2048 and cfg.dqn.distributional
    assert cfg.env.num_envs == preset_num_envs(cfg.dqn) == 256
    assert cfg.collector.steps_per_batch % cfg.env.num_envs == 0
    assert cfg.dqn.lr == pytest.approx(6.25e-5 * math.sqrt(2048 / 32))
    small = ALGORITHM.resolve(Config(dqn=DQNConfig(preset="dqn-512")))
    assert small.dqn.batch_size == 512 and small.env.num_envs == 64


@pytest.mark.parametrize("preset", ["dqn-512", "cat-dqn-2048", "rainbow-512"])
def test_large_batch_presets_copy_the_target_as_often_per_frame_as_the_defaults(preset):
    """Agent steps between target copies: updates between copies x agent steps per update
    (batch / intensity). The presets keep the defaults' 8,000 (2000 updates at batch 32)."""

    def steps_between_copies(cfg):
        return cfg.dqn.target_update_interval * cfg.dqn.batch_size / cfg.dqn.training_intensity

    default = ALGORITHM.resolve(Config())
    large = ALGORITHM.resolve(Config(dqn=DQNConfig(preset=preset)))
    assert steps_between_copies(default) == 8000
    assert steps_between_copies(large) == pytest.approx(8000, rel=0.01)
    # and the recipe's updates per batch give the same: one update per batch / intensity steps
    per_batch = (
        large.dqn.training_intensity * large.collector.steps_per_batch / large.dqn.batch_size
    )
    assert large.collector.steps_per_batch / per_batch == large.dqn.batch_size / 8


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


def test_epsilon_falls_at_every_acting_step():
    """Each exploring forward pass acts at the schedule's epsilon for the frames acted so far,
    then counts its batch (TorchRL's EGreedyModule keeps one epsilon until ``step()``, which
    the recipe would call once per batch: every call below would then act at 1.0)."""
    dqn = cartpole_dqn(eps_start=1.0, eps_end=0.0, eps_decay_frames=100)
    td = TensorDict({"observation": torch.zeros(10, 4)}, [10])
    acted = []
    with set_exploration_type(ExplorationType.RANDOM):
        for _ in range(12):
            dqn.collect_policy(td.clone())
            acted.append(float(dqn.explore.eps))
    expected = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0]
    assert acted == pytest.approx(expected)
    assert int(dqn.explore.frames) == 120
    # At epsilon 0 every action is the greedy one.
    with set_exploration_type(ExplorationType.RANDOM):
        out = dqn.collect_policy(TensorDict({"observation": torch.randn(64, 4)}, [64]))
    greedy = dqn.q_network(out["observation"]).argmax(-1)
    assert torch.equal(out["action"], greedy)
    # Evaluation and spec probes do not advance the schedule; the learner can set it.
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        dqn.collect_policy(td.clone())
    assert int(dqn.explore.frames) == 184
    dqn.acted(50)
    with set_exploration_type(ExplorationType.RANDOM):
        dqn.collect_policy(td.clone())
    assert float(dqn.explore.eps) == pytest.approx(0.5)


def test_scheduled_egreedy_draws_what_torchrl_egreedy_draws():
    """The acting fast path (no per-step spec expansion) takes the same random numbers in the
    same order as TorchRL's ``EGreedyModule`` at the same epsilon: the same actions for the
    same seed, also for a two-dimensional batch."""
    spec = Categorical(6)
    ours = ScheduledEGreedy(spec, eps_start=1.0, eps_end=0.05, decay_frames=3000)
    theirs = EGreedyModule(spec, eps_init=1.0, eps_end=1.0)
    for shape in ([8], [4, 2]):
        greedy = torch.randint(6, shape)
        for _ in range(40):
            # TorchRL's module at the epsilon ours acts with at its current count.
            theirs.eps.copy_(ours.epsilon(ours.frames))
            with set_exploration_type(ExplorationType.RANDOM):
                torch.manual_seed(int(ours.frames))
                a = ours(TensorDict({"action": greedy.clone()}, shape))["action"]
                torch.manual_seed(int(ours.frames) - greedy.numel())
                b = theirs(TensorDict({"action": greedy.clone()}, shape))["action"]
            assert torch.equal(a, b)
            assert float(ours.eps) == float(theirs.eps)
    assert 0 < (a != greedy).sum() < a.numel()  # both explore and exploit at the end


def test_epsilon_schedule_counts_every_worker_and_frame_skip(tmp_path):
    """Emulator frames: 4 per agent step with frameskip 4. Collector workers share the count
    (TorchRL keeps a CPU policy's buffers in shared memory): after a batch of 64 steps from two
    workers it holds more than one worker's 32 (races may drop an increment)."""
    dqn = DQN(
        DQNConfig(eps_decay_frames=10_000),
        obs_key="observation",
        obs_shape=(4,),
        num_actions=2,
        device=torch.device("cpu"),
        run_frames_per_step=4,
    )
    cfg = Config()
    cfg.env.game, cfg.env.num_envs = "CartPole-v1", 4
    cfg.collector.steps_per_batch, cfg.collector.num_workers = 64, 2
    cfg = ALGORITHM.resolve(cfg)
    proc = SimpleNamespace(
        collect_seed=lambda updates: 0,
        threads=plan_threads(cfg.threads, cfg.collector.num_workers),
        device="cpu",
    )
    collector = run_collector(cfg.env, cfg.collector, cfg.compile, dqn.collect_policy, proc, 0)
    try:
        next(iter(collector))
        assert 4 * 32 < int(dqn.explore.frames) <= 4 * 64
    finally:
        collector.shutdown()


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
        batch = env.rollout(64, dqn.collect_policy, break_when_any_done=False)
    replay = FrameReplay(
        capacity=4096,
        prioritized=dqn.cfg.prioritized,
        n_step=dqn.cfg.n_step,
        num_envs=4,
        obs_key="observation",
        obs_shape=(4,),
        stack=1,
        gamma=0.99,
    )
    replay.extend(batch)
    before = [p.detach().clone() for p in dqn.greedy.parameters()]
    sample = replay.sample(32, beta=0.4)
    assert all(math.isnan(v) for k, v in dqn.metrics().items() if k != "train/skipped_steps")
    priority = dqn.update(sample)
    replay.update_priority(sample["index"], priority)
    assert priority.shape == (32,) and (priority >= 0).all()
    metrics = dqn.metrics()
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["train/td_error"] == pytest.approx(float(priority.mean()))
    assert math.isnan(dqn.metrics()["loss/q"])  # read once: no update since
    assert any(not torch.equal(a, b) for a, b in zip(before, dqn.greedy.parameters(), strict=True))


def small_dqn_config(run_dir, total_frames: int, **dqn) -> Config:
    cfg = Config(total_frames=total_frames, run_dir=str(run_dir))
    cfg.env.game = "CartPole-v1"
    cfg.env.num_envs = 4
    cfg.collector.steps_per_batch = 64
    cfg.dqn = DQNConfig(batch_size=32, learning_starts_frames=128, replay_capacity=4096, **dqn)
    cfg.log.progress = False
    cfg.log.eval_episodes = 1
    cfg.log.checkpoint_every_frames = 256
    return cfg


@pytest.mark.parametrize("intensity,per_batch", [(8.0, [0, 16, 16, 16]), (3.0, [0, 6, 6, 6])])
def test_recipe_updates_per_batch_and_replay_ratio(tmp_path, monkeypatch, intensity, per_batch):
    """Updates per batch = intensity x 64 collected / 32 per sample, none before 128 steps; the
    logged replay ratio equals the intensity."""
    import csv

    counts: list[int] = []
    real_update, real_collected = DQN.update, Progress.collected

    def update(self, sample):
        counts[-1] += 1
        return real_update(self, sample)

    def collected(self, batch):
        counts.append(0)
        return real_collected(self, batch)

    monkeypatch.setattr(DQN, "update", update)
    monkeypatch.setattr(Progress, "collected", collected)
    cfg = small_dqn_config(tmp_path, 512, training_intensity=intensity)
    cfg.collector.steps_per_batch = 64
    cfg.dqn.learning_starts_frames = 96  # crossed during the second batch (128 steps)
    assert train(cfg)["frames"] == 512
    assert counts[:4] == per_batch and len(set(counts[1:])) == 1, counts
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert rows[0]["train/replay_ratio"] == "nan"
    ratios = [float(r["train/replay_ratio"]) for r in rows[1:]]
    assert ratios and all(r == pytest.approx(intensity) for r in ratios), ratios


def test_recipe_runs_and_resumes(tmp_path):
    cfg = small_dqn_config(tmp_path / "run", 512, n_step=3, prioritized=True, double=True)
    first = train(cfg)
    assert first["frames"] == 512
    cfg.total_frames = 768
    cfg.resume = True
    summary, batches = count_batches(lambda: train(cfg))
    assert summary["frames"] == 768
    assert batches == 4, "the resumed run collects only what was missing (a restart: 12)"


def test_resume_with_a_memmap_replay_samples_from_it_at_once(tmp_path):
    """With --dqn.replay-dir the checkpoint holds the replay's index: the resumed run updates on
    its first batch with the replay as it was (a RAM replay refills for learning_starts)."""
    import csv

    def rows():
        return list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))

    for replay_dir, first_resumed_update in [(str(tmp_path / "replay"), True), (None, False)]:
        cfg = small_dqn_config(tmp_path / "run", 512, replay_dir=replay_dir)
        cfg.dqn.learning_starts_frames = 256
        cfg.log.eval_episodes = 0
        train(cfg)
        before = len(rows())
        cfg.total_frames, cfg.resume = 640, True
        summary = train(cfg)
        assert summary["frames"] == 640
        resumed = rows()[before]
        assert int(resumed["frames"]) == 576
        updated = not math.isnan(float(resumed["loss/q"]))
        assert updated == first_resumed_update, (replay_dir, resumed)
        if replay_dir:
            assert float(resumed["train/replay"]) > 400, "the replay came back with the run"
        import shutil

        shutil.rmtree(tmp_path / "run")


@pytest.mark.slow
def test_atari_rainbow_run_with_memmap_replay(tmp_path):
    cfg = Config(total_frames=2048, run_dir=str(tmp_path / "pong"))
    cfg.env.num_envs = 4
    cfg.collector.steps_per_batch = 64
    cfg.dqn = DQNConfig(
        preset="rainbow",
        batch_size=32,
        learning_starts_frames=512,
        replay_capacity=2048,
        replay_dir=str(tmp_path / "replay"),
    )
    cfg.log.progress = False
    cfg.log.eval_episodes = 0
    summary = train(cfg)
    assert summary["frames"] == 2048
    assert any((tmp_path / "replay").iterdir()), "replay frames live in the memmap folder"
