"""The env backend registry: which backend runs a game, and what each one answers for it."""

from __future__ import annotations

import pytest
import torch

from accelrl.config import EnvConfig
from accelrl.envs import UnknownGame, backend_for, backends, describe_env, frames_per_step
from accelrl.validate import ConfigError, validate_env


@pytest.mark.parametrize(
    "game,backend,chosen",
    [
        ("Pong", "ale_vec", "ale_vec"),
        ("ALE/Pong-v5", "gym", "gym"),
        ("CartPole-v1", "ale_vec", "classic"),  # the name chooses: --env.backend is for Atari
        ("CartPole-v1", "gym", "classic"),
    ],
)
def test_the_game_name_and_env_backend_choose_the_backend(game, backend, chosen):
    assert backend_for(EnvConfig(game=game, backend=backend)).name == chosen


def test_every_backend_is_registered_once_and_only_atari_ones_are_selectable():
    found = backends()
    assert {"ale_vec", "gym", "classic"} <= set(found)
    assert {n for n, b in found.items() if b.selectable} == {"ale_vec", "gym"}


def test_unknown_game_lists_what_each_backend_runs():
    with pytest.raises(UnknownGame) as info:
        backend_for(EnvConfig(game="Pongg"))
    message = str(info.value)
    assert "'Pongg'" in message and "'pong'" in message  # the close Atari name
    assert "Atari games" in message and "gymnasium ids" in message
    assert "\n" not in message


def test_env_backend_must_be_one_that_is_chosen_by_flag():
    with pytest.raises(ConfigError, match=r"--env.backend='classic': must be one of"):
        validate_env(EnvConfig(game="CartPole-v1", backend="classic"))


@pytest.mark.parametrize(
    "cfg,spec,frames",
    [
        (EnvConfig(game="Pong"), ("pixels", (4, 84, 84), 6), 4),
        (EnvConfig(game="Breakout", backend="gym", frame_stack=2, frameskip=3),
         ("pixels", (2, 84, 84), 4), 3),
        (EnvConfig(game="CartPole-v1"), ("observation", (4,), 2), 1),
    ],
)  # fmt: skip
def test_describe_and_frames_per_step_come_from_the_backend(cfg, spec, frames):
    found = describe_env(cfg)
    assert (found["obs_key"], found["obs_shape"], found["num_actions"]) == spec
    assert frames_per_step(cfg) == frames


def test_atari_description_matches_the_env_it_builds():
    """Atari backends describe their frames without building a simulator: the description
    must be what ``make_env`` builds."""
    from accelrl.envs import make_env

    cfg = EnvConfig(game="SpaceInvaders", num_envs=1, frame_stack=3, screen_size=64)
    env = make_env(cfg, seed=0)
    try:
        found = describe_env(cfg)
        assert tuple(env.observation_spec["pixels"].shape[1:]) == found["obs_shape"]
        assert env.num_actions == found["num_actions"]
    finally:
        env.close()


def test_atari_games_without_the_atari_extra_are_one_line_naming_it(monkeypatch, capsys):
    """ale-py (GPL-2.0) is the optional extra ``atari``: without it an Atari game stops before
    anything starts, with one line naming the extra; other games are unaffected."""
    import sys

    from accelrl.cli import run_recipe
    from accelrl.envs import games
    from recipes import ppo_atari

    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py now fails
    games.available_games.cache_clear()
    try:
        with pytest.raises(UnknownGame, match=r"accelrl\[atari\]"):
            backend_for(EnvConfig(game="Pong"))
        assert backend_for(EnvConfig(game="CartPole-v1")).name == "classic"
        with pytest.raises(SystemExit) as exit_info:
            run_recipe(ppo_atari.Config, ppo_atari.train, description="",
                       argv=["--env.game", "Pong", "--log.no-progress"])  # fmt: skip
        assert exit_info.value.code == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and err[0].startswith("accelrl: error: invalid --env.game='Pong'")
        assert err[0].endswith('Atari games need the optional extra: pip install "accelrl[atari]"')
    finally:
        games.available_games.cache_clear()


def test_zero_cost_simulators_follow_their_schedule():
    """``Null/Atari`` and ``Null/CartPole`` (``accelrl.envs.null``): observations of the shape
    and dtype named, episodes of 30, 40 or 60 steps by row, every fourth one truncated, reward
    1 on every eighth step, through the batched env's usual keys."""
    from accelrl.envs import make_env
    from accelrl.envs.null import EPISODE_LENGTHS

    for game, key, shape, dtype in [
        ("Null/Atari", "pixels", (4, 84, 84), torch.uint8),
        ("Null/CartPole", "observation", (4,), torch.float32),
    ]:
        assert describe_env(EnvConfig(game=game))["obs_shape"] == shape
        env = make_env(EnvConfig(game=game, num_envs=3), seed=0)
        root = env.reset()
        assert root[key].shape == (3, *shape) and root[key].dtype == dtype
        lengths, truncated, rewards = [], 0, 0.0
        for _ in range(480):
            root["action"] = torch.zeros(3, dtype=torch.int64)
            step, root = env.step_and_maybe_reset(root)
            nxt = step["next"]
            done = nxt["done"].squeeze(-1)
            lengths += nxt["episode_length"].squeeze(-1)[done].tolist()
            truncated += int(nxt["truncated"].sum())
            rewards += float(nxt["reward"].sum())
        full = [n for n in lengths if n in EPISODE_LENGTHS]
        assert len(full) >= len(lengths) - 3  # the first episode of a row starts mid-cycle
        assert truncated and truncated < len(lengths) / 2
        assert rewards == 3 * 480 / 8
        env.close()


def test_zero_cost_simulators_refuse_other_names():
    with pytest.raises(ConfigError, match="zero-cost simulators are Null/Atari"):
        validate_env(EnvConfig(game="Null/Pong"))
