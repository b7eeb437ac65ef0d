"""The Atari env stacks behind ``accelrl.envs.make_env``: both backends' keys, specs and semantics.

The ``gym`` backend spawns ``ParallelEnv`` workers (a few seconds each), so its envs are built
once per module and shared by the tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from accelrl.config import EnvConfig
from accelrl.envs import make_env
from accelrl.envs.gym_atari import AtariWorkerEnv, make_gym_atari_env

torch.set_num_threads(1)

BACKENDS = ("ale_vec", "gym")
NUM_ENVS = 2

# key -> (shape after the batch dims, dtype), as documented in accelrl/envs/ale_vec.py.
ROOT_KEYS = {
    "pixels": ((4, 84, 84), torch.uint8),
    "score": ((1,), torch.float32),
    "life_lost": ((1,), torch.bool),
    "episode_return": ((1,), torch.float32),
    "episode_length": ((1,), torch.int64),
    "env_id": ((1,), torch.int64),
    "done": ((1,), torch.bool),
    "terminated": ((1,), torch.bool),
    "truncated": ((1,), torch.bool),
}
NEXT_KEYS = {**ROOT_KEYS, "reward": ((1,), torch.float32)}


def breakout_cfg(backend: str) -> EnvConfig:
    # No sticky actions: a game over then always comes after exactly 4 lost lives.
    return EnvConfig(game="Breakout", num_envs=NUM_ENVS, backend=backend, sticky_actions=0.0)


@pytest.fixture(scope="module")
def envs():
    built = {b: make_env(breakout_cfg(b), seed=0) for b in BACKENDS}
    yield built
    for env in built.values():
        env.close(raise_if_closed=False)


@pytest.fixture(scope="module")
def long_rollouts(envs):
    """A 400-step random-policy Breakout rollout per backend (about two episodes per env)."""
    out = {}
    for backend, env in envs.items():
        torch.manual_seed(0)
        out[backend] = env.rollout(400, break_when_any_done=False)
    return out


def spec_summary(env) -> dict:
    def leaves(spec):
        return {
            k: (tuple(v.shape), v.dtype, type(v).__name__)
            for k, v in spec.items(include_nested=True, leaves_only=True)
        }

    return {
        "observation": leaves(env.observation_spec),
        "reward": leaves(env.full_reward_spec),
        "done": leaves(env.full_done_spec),
        "action": leaves(env.full_action_spec),
        "action_n": env.action_spec.space.n,
        "state": leaves(env.full_state_spec),
        "batch_size": tuple(env.batch_size),
    }


def check_keys(td, keys: dict, batch: tuple[int, ...]) -> None:
    for key, (shape, dtype) in keys.items():
        assert key in td.keys(), f"missing {key!r}"
        assert td[key].shape == (*batch, *shape), (key, td[key].shape)
        assert td[key].dtype == dtype, (key, td[key].dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_and_rollout_keys(envs, backend):
    env = envs[backend]
    assert tuple(env.batch_size) == (NUM_ENVS,)
    td = env.reset()
    check_keys(td, ROOT_KEYS, (NUM_ENVS,))
    assert td["env_id"].flatten().tolist() == list(range(NUM_ENVS))
    assert not td["done"].any() and not td["life_lost"].any()
    assert (td["episode_length"] == 0).all() and (td["episode_return"] == 0).all()
    roll = env.rollout(50, break_when_any_done=False)
    assert tuple(roll.batch_size) == (NUM_ENVS, 50)
    check_keys(roll, {**ROOT_KEYS, "action": ((), torch.int64)}, (NUM_ENVS, 50))
    check_keys(roll["next"], NEXT_KEYS, (NUM_ENVS, 50))
    pixels = roll["next", "pixels"]
    assert pixels.dtype == torch.uint8 and 0 < pixels.max() <= 255
    # Each worker/simulator keeps its row.
    assert (roll["next", "env_id"][..., 0] == torch.arange(NUM_ENVS)[:, None]).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_env_specs(envs, backend):
    check_env_specs(envs[backend])


def test_backends_have_identical_specs(envs):
    ale, gym = (spec_summary(envs[b]) for b in BACKENDS)
    assert ale == gym
    assert envs["ale_vec"].observation_spec == envs["gym"].observation_spec
    assert envs["ale_vec"].full_done_spec == envs["gym"].full_done_spec
    assert envs["ale_vec"].full_reward_spec == envs["gym"].full_reward_spec
    assert envs["ale_vec"].full_action_spec == envs["gym"].full_action_spec


def column(td, key) -> np.ndarray:
    """A ``[N, T, 1]`` entry as an ``[N, T]`` numpy array."""
    return td[key][..., 0].numpy()


@pytest.mark.parametrize("backend", BACKENDS)
def test_rewards_and_episode_stats(long_rollouts, backend):
    nxt = long_rollouts[backend]["next"]
    assert torch.equal(nxt["reward"], torch.sign(nxt["score"]))
    pixels = nxt["pixels"]
    assert pixels.dtype == torch.uint8 and pixels.min() >= 0 and pixels.max() <= 255
    score, done = column(nxt, "score"), column(nxt, "done")
    ep_return, ep_length = column(nxt, "episode_return"), column(nxt, "episode_length")
    assert np.abs(score).sum() > 0, "the random policy scored nothing; the checks below are empty"
    finished = 0
    for row in range(NUM_ENVS):
        total, length = 0.0, 0
        for t in range(score.shape[1]):
            total += score[row, t]
            length += 1
            # Running values on every step, the episode's totals on its done step.
            assert ep_return[row, t] == total and ep_length[row, t] == length, (row, t)
            if done[row, t]:
                finished += 1
                total, length = 0.0, 0
    assert finished >= 1, "no episode ended in the rollout"


@pytest.mark.parametrize("backend", BACKENDS)
def test_life_loss_does_not_end_episode(long_rollouts, backend):
    nxt = long_rollouts[backend]["next"]
    life_lost, done = column(nxt, "life_lost"), column(nxt, "done")
    terminated = column(nxt, "terminated")
    assert life_lost.any()
    assert not (life_lost & done).any(), "a life loss ended an episode"
    game_overs = 0
    for row in range(NUM_ENVS):
        lost = 0
        for t in range(done.shape[1]):
            lost += int(life_lost[row, t])
            if done[row, t]:
                if terminated[row, t]:
                    # Breakout has 5 lives: 4 flagged losses, then the 5th ends the game.
                    assert lost == 4, (row, t, lost)
                    game_overs += 1
                lost = 0
    assert game_overs >= 1


class FixedActions:
    """A policy replaying one action sequence in every env of the batch."""

    def __init__(self, actions) -> None:
        self.actions = iter(actions)

    def __call__(self, td):
        td["action"] = torch.full(td.batch_size, next(self.actions), dtype=torch.int64)
        return td


def reference_stacks(actions, seed=0):
    """gymnasium's ``AtariPreprocessing`` on Pong plus a zero-filled 4-frame stack."""
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing

    gym.register_envs(ale_py)
    env = AtariPreprocessing(
        gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0),
        noop_max=0,
        frame_skip=4,
        screen_size=84,
        terminal_on_life_loss=False,
        grayscale_obs=True,
    )
    obs, _ = env.reset(seed=seed)
    stack = np.zeros((4, 84, 84), np.uint8)
    stack[-1] = obs
    stacks, scores, dones = [stack.copy()], [], []
    for a in actions:
        obs, score, terminated, truncated, _ = env.step(int(a))
        stack[:-1] = stack[1:]
        stack[-1] = obs
        stacks.append(stack.copy())
        scores.append(score)
        dones.append(terminated or truncated)
    env.close()
    return np.stack(stacks), np.array(scores, np.float32), np.array(dones)


