"""Checkpoints hold everything a run needs: a save/load round trip restores every piece of live
state exactly.

At each checkpoint the test records the run's *live* state, found independently of what the
components choose to save: every network's parameters and buffers, every optimizer's state
(Adam moments, step counts), target-network updaters' counters, epsilon, the torch / numpy /
Python RNG streams, the frame and update counters and the logger's rows. A second run then
resumes from the last checkpoint and the same record, taken right after it has loaded, must be
equal. A checkpoint that dropped the optimizer, a target network, the RNG streams or a counter
fails here, where a comparison of two resumed runs (both re-seeded from ``cfg.seed``) would not.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

import numpy as np
import pytest
import torch

from accelrl.run.folder import RunFolder
from accelrl.run.progress import Progress


class StopAfterResume(Exception):
    pass


def live_state(run: RunFolder, progress: Progress) -> dict[str, Any]:
    state: dict[str, Any] = {
        "frames": progress.frames,
        "updates": progress.updates,
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        },
        # The wall clock runs on between the two records.
        "logger": {k: v for k, v in run.logger.state_dict().items() if k != "elapsed_s"},
    }
    for i, module in enumerate(run.modules()):
        state[f"module{i}"] = {k: v.detach().clone() for k, v in module.state_dict().items()}
    for name, comp in run.components.items():
        for attr, value in vars(comp).items():
            if isinstance(value, torch.optim.Optimizer):
                state[f"{name}.{attr}"] = value.state_dict()
            elif isinstance(value, torch.nn.Module):
                # Loss modules hold the target network's parameters among their own.
                state[f"{name}.{attr}"] = {
                    k: v.detach().clone() for k, v in value.state_dict().items()
                }
            elif hasattr(value, "counter"):  # target-network updaters
                state[f"{name}.{attr}.counter"] = int(value.counter)
    return state


def assert_same(a: Any, b: Any, path: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape, path
        assert torch.equal(a.cpu(), b.cpu()), f"{path} differs after resume"
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), f"{path} differs after resume"
    elif isinstance(a, dict):
        assert set(a) == set(b), f"{path}: keys {sorted(map(str, set(a) ^ set(b)))} differ"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


CARTPOLE_RUNS = {
    "ppo": ("ppo_atari", {"ppo": {"epochs": 2, "minibatches": 2}}),
    # Frames: the actor-critic shares a Nature CNN trunk that the PPO loss does not hold.
    "ppo-pong": (
        "ppo_atari",
        {
            "ppo": {"epochs": 1, "minibatches": 2},
            "env": {"game": "Pong", "max_episode_frames": 400},
            "log": {"eval_episodes": 0},
        },
    ),
    "a2c": ("a2c_atari", {}),
    "dqn": (
        "dqn_atari",
        {
            "dqn": {
                "batch_size": 32,
                "learning_starts_frames": 128,
                "replay_capacity": 4096,
                "target_update_interval": 7,
                "prioritized": True,
                "n_step": 3,
                "eps_decay_frames": 2000,
            }
        },
    ),
    # The acting epsilon (set per batch) and RAdam's state.
    "pqn": ("pqn_atari", {"pqn": {"epochs": 2, "minibatches": 2, "eps_decay_fraction": 0.5}}),
}


def config(recipe: str, sections: dict, run_dir, total_frames: int, resume: bool):
    module = importlib.import_module(f"recipes.{recipe}")
    cfg = module.Config(total_frames=total_frames, run_dir=str(run_dir), resume=resume, seed=3)
    cfg.env.game, cfg.env.num_envs = "CartPole-v1", 4
    cfg.collector.steps_per_batch = 64
    cfg.log.progress, cfg.log.tensorboard, cfg.log.eval_episodes = False, False, 1
    cfg.log.checkpoint_every_frames = 256
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(cfg, section), key, value)
    return module, cfg


@pytest.mark.parametrize("algo", list(CARTPOLE_RUNS))
def test_checkpoint_round_trip_restores_all_live_state(tmp_path, monkeypatch, algo):
    recipe, sections = CARTPOLE_RUNS[algo]
    saved: list[dict] = []
    real_checkpoint, real_restore = RunFolder.checkpoint, RunFolder.restore

    def checkpoint(self, progress):
        saved.append(live_state(self, progress))
        return real_checkpoint(self, progress)

    monkeypatch.setattr(RunFolder, "checkpoint", checkpoint)
    total = 640 * (4 if "pong" in algo else 1)  # emulator frames: 4 per Atari agent step
    module, cfg = config(recipe, sections, tmp_path, total, resume=False)
    module.train(cfg)
    assert [s["frames"] for s in saved][-1] == total
    assert saved[-1]["updates"] > 0

    restored: list[dict] = []

    def restore(self, *args, **kwargs):
        progress = real_restore(self, *args, **kwargs)
        restored.append(live_state(self, progress))
        raise StopAfterResume

    monkeypatch.setattr(RunFolder, "restore", restore)
    module, cfg = config(recipe, sections, tmp_path, 2 * total, resume=True)
    with pytest.raises(StopAfterResume):
        module.train(cfg)
    assert_same(saved[-1], restored[0], algo)
