"""Evaluation episodes: a policy that stops acting is reported, and the wait is shown."""

import torch
from tensordict import TensorDictBase
from torch import nn

from accelrl.config import EnvConfig
from accelrl.run.evaluate import run_episodes


class AlwaysNoop(nn.Module):
    """Breakout's NOOP forever: after FIRE on reset serves the first ball and it is lost, the
    game waits for FIRE and the episode plays on to the frame cap."""

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        return td


def breakout(cap_frames: int) -> EnvConfig:
    return EnvConfig(game="Breakout", num_envs=2, max_episode_frames=cap_frames)


def test_episodes_ended_by_the_frame_cap_are_counted():
    ticks = []
    cpu = torch.device("cpu")
    capped = run_episodes(breakout(2000), AlwaysNoop(), episodes=2, seed=0, device=cpu,
                          greedy=True, on_step=ticks.append)  # fmt: skip
    assert capped.truncated == 2 and capped.returns == [0.0, 0.0]
    assert len(ticks) == 2000 // 4 and sum(ticks) == 2  # one call per step, both ended


def test_a_stuck_greedy_evaluation_is_explained_and_shown(tmp_path, capsys, monkeypatch):
    from recipes.a2c_atari import Config
    from recipes.a2c_atari import train as train_a2c

    cfg = Config(total_frames=320, run_dir=str(tmp_path / "run"))
    cfg.env = breakout(1200)
    cfg.env.num_envs = 4
    cfg.collector.steps_per_batch = 80
    cfg.log.tensorboard = False
    cfg.log.eval_episodes = 2
    # An untrained policy's argmax on Breakout is one fixed action for most frames: the greedy
    # episodes end at the cap unless that action is FIRE; evaluate NOOP to be sure.
    import accelrl.run.folder as rf

    real = rf.evaluate
    monkeypatch.setattr(rf, "evaluate", lambda env, policy, **kw: real(env, AlwaysNoop(), **kw))
    summary = train_a2c(cfg)
    assert summary["eval/greedy_return"] == 0.0
    err = capsys.readouterr().err  # accelrl's log lines and bars go to stderr
    assert "2 of 2 greedy episodes played on to the 1200-frame cap" in err
    assert "evaluation episodes 4/4: " in err  # the side bar's last line (stderr is a file)