@pytest.mark.numerics
def test_preprocessing_matches_gymnasium_atari_preprocessing():
    """Both backends against ``AtariPreprocessing`` over one deterministic Pong action sequence.

    Without sticky actions, no-ops or FIRE at reset, ALE is deterministic, so the frames must
    agree although the ALE seeds differ (gymnasium derives its ALE seed from ``seed``). Both
    apply the action ``frameskip`` times, max-pool the last two grayscale frames and resize with
    OpenCV's INTER_AREA: the gym backend runs ``AtariPreprocessing`` itself and must be exact;
    ale_vec resizes with the OpenCV built into ale-py's C++ code, which gave identical frames
    here (ale-py 0.12.1) but is held to a tolerance of a few rounding differences in case an
    OpenCV build rounds differently.
    """
    steps = 300
    actions = np.random.default_rng(0).integers(0, 6, size=steps)
    ref_stacks, ref_scores, ref_dones = reference_stacks(actions)
    assert (ref_scores != 0).any() and not ref_dones.any()
    for backend in BACKENDS:
        cfg = EnvConfig(
            game="Pong",
            num_envs=1,
            backend=backend,
            sticky_actions=0.0,
            noop_max=0,
            fire_reset=False,
        )
        env = make_env(cfg, seed=0)
        try:
            assert env.action_spec.space.n == 6
            roll = env.rollout(steps, policy=FixedActions(actions), break_when_any_done=False)
        finally:
            env.close(raise_if_closed=False)
        pixels = torch.cat([roll["pixels"][0], roll["next", "pixels"][0, -1:]]).numpy()
        diff = np.abs(pixels.astype(np.int16) - ref_stacks.astype(np.int16))
        if backend == "gym":
            assert diff.max() == 0, backend
        else:
            assert diff.max() <= 2 and (diff > 0).mean() < 0.01, (backend, diff.max())
        np.testing.assert_array_equal(roll["next", "score"][0, :, 0].numpy(), ref_scores)
        np.testing.assert_array_equal(roll["next", "done"][0, :, 0].numpy(), ref_dones)


