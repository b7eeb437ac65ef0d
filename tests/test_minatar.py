"""MinAtar behind ``make_env``: observations, auto-reset, truncation, seeds, sticky actions; bad
names and a missing optional extra refused in one line; every recipe and ``accelrl.tools.play`` on a
MinAtar game."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from accelrl.config import EnvConfig
from accelrl.envs import MissingExtra, describe_env, frames_per_step, make_env
from accelrl.envs.minatar_vec import MISSING
from accelrl.validate import ConfigError, validate_env

minatar = pytest.importorskip("minatar")

ROOT = Path(__file__).resolve().parents[1]
CHANNELS = {"Asterix": 4, "Breakout": 4, "Freeway": 7, "Seaquest": 10, "SpaceInvaders": 6}
KEYS = {
    "observation": torch.uint8,
    "score": torch.float32,
    "life_lost": torch.bool,
    "episode_return": torch.float32,
    "episode_length": torch.int64,
    "env_id": torch.int64,
    "done": torch.bool,
    "terminated": torch.bool,
    "truncated": torch.bool,
}


def rollout(cfg: EnvConfig, steps: int, *, seed: int = 0, actions: torch.Tensor | None = None):
    env = make_env(cfg, seed=seed)
    try:
        if actions is None:
            gen = torch.Generator().manual_seed(seed)
            actions = torch.randint(6, (steps, cfg.num_envs), generator=gen)
        td = env.reset()
        out = []
        for a in actions:
            step, td = env.step_and_maybe_reset(td.set("action", a))
            out.append(step.clone())
        return torch.stack(out, dim=1)  # [envs, steps]
    finally:
        env.close()


@pytest.mark.parametrize("game", list(CHANNELS))
def test_observations_are_uint8_grids_channels_first(game):
    cfg = EnvConfig(game=f"MinAtar/{game}", num_envs=3)
    spec = describe_env(cfg)
    assert spec == {"obs_key": "observation", "obs_shape": (CHANNELS[game], 10, 10),
                    "num_actions": 6}  # fmt: skip
    assert frames_per_step(cfg) == 1
    env = make_env(cfg, seed=0)
    try:
        check_env_specs(env)
    finally:
        env.close()
    roll = rollout(cfg, 30)
    for key, dtype in KEYS.items():
        assert roll["next", key].dtype == dtype, key
    obs = roll["observation"]
    assert obs.shape == (3, 30, CHANNELS[game], 10, 10)
    assert set(obs.unique().tolist()) <= {0, 1} and obs.any()
    assert roll["next", "reward"].shape == (3, 30, 1)


def test_observations_are_minatar_states_channels_first():
    """The same seed and actions in ``minatar.Environment`` give states whose [H, W, C] axes
    are the env's [C, H, W] (no sticky actions, so only the seed decides)."""
    cfg = EnvConfig(game="MinAtar/SpaceInvaders", num_envs=1, sticky_actions=0.0)
    actions = torch.randint(6, (40, 1), generator=torch.Generator().manual_seed(1))
    roll = rollout(cfg, 40, seed=7, actions=actions)
    raw = minatar.Environment("space_invaders", sticky_action_prob=0.0)
    raw.seed(7)
    raw.reset()
    assert np.array_equal(roll["observation"][0, 0].numpy(), raw.state().transpose(2, 0, 1))
    for t, a in enumerate(actions[:, 0].tolist()):
        reward, terminal = raw.act(a)
        assert roll["next", "reward"][0, t].item() == reward
        assert roll["next", "terminated"][0, t].item() == terminal
        state = raw.state().transpose(2, 0, 1)  # the final one when the episode ended
        assert np.array_equal(roll["next", "observation"][0, t].numpy(), state), t
        if terminal:
            break
    assert t >= 10


def test_ended_episodes_reset_in_the_same_step():
    """Random Breakout play loses the ball within tens of steps; each simulator then starts a
    new episode at once: the next step is a fresh episode's first, with its own return."""
    roll = rollout(EnvConfig(game="MinAtar/Breakout", num_envs=2), 300)
    nxt = roll["next"]
    done = nxt["done"][..., 0]
    assert (done.sum(1) >= 2).all(), "every simulator should finish two episodes"
    for row in range(2):
        ends = done[row].nonzero().flatten().tolist()
        starts = [0] + [e + 1 for e in ends[:-1]]
        for start, end in zip(starts, ends, strict=True):
            length = nxt["episode_length"][row, end].item()
            assert length == end - start + 1
            total = nxt["score"][row, start : end + 1].sum().item()
            assert nxt["episode_return"][row, end].item() == total
        assert nxt["terminated"][row, ends].all() and not nxt["truncated"][row].any()
        after = [e + 1 for e in ends if e + 1 < done.shape[1]]
        # The root after an end is the new episode's first observation: its ball is not in
        # the bottom row where the last one was lost.
        assert (roll["episode_length"][row, after] == 0).all()
        assert not done[row, after].all()
        ended_obs = nxt["observation"][row, ends[0]]
        assert not torch.equal(ended_obs, roll["observation"][row, ends[0] + 1])


