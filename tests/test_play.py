"""``python -m accelrl.tools.play``: rebuilds a run's agent from its folder, loads its checkpoint
(the trained weights, not fresh ones), plays whole episodes and writes a readable MP4 with one frame
per agent step plus the reset frame; bad requests get one line and exit code 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import imageio_ffmpeg
import pytest
import torch
from tensordict import TensorDict

from accelrl.run.checkpoint import load_latest
from accelrl.tools.play import PlayConfig, load_agent

REPO = Path(__file__).resolve().parents[1]
QUIET = ["--log.eval-episodes", "0", "--log.no-tensorboard", "--log.no-progress"]


def train(recipe: str, run: Path, *flags: str, quiet: tuple[str, ...] = tuple(QUIET)) -> None:
    cmd = [sys.executable, str(REPO / "recipes" / f"{recipe}.py"), *flags, *quiet,
           "--run-dir", str(run)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]


def play(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "accelrl.tools.play", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)


@pytest.fixture(scope="module")
def pong_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("play") / "pong"
    # 400-frame episodes (100 agent steps) keep the played games short.
    train("ppo_atari", run, "--env.game", "Pong", "--env.num-envs", "2",
          "--collector.steps-per-batch", "64", "--ppo.minibatches", "2", "--ppo.epochs", "1",
          "--total-frames", "1024", "--env.max-episode-frames", "400")  # fmt: skip
    return run


def test_play_writes_a_video_of_the_first_episode(pong_run, tmp_path):
    video = tmp_path / "pong.mp4"
    out = play(str(pong_run), "--episodes", "2", "--video", str(video), "--epsilon", "0.05")
    assert out.returncode == 0, out.stderr[-2000:]
    episodes = re.findall(r"^episode \d+: score (-?[\d.]+), (\d+) steps", out.stdout, re.M)
    assert len(episodes) == 2, out.stdout
    assert "mean score" in out.stdout
    # Pong at 400 frames per episode: every game hits the cap at 100 agent steps.
    assert [int(steps) for _, steps in episodes] == [100, 100]
    frames = imageio_ffmpeg.read_frames(str(video))
    meta = next(frames)
    assert tuple(meta["size"]) == (160, 210)  # full-size RGB screen, not the 84x84 input
    assert sum(1 for _ in frames) == 100 + 1  # the reset frame and one per agent step


def test_play_acts_with_the_checkpoint_weights(pong_run):
    from accelrl.models import make_actor_critic

    loaded = load_agent(PlayConfig(run_dir=str(pong_run)))
    policy, path = loaded.policy, loaded.checkpoint
    state, newest = load_latest(pong_run)
    assert path == newest
    trained = make_actor_critic("pixels", (4, 84, 84), 6)
    trained.load_state_dict(state["components"]["ppo"]["model"])
    fresh = make_actor_critic("pixels", (4, 84, 84), 6)
    frames = TensorDict(
        pixels=torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8), batch_size=[8]
    )

    def logits(module):
        with torch.no_grad():
            return module(frames.clone()).get("logits")

    assert torch.equal(logits(policy), logits(trained.get_policy_operator()))
    assert not torch.equal(logits(policy), logits(fresh.get_policy_operator()))


@pytest.mark.parametrize(
    "recipe,flags",
    [
        ("dqn_atari", ["--dqn.learning-starts-frames", "128", "--total-frames", "512"]),
        ("pqn_atari", ["--pqn.minibatches", "2", "--total-frames", "256"]),
    ],
)
def test_play_a_q_learning_run_on_cartpole(tmp_path, recipe, flags):
    run = tmp_path / recipe
    train(recipe, run, "--env.game", "CartPole-v1", "--env.num-envs", "4",
          "--collector.steps-per-batch", "64", *flags)  # fmt: skip
    out = play(str(run), "--episodes", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(re.findall(r"^episode \d+: score", out.stdout, re.M)) == 2
    # Vector-observation envs have no screen to record: one line, before playing.
    no_video = play(str(run), "--video", str(tmp_path / "x.mp4"))
    assert no_video.returncode == 2
    assert no_video.stderr.strip() == (
        "accelrl.tools.play: error: --video records game screens, and CartPole-v1 "
        "(backend classic) has none"
    )


def test_play_errors_are_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = play(str(empty))
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"accelrl.tools.play: error: {empty} has no config.json: "
        "not a run folder written by a recipe"
    )
    (empty / "config.json").write_text('{"algo": "ppo", "config": {}}')
    out = play(str(empty))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "has no loadable checkpoint" in out.stderr


def test_training_records_videos_to_the_run_folder_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    train("ppo_atari", run, "--env.game", "Pong", "--env.num-envs", "2",
          "--collector.steps-per-batch", "64", "--ppo.minibatches", "2", "--ppo.epochs", "1",
          "--total-frames", "1024", "--env.max-episode-frames", "800",
          "--log.video-every-frames", "512", "--log.video-max-steps", "60",
          quiet=("--log.eval-episodes", "0", "--log.no-progress"))  # fmt: skip
    videos = sorted((run / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["frames_000000000512.mp4", "frames_000000001024.mp4"]
    for video in videos:
        frames = imageio_ffmpeg.read_frames(str(video))
        next(frames)
        assert sum(1 for _ in frames) == 60 + 1  # cut at --log.video-max-steps
    events = EventAccumulator(str(run / "tb"), size_guidance={"images": 0})
    events.Reload()
    images = events.Images("eval/video")
    assert [i.step for i in images] == [512, 1024]
    assert all(i.encoded_image_string[:6] == b"GIF89a" for i in images)
    assert (images[0].width, images[0].height) == (160, 210)