def test_ale_vec_async_mode():
    env = make_env(EnvConfig(game="Pong", num_envs=4, async_batch_size=2), seed=0)
    try:
        assert tuple(env.batch_size) == (2,)
        roll = env.rollout(40, break_when_any_done=False)
    finally:
        env.close(raise_if_closed=False)
    assert tuple(roll.batch_size) == (2, 40)
    check_keys(roll["next"], NEXT_KEYS, (2, 40))
    ids = roll["next", "env_id"][..., 0]
    assert ((ids >= 0) & (ids < 4)).all()
    assert len(ids.unique()) > 2
    assert (ids != ids[:, :1]).any(), "env_id never changed across steps"
    assert (ids[0] != ids[1]).all(), "one simulator filled two rows of a step"


@pytest.mark.parametrize("backend", BACKENDS)
def test_unknown_game(backend):
    with pytest.raises(ValueError, match="Pongg"):
        make_env(EnvConfig(game="Pongg", backend=backend), seed=0)
    with pytest.raises(ValueError, match="Pongg"):
        make_gym_atari_env(EnvConfig(game="Pongg", backend="gym"), 2, seed=0)


def test_gym_worker_seeds():
    """Worker ``i`` of a gym-backend env made with ``seed`` plays as worker 0 seeded ``seed + i``
    (run in-process: the same class runs in every ParallelEnv worker)."""
    cfg = EnvConfig(game="Pong", backend="gym")  # sticky actions and no-ops: seeds matter

    def play(worker_index, seed, set_seed=None):
        env = AtariWorkerEnv(cfg, worker_index=worker_index, seed=seed)
        if set_seed is not None:
            assert env.set_seed(set_seed) == set_seed  # ParallelEnv passes it on unchanged
        policy = FixedActions(np.random.default_rng(1).integers(0, 6, size=30))
        roll = env.rollout(30, policy=policy, break_when_any_done=False)
        env.close()
        assert (roll["env_id"] == worker_index).all()
        return roll["next", "pixels"]

    reference = play(1, 0)
    assert torch.equal(play(0, 1), reference)
    assert torch.equal(play(1, 100, set_seed=0), reference)
    assert not torch.equal(play(0, 0), reference)


WORKER_SIGINT = """
import os, signal, sys
from accelrl.config import EnvConfig
from accelrl.envs.gym_atari import make_worker_env
parent = int(sys.argv[1]) if len(sys.argv) > 1 else None
# Python's own handler, as in a shell's foreground job (a background job of a script starts
# with SIGINT ignored, which would read as "ignored" whatever the factory does).
signal.signal(signal.SIGINT, signal.default_int_handler)
make_worker_env(EnvConfig(game="Pong", backend="gym"), seed=0, worker_index=0, parent_pid=parent)
print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
"""