def test_episodes_are_truncated_at_max_episode_frames():
    """Freeway's episodes last 2500 steps; a cap of 7 frames (one frame a step) truncates."""
    cfg = EnvConfig(game="MinAtar/Freeway", num_envs=2, max_episode_frames=7)
    nxt = rollout(cfg, 16)["next"]
    truncated = nxt["truncated"][0, :, 0].nonzero().flatten().tolist()
    assert truncated == [6, 13]
    assert not nxt["terminated"].any()
    assert nxt["episode_length"][0, 6].item() == 7 and nxt["episode_length"][0, 7].item() == 1


def test_rollouts_are_deterministic_per_seed():
    cfg = EnvConfig(game="MinAtar/Asterix", num_envs=3)
    a, b, c = rollout(cfg, 60, seed=3), rollout(cfg, 60, seed=3), rollout(cfg, 60, seed=4)
    assert torch.equal(a["next", "observation"], b["next", "observation"])
    assert torch.equal(a["next", "reward"], b["next", "reward"])
    assert not torch.equal(a["next", "observation"], c["next", "observation"])
    # Simulator i of a seed-s env plays as simulator 0 of a seed-(s + i) env.
    actions = torch.randint(6, (60, 3), generator=torch.Generator().manual_seed(3))
    single = EnvConfig(game="MinAtar/Asterix", num_envs=1)
    one = rollout(single, 60, seed=4, actions=actions[:, 1:2])
    assert torch.equal(one["next", "observation"][0], a["next", "observation"][1])


def test_sticky_actions_reach_the_simulators():
    """With sticky probability 1 every action repeats the first one (NOOP): random actions then
    play exactly as all-NOOP play. MinAtar's default probability is 0.1."""
    from accelrl.envs.minatar_vec import MINATAR_STICKY_ACTIONS, sticky_actions

    assert sticky_actions(EnvConfig(game="MinAtar/Breakout")) == MINATAR_STICKY_ACTIONS == 0.1
    base = dict(game="MinAtar/Seaquest", num_envs=2)
    moves = torch.randint(1, 6, (50, 2), generator=torch.Generator().manual_seed(0))
    stuck = rollout(EnvConfig(**base, sticky_actions=1.0), 50, actions=moves)
    noop = rollout(EnvConfig(**base, sticky_actions=0.0), 50, actions=torch.zeros_like(moves))
    free = rollout(EnvConfig(**base, sticky_actions=0.0), 50, actions=moves)
    assert torch.equal(stuck["next", "observation"], noop["next", "observation"])
    assert not torch.equal(free["next", "observation"], noop["next", "observation"])


@pytest.mark.parametrize(
    "changes,field,words",
    [
        ({"game": "MinAtar/Pong"}, "env.game", ["'MinAtar/Pong'", "MinAtar/SpaceInvaders"]),
        ({"sticky_actions": 1.5}, "env.sticky-actions", ["1.5", "[0, 1]"]),
        ({"max_episode_frames": 0}, "env.max-episode-frames", ["> 0"]),
        ({"async_batch_size": 2}, "env.async-batch-size", ["ale_vec"]),
        ({"fire_on_life_loss": True}, "env.fire-on-life-loss", ["Atari"]),
    ],
)
def test_bad_settings_are_refused_in_one_line(changes, field, words):
    cfg = EnvConfig(**{"game": "MinAtar/Breakout", "num_envs": 4, **changes})
    with pytest.raises(ConfigError) as info:
        validate_env(cfg)
    message = str(info.value)
    assert message.startswith(f"invalid --{field}=") and "\n" not in message
    for word in words:
        assert word in message


def test_a_missing_extra_is_one_line_naming_it(monkeypatch, capsys):
    from accelrl.cli import run_recipe
    from recipes import ppo_atari

    monkeypatch.setitem(sys.modules, "minatar", None)  # import minatar now fails
    cfg = EnvConfig(game="MinAtar/Breakout")
    with pytest.raises(ConfigError, match=f"MinAtar/Breakout'.*{MISSING.split(':')[0]}"):
        validate_env(cfg)
    with pytest.raises(MissingExtra, match="pip install"):
        make_env(cfg, seed=0)
    with pytest.raises(SystemExit) as exit_info:
        run_recipe(ppo_atari.Config, ppo_atari.train, description="",
                   argv=["--env.game", "MinAtar/Breakout", "--log.no-progress"])  # fmt: skip
    assert exit_info.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [
        "accelrl: error: invalid --env.game='MinAtar/Breakout': MinAtar games need the optional "
        'extra: pip install "accelrl[minatar]"'
    ]


