"""The framework's cost per agent step: each recipe's collection against a plain loop, on
zero-cost simulators with a tiny policy.

On a GPU the network costs little per step, so what the framework does per step decides the
speed; a CPU hides that behind the network unless the network is cheap. Here it is: the
simulators are ``accelrl.envs.null`` (``Null/Atari``: ``[4, 84, 84]`` uint8 observations, 6
actions; ``Null/CartPole``: ``[4]`` float32, 2 actions; preallocated arrays, rewards and episode
ends on a fixed schedule) and the network is tiny (a strided subsample of the frames or the
vector, one hidden layer of 32, the heads), the same module on both sides. Per simulator count,
in alternating rounds within one process (``benchmarks.common``), one call = one batch of
``num_envs x T`` agent steps:

- plain: a plain torch loop over the raw simulators (``NullVecEnv._raw_step``): numpy buffers,
  ``torch.from_numpy``, one forward, the action drawn (actor-critic: ``Categorical`` sample,
  its log-prob and the value; DQN: argmax and epsilon-greedy), the rollout written into
  preallocated tensors (actor-critic: observation, action, log-prob, value, reward, done;
  DQN: the newest frame, action, reward and done into a ring, as a replay keeps them);
- ppo, a2c: the recipes' collection as it runs: ``accelrl.collectors.make_collector`` (the
  in-process ``sync`` kind, the recipes' default) in a ``WatchedCollector``, acting with the
  learner's ``collect_policy`` (``accelrl.models.acting_policy``); T of the recipe (PPO 128, A2C
  5), at most 64 MiB of observations per batch (Atari: T = 8 at 256 simulators);
- dqn: the same collector acting with DQN's ``collect_policy`` (Q-values, then
  ``ScheduledEGreedy``), each batch written into ``FrameReplay`` by ``SyncReplay``, T = 4.

APPO's default collection runs in worker processes (kind ``async``) and is not on this row.

Reported: microseconds per agent step (time per batch / steps per batch, medians over rounds),
and the ratio recipe / plain (median of per-round paired ratios; target <= 1.25 at 64 and 256
simulators). ``--profile NAME`` prints cProfile's top functions of one recipe's collection.

Run: ``python -m benchmarks.acting_overhead [--num-envs 8 64 256] [--games Null/Atari
Null/CartPole] [--seconds 6] [--rounds 30] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks import common

TARGET = 1.25  # recipe / plain per-step time, at 64 and 256 simulators
TARGET_NUM_ENVS = (64, 256)
RECIPES = ("ppo", "a2c", "dqn")
STEPS_PER_ENV = {"ppo": 128, "a2c": 5, "dqn": 4}  # each recipe's default T
MAX_OBS_BYTES = 64 * 2**20  # observations per batch at most (256 Atari stacks x 8 steps: 58 MB)
HIDDEN = 32
EPS = 0.05  # DQN's acting epsilon on both sides (the schedule's end)


class TinyTrunk(nn.Module):
    """Frames: every 12th pixel of each stacked frame (4 x 7 x 7 values, scaled to [0, 1]);
    vectors: as they are; then one hidden layer of ``HIDDEN``."""

    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.frames = len(obs_shape) == 3
        features = obs_shape[0] * 7 * 7 if self.frames else int(np.prod(obs_shape))
        self.fc = nn.Linear(features, HIDDEN)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.frames:
            obs = obs[..., ::12, ::12].flatten(-3).float() / 255.0
        return torch.relu(self.fc(obs))


class TinyQ(nn.Module):
    def __init__(self, obs_shape: tuple[int, ...], num_actions: int) -> None:
        super().__init__()
        self.trunk, self.head = TinyTrunk(obs_shape), nn.Linear(HIDDEN, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(obs))


def steps_per_env(recipe: str, num_envs: int, obs_bytes: int) -> int:
    """T for ``recipe`` at ``num_envs`` simulators: its default, at most ``MAX_OBS_BYTES`` of
    observations (``obs_bytes`` each) per batch."""
    return max(1, min(STEPS_PER_ENV[recipe], MAX_OBS_BYTES // (num_envs * obs_bytes)))


def env_spec(game: str) -> dict[str, Any]:
    from accelrl.config import EnvConfig
    from accelrl.envs import describe_env

    return describe_env(EnvConfig(game=game))


def tiny_actor_critic(spec: dict[str, Any]):
    """An ``ActorValueOperator`` as ``make_actor_critic`` builds it, over the tiny trunk."""
    from accelrl.models import DirectTensorDictModule, with_heads

    trunk = TinyTrunk(spec["obs_shape"])
    common_module = DirectTensorDictModule(trunk, in_keys=[spec["obs_key"]], out_keys=["hidden"])
    return with_heads(common_module, nn.Linear(HIDDEN, spec["num_actions"]), nn.Linear(HIDDEN, 1))


# --- plain loops ------------------------------------------------------------------------------


def plain_actor_critic(
    game: str, num_envs: int, T: int, model, device: str = "cpu"
) -> Callable[[], None]:
    """One batch of the plain actor-critic loop (see the module docstring); on a GPU the
    network and the rollout live there, as a single-file loop keeps them."""
    from accelrl.envs.null import NullVecEnv

    sim = NullVecEnv(game.split("/")[1], num_envs)
    trunk = model[0].module
    policy_net = model.get_policy_head().module[0].module
    value_net = model.get_value_head().module
    obs_np, _, _ = sim._raw_reset(np.arange(num_envs))
    obs = torch.from_numpy(obs_np).to(device)
    shape = (T, num_envs)
    buf_obs = torch.empty((*shape, *obs.shape[1:]), dtype=obs.dtype, device=device)
    buf_action = torch.empty(shape, dtype=torch.int64, device=device)
    buf_logp, buf_value, buf_reward = (torch.empty(shape, device=device) for _ in range(3))
    buf_done = torch.empty(shape, dtype=torch.bool, device=device)

    def batch() -> None:
        nonlocal obs
        with torch.no_grad():
            for t in range(T):
                hidden = trunk(obs)
                dist = torch.distributions.Categorical(
                    logits=policy_net(hidden), validate_args=False
                )
                action = dist.sample()
                buf_obs[t] = obs
                buf_action[t] = action
                buf_logp[t] = dist.log_prob(action)
                buf_value[t] = value_net(hidden).squeeze(-1)
                next_np, reward, term, trunc, _, _, _ = sim._raw_step(action.cpu().numpy())
                buf_reward[t] = torch.from_numpy(reward).to(device)
                buf_done[t] = torch.from_numpy(term | trunc).to(device)
                obs = torch.from_numpy(next_np).to(device)

    return batch


def plain_dqn(
    game: str, num_envs: int, T: int, q_net: nn.Module, device: str = "cpu"
) -> Callable[[], None]:
    """One batch of the plain DQN acting loop (see the module docstring); on a GPU the network
    acts there and the ring stays in host memory, as a replay keeps it."""
    from accelrl.envs.null import NullVecEnv

    sim = NullVecEnv(game.split("/")[1], num_envs)
    obs_np, _, _ = sim._raw_reset(np.arange(num_envs))
    obs = torch.from_numpy(obs_np)
    capacity = max(32768 // num_envs, T) * num_envs
    newest = obs.shape[1:] if obs.dim() == 2 else obs.shape[2:]  # a stack keeps its last frame
    ring_obs = torch.empty((capacity, *newest), dtype=obs.dtype)
    ring_action = torch.empty(capacity, dtype=torch.int64)
    ring_reward = torch.empty(capacity)
    ring_done = torch.empty(capacity, dtype=torch.bool)
    at = 0
    num_actions = sim.num_actions

    def batch() -> None:
        nonlocal obs, at
        with torch.no_grad():
            for _ in range(T):
                action = q_net(obs.to(device)).argmax(-1).cpu()
                explore = torch.rand(num_envs) < EPS
                action = torch.where(explore, torch.randint(0, num_actions, (num_envs,)), action)
                next_np, reward, term, trunc, _, _, _ = sim._raw_step(action.numpy())
                rows = slice(at, at + num_envs)
                ring_obs[rows] = obs if obs.dim() == 2 else obs[:, -1]
                ring_action[rows] = action
                ring_reward[rows] = torch.from_numpy(reward)
                ring_done[rows] = torch.from_numpy(term | trunc)
                at = (at + num_envs) % capacity
                obs = torch.from_numpy(next_np)

    return batch


# --- the recipes' collection ------------------------------------------------------------------


def recipe_collector(
    game: str, num_envs: int, T: int, policy: nn.Module, torchrl: bool = False, device: str = "cpu"
):
    """``make_collector`` as ``run_collector`` calls it for a run on one process with its
    learner on ``device``, watched; ``torchrl``: TorchRL's own ``Collector`` in its place (what
    ``make_collector`` built before ``LeanCollector``), with the same settings."""
    from torchrl.collectors import Collector

    from accelrl.collectors import WatchedCollector, make_collector
    from accelrl.collectors.threads import ThreadPlan
    from accelrl.config import CollectorConfig, EnvConfig
    from accelrl.envs import make_env

    plan = ThreadPlan(cores=1, learner_torch=1, worker_torch=1, sim_threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if torchrl:
            env = make_env(EnvConfig(game=game, num_envs=num_envs), seed=0)
            options = dict(policy_device=device, storing_device=device, env_device="cpu")
            collector = Collector(
                env, policy, frames_per_batch=num_envs * T, total_frames=-1,
                track_traj_ids=False, **options,
            )  # fmt: skip
            return WatchedCollector(collector, stall_timeout_s=600.0, learner_policy=policy)
        collector = make_collector(
            EnvConfig(game=game, num_envs=num_envs),
            CollectorConfig(steps_per_batch=num_envs * T),
            policy,
            seed=0,
            plan=plan,
            learner_device=device,
        )
    return WatchedCollector(collector, stall_timeout_s=600.0, learner_policy=policy)


def recipe_actor_critic(
    recipe: str, game: str, num_envs: int, T: int, model, torchrl: bool = False,
    device: str = "cpu",
):  # fmt: skip
    """(one batch of the recipe's collection, the collector to shut down)."""
    from accelrl.algos.a2c import A2C, A2CConfig
    from accelrl.algos.ppo import PPO, PPOConfig

    on = torch.device(device)
    learner = PPO(model, PPOConfig(), on) if recipe == "ppo" else A2C(model, A2CConfig(), on)
    collector = recipe_collector(game, num_envs, T, learner.collect_policy, torchrl, device)
    batches = iter(collector)
    return (lambda: next(batches)), collector


def recipe_dqn(
    game: str, num_envs: int, T: int, q_net: nn.Module, replay_dir: str, torchrl: bool = False,
    device: str = "cpu",
):  # fmt: skip
    """(one batch of DQN's collection written into its replay, the collector to shut down)."""
    from accelrl.algos.dqn import DQN, DQNConfig
    from accelrl.compat import qvalue_actor_modules
    from accelrl.replay.feeder import SyncReplay
    from accelrl.replay.memory import FrameReplay

    spec = env_spec(game)
    shape = tuple(spec["obs_shape"])
    cfg = DQNConfig(eps_start=EPS, eps_end=EPS)
    dqn = DQN(cfg, **spec, device=torch.device(device))
    # The recipe's acting modules around the tiny network (the same one the plain loop runs).
    qvalue_actor_modules(dqn.greedy)[0].module = q_net
    collector = recipe_collector(game, num_envs, T, dqn.collect_policy, torchrl, device)
    frames = len(shape) == 3
    replay = FrameReplay(
        capacity=max(32768 // num_envs, 2 * T) * num_envs,
        num_envs=num_envs,
        obs_key=spec["obs_key"],
        obs_shape=shape,
        stack=shape[0] if frames else 1,
        gamma=cfg.gamma,
        storage_dir=replay_dir,
    )
    source = SyncReplay(collector, replay, learning_starts=0).start()
    return source.wait_batch, collector


def steppers(
    game: str, num_envs: int, recipes: tuple[str, ...], replay_dir: str, before: bool = False,
    device: str = "cpu",
) -> tuple[dict[str, tuple[Callable[[], Any], int]], list[Any]]:  # fmt: skip
    """name -> (one batch, agent steps per batch) for the plain loops and each recipe, and with
    ``before`` each recipe on TorchRL's ``Collector`` (``"<recipe> torchrl"``); the networks
    act on ``device``."""
    spec = env_spec(game)
    torch.manual_seed(0)
    model = tiny_actor_critic(spec).to(device)
    q_net = TinyQ(spec["obs_shape"], spec["num_actions"]).to(device)
    out: dict[str, tuple[Callable[[], Any], int]] = {}
    collectors = []
    itemsize = 1 if len(spec["obs_shape"]) == 3 else 4
    obs_bytes = int(np.prod(spec["obs_shape"])) * itemsize
    for recipe in recipes:
        T = steps_per_env(recipe, num_envs, obs_bytes)
        if recipe == "dqn":
            out["plain dqn"] = (plain_dqn(game, num_envs, T, q_net, device), num_envs * T)
        else:
            plain = plain_actor_critic(game, num_envs, T, model, device)
            out[f"plain {recipe}"] = (plain, num_envs * T)
        for torchrl in (False, True) if before else (False,):
            if recipe == "dqn":
                sub = f"{replay_dir}/{int(torchrl)}"
                step, collector = recipe_dqn(game, num_envs, T, q_net, sub, torchrl, device)
            else:
                step, collector = recipe_actor_critic(
                    recipe, game, num_envs, T, model, torchrl, device
                )
            out[f"{recipe} torchrl" if torchrl else recipe] = (step, num_envs * T)
            collectors.append(collector)
    return out, collectors


def bench(
    game: str,
    num_envs: int,
    recipes: tuple[str, ...],
    rounds: int,
    seconds: float,
    verbose: bool = False,
    before: bool = False,
    device: str = "cpu",
) -> dict[str, Any]:
    """Per-step times of the plain loops and the recipes at ``num_envs`` simulators, the
    networks on ``device`` (with ``before``, also on TorchRL's ``Collector``)."""
    with tempfile.TemporaryDirectory() as replay_dir:
        fns, collectors = steppers(game, num_envs, recipes, replay_dir, before, device)
        try:
            for fn, _ in fns.values():  # first batches allocate and fill caches
                for _ in range(3):
                    fn()
            segments = {
                name: (lambda s, fn=fn, n=n: common.time_steps(fn, n, s))
                for name, (fn, n) in fns.items()
            }
            rates = common.run_rounds(segments, rounds, seconds / rounds, verbose=verbose)
        finally:
            for c in collectors:
                c.shutdown()
    out: dict[str, Any] = {"game": game, "num_envs": num_envs, "device": device,
                           "per_round": rates}  # fmt: skip
    for name in fns:
        out[f"{name} us/step"] = 1e6 / common.median(rates[name])
    for recipe in recipes:
        # time ratio recipe / plain = rate ratio plain / recipe, per round
        for name in (recipe, f"{recipe} torchrl"):
            if name in rates:
                out[f"{name} / plain"] = common.median_ratio(rates[f"plain {recipe}"], rates[name])
    return out


def profile(game: str, num_envs: int, recipe: str, seconds: float, top: int = 25) -> None:
    """cProfile's top functions (by own time) of ``recipe``'s collection."""
    import cProfile
    import pstats

    with tempfile.TemporaryDirectory() as replay_dir:
        fns, collectors = steppers(game, num_envs, (recipe,), replay_dir)
        fn, n = fns[recipe]
        for _ in range(3):
            fn()
        prof = cProfile.Profile()
        prof.enable()
        common.time_steps(fn, n, seconds)
        prof.disable()
        for c in collectors:
            c.shutdown()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def rows(results: list[dict[str, Any]], recipes: tuple[str, ...]) -> list[list[Any]]:
    """Table rows: game, sims, collection, plain us/step, its us/step, ratio, met?"""
    table = []
    for r in results:
        for recipe in recipes:
            for name in (recipe, f"{recipe} torchrl"):
                if f"{name} / plain" not in r:
                    continue
                ratio = r[f"{name} / plain"]
                target = r["num_envs"] in TARGET_NUM_ENVS and name == recipe
                met = ("yes" if ratio <= TARGET else "MISSED") if target else "-"
                plain = r[f"plain {recipe} us/step"]
                table.append(
                    [r["game"], r["num_envs"], name, plain, r[f"{name} us/step"], ratio, met]
                )
    return table


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", nargs="+", default=["Null/Atari", "Null/CartPole"])
    p.add_argument("--num-envs", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    p.add_argument("--seconds", type=float, default=6.0, help="timed seconds per pipeline")
    p.add_argument("--rounds", type=int, default=30, help="alternating rounds per size")
    p.add_argument("--profile", default=None, choices=RECIPES, help="profile this recipe")
    p.add_argument("--before", action="store_true", help="also each recipe on TorchRL's Collector")
    p.add_argument("--device", default="cpu", help="where the networks act: cpu, cuda, cuda:N")
    p.add_argument("--json", default=None, help="write the results to this path")
    p.add_argument("-v", "--verbose", action="store_true", help="print every round")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    logging.getLogger("torchrl").setLevel(logging.WARNING)
    recipes = tuple(args.recipes)
    if args.profile:
        for game in args.games:
            for n in args.num_envs:
                print(f"\n== profile: {args.profile}, {game}, {n} simulators")
                profile(game, n, args.profile, args.seconds)
        return {}
    results = []
    for game in args.games:
        for n in args.num_envs:
            print(f"{game}, {n} simulators: {args.rounds} rounds", flush=True)
            results.append(
                bench(game, n, recipes, args.rounds, args.seconds, args.verbose, args.before,
                      args.device)
            )  # fmt: skip
    print(
        f"\nacting overhead, {common.cores()} cores, networks on {args.device}: us per agent "
        "step (medians), "
        f"recipe / plain = median of per-round paired time ratios (target <= {TARGET:g} at "
        f"{' and '.join(map(str, TARGET_NUM_ENVS))} simulators)"
    )
    common.print_table(
        ["game", "sims", "recipe", "plain us", "recipe us", "recipe/plain", "met?"],
        rows(results, recipes),
    )
    return common.results_payload(args.json, results)


if __name__ == "__main__":
    main()
