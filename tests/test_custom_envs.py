"""Your own gymnasium env from the command line and from Python (``--env.game module:Id``,
``--env.kwargs``): it trains with every recipe, a run folder finds it again, and an env or space
accelrl cannot run stops before anything starts with one line. The envs: tests/custom_envs.py."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from accelrl.cli import run_recipe
from tests.helpers import TEST_THREADS
from tests.test_bad_input import assert_one_clear_line, run_cli

MEMORY = "tests.custom_envs:CueMemory-v0"
IMAGE = "tests.custom_envs:CueImage-v0"


def tiny(*extra: str, frames: int = 2048) -> list[str]:
    """Flags of a run of a few seconds: 4 simulators, 64 steps a batch, ``frames`` frames."""
    return ["--env.num-envs", "4", "--collector.steps-per-batch", "64", "--threads.torch-threads",
            str(TEST_THREADS), "--log.eval-episodes", "1", "--log.no-tensorboard",
            "--log.no-progress", "--total-frames", str(frames), *extra]  # fmt: skip


def train_cli(recipe: str, argv: list[str], capsys) -> dict:
    module = importlib.import_module(f"recipes.{recipe}")
    summary = run_recipe(module.Config, module.train, description="", argv=argv)
    capsys.readouterr()
    return summary


def test_custom_env_with_an_lstm_trains_from_the_command_line_and_plays(tmp_path, capsys):
    from accelrl.tools.play import main as play

    run = tmp_path / "run"
    flags = tiny("--env.game", MEMORY, "--env.kwargs", '{"delay": 2}', "--model.recurrent",
                 "lstm", "--run-dir", str(run))  # fmt: skip
    summary = train_cli("ppo_atari", flags, capsys)
    assert summary["frames"] == 2048 and summary["episodes"] > 0
    env = json.loads((run / "config.json").read_text())["config"]["env"]
    assert (env["game"], env["kwargs"]) == (MEMORY, '{"delay": 2}')  # the module, for play
    play([str(run), "--episodes", "2"])
    out = capsys.readouterr().out
    assert "episode 2: score" in out and f"of {MEMORY}" in out
    # Each episode is the delay, the query and its answer: 4 steps at delay 2.
    assert "4 steps" in out


def test_custom_env_trains_from_python(tmp_path):
    from accelrl.config import EnvConfig
    from recipes.a2c_atari import Config, train

    cfg = Config(env=EnvConfig(game=MEMORY, kwargs='{"delay": 1}', num_envs=4),
                 total_frames=1024, run_dir=str(tmp_path))  # fmt: skip
    cfg.collector.steps_per_batch = 20
    cfg.threads.torch_threads = TEST_THREADS
    cfg.log.progress = cfg.log.tensorboard = False
    cfg.log.eval_episodes = 1
    summary = train(cfg)
    assert summary["frames"] >= 1024 and summary["episodes"] > 0


@pytest.mark.parametrize(
    "recipe,extra",
    [
        ("ppo_atari", ["--env.screen-size", "36"]),
        ("ppo_atari", ["--env.screen-size", "36", "--env.kwargs", '{"channels_first": true}']),
        (
            "dqn_atari",
            [
                "--env.screen-size",
                "36",
                "--dqn.learning-starts-frames",
                "128",
                "--dqn.replay-capacity",
                "1024",
            ],
        ),
    ],  # fmt: skip
    ids=["ppo HxWxC", "ppo CxHxW", "dqn HxWxC"],
)
def test_image_observations_get_the_atari_stack_and_a_cnn(recipe, extra, tmp_path, capsys):
    from accelrl.config import EnvConfig
    from accelrl.envs import describe_env

    spec = describe_env(EnvConfig(game=IMAGE, screen_size=36))
    assert (spec["obs_key"], spec["obs_shape"]) == ("pixels", (4, 36, 36))
    summary = train_cli(recipe, tiny("--env.game", IMAGE, "--run-dir", str(tmp_path), *extra,
                                     frames=512), capsys)  # fmt: skip
    assert summary["frames"] == 512 and summary["updates"] > 0


def test_custom_env_in_collector_worker_processes(tmp_path, capsys):
    """The async kind's workers are processes of their own: each imports the env's module."""
    flags = tiny("--env.game", MEMORY, "--run-dir", str(tmp_path), "--collector.steps-per-batch",
                 "32", frames=256)  # fmt: skip
    summary = train_cli("appo_atari", flags, capsys)  # 2 worker processes by default
    assert summary["frames"] >= 256


BAD = [
    (["--env.game", "tests.custom_envs:ContinuousActions-v0"],
     ["action space Box(-1.0, 1.0, (1,), float32)", "Discrete actions"]),
    (["--env.game", "tests.custom_envs:DictObservations-v0"],
     ["observation space Dict(", "image Box"]),
    (["--env.game", "no_such_package.envs:Mine-v0"],
     ["cannot import module 'no_such_package.envs'", "PYTHONPATH"]),
    (["--env.game", "tests.custom_envs:Mine-v0"], ["registered no env 'Mine-v0'"]),
    (["--env.game", MEMORY, "--env.kwargs", "{delay: 2}"], ["--env.kwargs=", "JSON object"]),
    (["--env.game", MEMORY, "--env.kwargs", '{"dely": 2}'], ["does not take them", "dely"]),
    (["--env.game", IMAGE, "--env.screen-size", "20"], ["--env.screen-size=20", ">= 36"]),
    (["--env.kwargs", '{"delay": 2}'], ["--env.kwargs=", "gymnasium envs", "not Pong"]),
]  # fmt: skip
CASES = [(r, flags, words) for r in ("ppo_atari", "a2c_atari", "appo_atari", "dqn_atari")
         for flags, words in BAD]  # fmt: skip


@pytest.mark.parametrize("recipe,flags,words", CASES,
                         ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])  # fmt: skip
def test_an_env_accelrl_cannot_run_stops_with_one_line(recipe, flags, words, capsys, monkeypatch):
    def no_run(self, *args, **kwargs):
        raise AssertionError(f"validation let {flags} through: a run started")

    monkeypatch.setattr("accelrl.run.folder.RunFolder.__init__", no_run)
    code, err = run_cli(recipe, flags, capsys)
    assert_one_clear_line(code, err, words)


def test_a_run_whose_env_module_is_gone_says_which(tmp_path, capsys, monkeypatch):
    """Play, and a resume, name the module a run folder's env needs when it cannot be
    imported."""
    from accelrl.tools.play import main as play

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "my_envs.py").write_text(
        "import gymnasium\n"
        "gymnasium.register(id='Mine-v0', entry_point='tests.custom_envs:CueMemory')\n"
    )
    monkeypatch.syspath_prepend(str(package))
    run = tmp_path / "run"
    train_cli("ppo_atari", tiny("--env.game", "my_envs:Mine-v0", "--run-dir", str(run),
                                frames=256), capsys)  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))  # not the module's folder
    sys.path.remove(str(package))
    monkeypatch.delitem(sys.modules, "my_envs")
    with pytest.raises(SystemExit) as stop:
        play([str(run)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "cannot import module 'my_envs'" in err, err
    code, err = run_cli("ppo_atari", tiny("--env.game", "my_envs:Mine-v0", "--run-dir",
                                          str(run), "--resume"), capsys)  # fmt: skip
    assert_one_clear_line(code, err, ["cannot import module 'my_envs'"])


def test_a_study_cell_folder_has_no_colon():
    from accelrl.study.grid import cell_folder

    assert cell_folder("ppo", "std", "my_envs:Mine-v0", 1) == "ppo/std/my_envs_Mine-v0/seed1"


@pytest.mark.parametrize(
    "kwargs", ['{"delay": 0}', '{"delay": 0, "channels_first": true}'], ids=["HxWxC", "CxHxW"]
)
def test_image_frames_are_grayscale_resized_and_stacked_from_zeros(kwargs):
    """As Atari's stack: each step's frame in gray at screen_size, the last frame_stack of
    them, zeros before an episode's first; an ended episode's final stack in ``next``."""
    import torch

    from accelrl.config import EnvConfig
    from accelrl.envs import make_env

    env = make_env(EnvConfig(game=IMAGE, kwargs=kwargs, num_envs=2, screen_size=36), seed=3)
    try:
        root = env.reset()
        cues = [env._vec.envs[i].unwrapped.cue for i in range(2)]
        pixels = root["pixels"]
        assert pixels.shape == (2, 4, 36, 36) and pixels.dtype == torch.uint8
        assert not pixels[:, :3].any()
        for row, cue in enumerate(cues):  # the cue lights one half, white in gray: 255
            lit, dark = (slice(0, 18), slice(18, 36)) if cue == 0 else (slice(18, 36), slice(0, 18))
            assert (pixels[row, -1][:, lit] == 255).all() and not pixels[row, -1][:, dark].any()
        first = pixels[:, -1].clone()
        td, root = env.step_and_maybe_reset(root.set("action", torch.zeros(2, dtype=torch.long)))
        nxt = td["next"]["pixels"]
        assert torch.equal(nxt[:, -2], first) and (nxt[:, -1] == 128).all()  # the query
        td, root = env.step_and_maybe_reset(root.set("action", torch.zeros(2, dtype=torch.long)))
        assert td["next"]["done"].all()  # answered: the episode ended
        final = td["next"]["pixels"]
        assert torch.equal(final[:, -3], first) and (final[:, -2] == 128).all()
        assert not final[:, -1].any()  # the blank frame after the answer
        assert not root["pixels"][:, :3].any() and root["pixels"][:, -1].any()  # a new episode
    finally:
        env.close()