def test_other_games_never_import_minatar():
    """minatar is GPL-3.0 and optional: Atari and CartPole runs must not import it."""
    code = (
        "import sys\n"
        "from accelrl.config import EnvConfig\n"
        "from accelrl.envs import describe_env, make_env\n"
        "from accelrl.validate import validate_env\n"
        "import recipes.ppo_atari, recipes.dqn_atari\n"
        "for game in ('Pong', 'CartPole-v1'):\n"
        "    validate_env(EnvConfig(game=game)); describe_env(EnvConfig(game=game))\n"
        "make_env(EnvConfig(game='CartPole-v1', num_envs=1), seed=0).close()\n"
        "print('minatar' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


# --- every recipe on a MinAtar game -----------------------------------------------------------


def tiny(recipe, run_dir: Path, **sections):
    cfg = recipe.Config(total_frames=128, seed=0, run_dir=str(run_dir))
    cfg.env = EnvConfig(game="MinAtar/Breakout", num_envs=4)
    cfg.collector.steps_per_batch = 64
    cfg.log.progress = False
    cfg.log.tensorboard = False
    cfg.log.eval_episodes = 0
    for name, value in sections.items():
        section, _, field = name.partition("__")
        setattr(getattr(cfg, section), field, value)
    return cfg


def assert_trained(summary: dict, run_dir: Path) -> None:
    assert summary["frames"] >= 128
    assert summary["updates"] >= 1
    assert list((run_dir / "checkpoints").glob("ckpt_*.pt"))


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_on_policy_recipes_train_on_minatar(algo, tmp_path):
    import importlib

    recipe = importlib.import_module(f"recipes.{algo}_atari")
    sections = {"ppo__minibatches": 2, "ppo__epochs": 1} if algo == "ppo" else {}
    assert_trained(recipe.train(tiny(recipe, tmp_path / algo, **sections)), tmp_path / algo)


def test_appo_trains_on_minatar_in_a_worker_process(tmp_path):
    from recipes import appo_atari

    cfg = tiny(appo_atari, tmp_path / "appo", appo__minibatches=2, appo__epochs=1)
    cfg.collector.num_workers = 1  # the simulators step in a spawned worker process
    cfg.env.num_envs = 2
    cfg.collector.steps_per_batch = 32
    cfg.total_frames = 64
    summary = appo_atari.train(cfg)
    assert summary["frames"] >= 64 and summary["updates"] >= 1


def test_dqn_minatar_preset_is_the_papers_dqn():
    """Young & Tian (2019): batch 32, lr 2.5e-4, replay 100k, 5k frames before learning,
    target copy every 1000 updates, epsilon 1 -> 0.1 over 100k frames, one update per step of
    one simulator."""
    from accelrl.algos.dqn import DQNConfig
    from recipes import dqn_atari

    cfg = dqn_atari.ALGORITHM.resolve(
        dqn_atari.Config(env=EnvConfig(game="MinAtar/Breakout"), dqn=DQNConfig(preset="minatar"))
    )
    d = cfg.dqn
    assert (d.batch_size, d.lr, d.replay_capacity, d.learning_starts_frames) == (
        32, 2.5e-4, 100_000, 5_000
    )  # fmt: skip
    assert (d.target_update_interval, d.eps_start, d.eps_end, d.eps_decay_frames) == (
        1_000, 1.0, 0.1, 100_000
    )  # fmt: skip
    assert cfg.env.num_envs == 1
    updates_per_step = d.training_intensity * cfg.collector.steps_per_batch / d.batch_size
    assert updates_per_step / cfg.collector.steps_per_batch == 1.0


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory) -> Path:
    """The MinAtar DQN preset with C51 and dueling heads, shrunk to two update phases, with an
    evaluation at the end (also what ``accelrl.tools.play`` reads)."""
    from recipes import dqn_atari

    run = tmp_path_factory.mktemp("minatar") / "dqn"
    cfg = tiny(dqn_atari, run, dqn__preset="minatar", dqn__distributional=True, dqn__dueling=True,
               dqn__learning_starts_frames=64, dqn__replay_capacity=2048)  # fmt: skip
    cfg.collector.steps_per_batch = 16
    cfg.total_frames = 96
    cfg.log.eval_episodes = 1
    summary = dqn_atari.train(cfg)
    assert summary["frames"] >= 96 and summary["updates"] >= 1
    return run


def test_dqn_family_trains_on_minatar(dqn_run):
    assert list((dqn_run / "checkpoints").glob("ckpt_*.pt"))
    assert (dqn_run / "eval.csv").read_text().count("\n") >= 2  # header and one evaluation


def test_play_records_a_minatar_video(dqn_run, tmp_path):
    import imageio_ffmpeg

    from accelrl.tools.play import PlayConfig, play

    video = tmp_path / "breakout.mp4"
    out = play(PlayConfig(run_dir=str(dqn_run), episodes=2, video=str(video), epsilon=0.1))
    assert len(out["scores"]) == 2
    frames = imageio_ffmpeg.read_frames(str(video))
    meta = next(frames)
    assert tuple(meta["size"]) == (160, 160)
    assert sum(1 for _ in frames) == out["lengths"][0] + 1  # the reset's screen, then each step
