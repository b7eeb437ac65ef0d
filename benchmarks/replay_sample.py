"""CartPole-sized DQN learner step: the recipe's replay sample and update next to the plain loop's.

The CartPole DQN recipe runs 128 gradient steps of batch 64 per 256 collected steps (RL-zoo's
intensity 32), so each step's fixed costs decide its learner speed (``benchmarks.learner_speed``
``dqn-cartpole``). This benchmark takes the collector and the simulators out: one process, one
torch thread, the same random CartPole transitions (4 simulators, 10k steps) in

- ``accelrl.replay.FrameReplay`` (the recipe's: frame-deduplicated rows, n-step windows,
  TorchRL's sum-tree sampler) and the plain loop's NumPy ring (``reference.classic``);
- ``sample``: drawing a batch of 64;
- ``step``: a sample and one gradient step: ``accelrl.algos.dqn.DQN.update`` (non-finite guard,
  metrics, target counter) against the plain loop's update (256x256 ReLU MLP, fused Adam on
  both sides, Huber loss, grad-norm clip, target copy every 128 steps).

Rounds alternate the two sides; the ratio is plain time / accelrl time (above 1: accelrl faster),
per round and as the median.

    python -m benchmarks.replay_sample [--rounds 5] [--reps 2000] [--json PATH]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from accelrl.algos.dqn import DQN, DQNConfig
from accelrl.config import EnvConfig
from accelrl.envs import make_env
from accelrl.replay import FrameReplay
from benchmarks.common import machine_info, write_json
from reference.classic import QNet, Replay

NUM_ENVS, STEPS, BATCH = 4, 2500, 64
SETTINGS = DQNConfig(
    lr=2.3e-3,
    adam_eps=1e-8,
    batch_size=BATCH,
    gamma=0.99,
    target_update_interval=128,
    max_grad_norm=10.0,
    replay_capacity=100_000,
)


def transitions():
    """A random-policy rollout ``[NUM_ENVS, STEPS]`` of CartPole-v1 through accelrl's env."""
    env = make_env(EnvConfig(game="CartPole-v1", num_envs=NUM_ENVS), seed=0)
    torch.manual_seed(0)
    try:
        return env.rollout(STEPS, break_when_any_done=False)
    finally:
        env.close()


def filled_replays(td) -> tuple[FrameReplay, Replay]:
    ours = FrameReplay(
        capacity=SETTINGS.replay_capacity,
        num_envs=NUM_ENVS,
        obs_key="observation",
        obs_shape=(4,),
        stack=1,
        gamma=SETTINGS.gamma,
    )
    for t0 in range(0, STEPS, 250):
        ours.extend(td[:, t0 : t0 + 250])
    plain = Replay(SETTINGS, NUM_ENVS, 4)
    nxt = td["next"]
    obs, next_obs = td["observation"].numpy(), nxt["observation"].numpy()
    action, reward = td["action"].numpy(), nxt["reward"].squeeze(-1).numpy()
    term, done = nxt["terminated"].squeeze(-1).numpy(), nxt["done"].squeeze(-1).numpy()
    for t in range(STEPS):
        plain.add(obs[:, t], action[:, t], reward[:, t], next_obs[:, t], term[:, t], done[:, t])
    return ours, plain


def plain_step(replay: Replay) -> Callable[[], None]:
    """The plain loop's gradient step (``reference.classic.plain_dqn``), fused Adam."""
    online = QNet(4, 2, (256, 256), dueling=False, atoms=1)
    target = copy.deepcopy(online).requires_grad_(False)
    opt = torch.optim.Adam(online.parameters(), lr=SETTINGS.lr, eps=SETTINGS.adam_eps, fused=True)
    rows = torch.arange(BATCH)
    count = [0]

    def step() -> None:
        obs, action, ret, next_obs, discount, weights, _ = replay.sample(BATCH, 0.4)
        obs, next_obs = torch.from_numpy(obs), torch.from_numpy(next_obs)
        action, ret = torch.from_numpy(action), torch.from_numpy(ret)
        discount, weights = torch.from_numpy(discount), torch.from_numpy(weights)
        with torch.no_grad():
            y = ret + discount * target(next_obs).max(-1).values
        q = online(obs)[rows, action]
        loss = (F.smooth_l1_loss(q, y, reduction="none") * weights).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(online.parameters(), SETTINGS.max_grad_norm)
        opt.step()
        count[0] += 1
        if count[0] % SETTINGS.target_update_interval == 0:
            target.load_state_dict(online.state_dict())

    return step


def recipe_step(replay: FrameReplay) -> Callable[[], None]:
    dqn = DQN(
        SETTINGS,
        obs_key="observation",
        obs_shape=(4,),
        num_actions=2,
        device=torch.device("cpu"),
        mlp_hidden=(256, 256),
    )
    return lambda: dqn.update(replay.sample(BATCH))


def per_call_us(fn: Callable[[], None], reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps * 1e6


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=2000, help="calls per side per round")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as the recipes (accelrl.process) and the plain loop's best
    np.random.seed(0)
    ours, plain = filled_replays(transitions())
    cases = {
        "sample": (lambda: ours.sample(BATCH), lambda: plain.sample(BATCH, 0.4)),
        "step": (recipe_step(ours), plain_step(plain)),
    }
    results = {}
    for name, (mine, theirs) in cases.items():
        mine(), theirs()  # warm-up
        rounds = []
        for r in range(args.rounds):
            a, b = per_call_us(mine, args.reps), per_call_us(theirs, args.reps)
            rounds.append({"accelrl_us": a, "plain_us": b, "ratio": b / a})
            print(f"{name} round {r}: accelrl {a:.0f} us, plain {b:.0f} us, ratio {b / a:.2f}")
        ratio = statistics.median(x["ratio"] for x in rounds)
        print(f"{name}: median ratio plain/accelrl {ratio:.2f} (above 1: accelrl faster)")
        results[name] = {"rounds": rounds, "median_ratio": ratio}
    if args.json:
        write_json(args.json, {"machine": machine_info(), "batch": BATCH, **results})


if __name__ == "__main__":
    main()