def test_gym_workers_ignore_ctrl_c_and_the_parent_does_not():
    """A terminal's Ctrl-C reaches every ParallelEnv worker; the learner alone decides when to
    stop (``accelrl.process.StopSignals``). The factory also runs in the parent (for specs),
    which must keep its SIGINT handler."""
    import os
    import subprocess
    import sys

    def ignores(*args: str) -> str:
        cmd = [sys.executable, "-c", WORKER_SIGINT, *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()

    assert ignores(str(os.getpid())) == "True"  # a worker: its parent made the factory
    assert ignores() == "False"  # no parent pid given: nothing changes
    code = WORKER_SIGINT.replace("int(sys.argv[1])", "os.getpid()")
    out = subprocess.run([sys.executable, "-c", code, "x"], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr  # the parent itself


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_at_frame_cap(backend):
    """``max_episode_frames`` counts emulator frames from the end of the reset: 202 frames at
    frameskip 4 end the episode on its 51st agent step, truncated and not terminated."""
    cfg = EnvConfig(game="Pong", num_envs=1, backend=backend, max_episode_frames=202)
    # The gym backend's worker, in-process (what each ParallelEnv worker runs).
    env = make_env(cfg, seed=0) if backend == "ale_vec" else AtariWorkerEnv(cfg, seed=0)
    try:
        nxt = env.rollout(60, break_when_any_done=False)["next"]
    finally:
        env.close()
    truncated = nxt["truncated"].reshape(-1).nonzero().flatten().tolist()
    assert truncated == [50]
    assert not nxt["terminated"].any()
    assert nxt["episode_length"].reshape(-1)[50].item() == 51


def same_action_rollout(cfg: EnvConfig, steps: int) -> torch.Tensor:
    """Frames [steps + 1, N, ...] with one random action sequence shared by every row."""
    env = make_env(cfg, seed=0, sim_threads=1)
    try:
        td = env.reset()
        frames = [td["pixels"].clone()]
        gen = torch.Generator().manual_seed(123)
        for _ in range(steps):
            action = torch.randint(env.action_spec.space.n, (1,), generator=gen)
            td = env.step(td.set("action", action.expand(cfg.num_envs).clone()))["next"]
            frames.append(td["pixels"].clone())
    finally:
        env.close()
    return torch.stack(frames)


def rows_all_equal(frames: torch.Tensor) -> bool:
    return all(torch.equal(frames[:, 0], frames[:, i]) for i in range(1, frames.shape[1]))


@pytest.mark.parametrize(
    "changes,identical",
    [
        ({}, True),  # ALE is deterministic: same actions, same frames in every simulator
        ({"noop_max": 30}, False),  # random no-op starts put them at different points
        ({"sticky_actions": 0.25}, False),  # repeated actions at random
    ],
    ids=["deterministic", "noop-starts", "sticky-actions"],
)
def test_ale_vec_noop_starts_and_sticky_actions_reach_the_simulators(changes, identical):
    base = dict(game="Pong", num_envs=4, sticky_actions=0.0, noop_max=0)
    frames = same_action_rollout(EnvConfig(**{**base, **changes}), steps=80)
    assert rows_all_equal(frames) == identical


def test_ale_vec_fire_reset_starts_breakout():
    base = dict(game="Breakout", num_envs=2, sticky_actions=0.0, noop_max=0)
    fired = same_action_rollout(EnvConfig(**base, fire_reset=True), steps=3)
    idle = same_action_rollout(EnvConfig(**base, fire_reset=False), steps=3)
    assert not torch.equal(fired, idle)


def noop_lives(cfg: EnvConfig, steps: int) -> tuple[list[int], torch.Tensor]:
    """An agent that only ever chooses NOOP: (lives lost per row, ``action`` as recorded)."""
    env = make_env(cfg, seed=0, sim_threads=1)
    try:
        td = env.reset()
        lost, recorded = torch.zeros(cfg.num_envs, dtype=torch.int64), []
        for _ in range(steps):
            td.set("action", torch.zeros(env.batch_size, dtype=torch.int64))
            out = env.step(td)
            recorded.append(out["action"].clone())
            nxt = out["next"]
            ended = nxt["life_lost"].reshape(-1) | nxt["done"].reshape(-1)
            lost.index_add_(0, nxt["env_id"].reshape(-1), ended.long())
            td = nxt
    finally:
        env.close()
    return lost.tolist(), torch.stack(recorded)


@pytest.mark.parametrize("async_batch_size", [0, 1], ids=["sync", "async"])
def test_fire_on_life_loss_serves_the_ball_after_every_lost_life(async_batch_size):
    """Breakout waits for FIRE after a lost life: an agent that never presses it loses one life
    (the ball served at reset) and then waits forever; with ``fire_on_life_loss`` the simulator
    presses FIRE on the step after each loss, so the same agent keeps losing lives. The recorded
    action stays the agent's."""
    base = dict(game="Breakout", num_envs=2, sticky_actions=0.0, noop_max=0)
    base["async_batch_size"] = async_batch_size
    waiting, _ = noop_lives(EnvConfig(**base), 800)
    assert max(waiting) <= 1, waiting
    fired, recorded = noop_lives(EnvConfig(**base, fire_on_life_loss=True), 800)
    assert min(fired) >= 3, fired
    assert not recorded.any()


def test_fire_on_life_loss_needs_an_atari_game_with_fire():
    from accelrl.validate import ConfigError, validate_env

    validate_env(EnvConfig(game="Breakout", fire_on_life_loss=True))
    for cfg, words in [
        (EnvConfig(game="CartPole-v1", fire_on_life_loss=True), "is for Atari games"),
        (EnvConfig(game="MsPacman", fire_on_life_loss=True), "has no FIRE action"),
        (EnvConfig(game="Breakout", backend="gym", fire_on_life_loss=True), "backend ale_vec"),
    ]:
        with pytest.raises(ConfigError, match=words):
            validate_env(cfg)
