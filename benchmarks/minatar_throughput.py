"""MinAtar throughput: accelrl's batched env against a raw loop over ``minatar.Environment``s.

For each ``num_envs``, both step the same number of simulators of one game with pre-generated
random actions, in interleaved rounds within one process:

- raw: a Python loop over ``minatar.Environment`` objects: ``act`` each one, ``reset`` those that
  ended, and read every ``state()`` (the observation any agent needs), the ceiling for a wrapper;
- accelrl: ``make_env``'s ``MinAtarVecEnv`` through ``step_and_maybe_reset(td)``, the call
  TorchRL collectors make (the same loop, plus channels-first uint8 observations, episode
  statistics and the TensorDicts);
- accelrl lean: the same env as ``accelrl.collectors.LeanCollector`` steps it: ``step_into`` a
  batch's arrays (``T = 16`` steps), ``complete_rollout`` once per batch, no TensorDict.

One agent step is one MinAtar frame. Needs the minatar extra (``pip install "accelrl[minatar]"``).

Run: ``python -m benchmarks.minatar_throughput [--game breakout] [--num-envs 8 64] [--seconds 6]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from benchmarks import common
from benchmarks.env_throughput import ACTION_SEQ, td_stepper

GAMES = {"asterix", "breakout", "freeway", "seaquest", "space_invaders"}


def raw_stepper(game: str, num_envs: int, actions: np.ndarray, seed: int) -> Callable[[], Any]:
    """One step of ``num_envs`` raw ``minatar.Environment`` objects (MinAtar's default sticky
    actions, 0.1, as the accelrl env uses)."""
    import minatar

    sims = [minatar.Environment(game) for _ in range(num_envs)]
    for i, sim in enumerate(sims):
        sim.seed(seed + i)
        sim.reset()
    i = 0

    def step() -> None:
        nonlocal i
        for sim, action in zip(sims, actions[i % len(actions)].tolist(), strict=True):
            _, terminal = sim.act(action)
            if terminal:
                sim.reset()
            sim.state()
        i += 1

    return step


def accelrl_env(game: str, num_envs: int, seed: int):
    from accelrl.config import EnvConfig
    from accelrl.envs import make_env
    from accelrl.envs.minatar_vec import GAMES as NAMES

    name = next(n for n, module in NAMES.items() if module == game)
    return make_env(EnvConfig(game=f"MinAtar/{name}", num_envs=num_envs), seed=seed)


def lean_stepper(env, actions: torch.Tensor, steps: int = 16) -> Callable[[], Any]:
    """Steps ``env`` as ``LeanCollector`` does: into a ``[rows, steps]`` batch's arrays."""
    root = env.reset()
    rows = env.num_envs

    def arrays(keys) -> dict[str, np.ndarray]:
        return {k: np.zeros((rows, steps, *root[k].shape[1:]), root[k].numpy().dtype) for k in keys}

    keys = [k for k in env.step_keys if k != "reward"]
    nxt = arrays(keys) | {"reward": np.zeros((rows, steps, 1), np.float32)}
    roots = arrays(keys)
    carry = {k: root[k].numpy().copy() for k in keys}
    at = [{k: v[:, t] for k, v in nxt.items()} for t in range(steps)]
    i = 0

    def step() -> None:
        nonlocal i
        t = i % steps
        into = carry[env.obs_key] if t + 1 == steps else roots[env.obs_key][:, t + 1]
        env.step_into(actions[i % len(actions)], at[t], into)
        if t + 1 == steps:
            env.complete_rollout(nxt, roots, carry)
        i += 1

    return step


def bench_num_envs(
    game: str, num_envs: int, rounds: int, seconds: float, verbose: bool
) -> dict[str, Any]:
    actions = np.random.default_rng(0).integers(0, 6, size=(ACTION_SEQ, num_envs))
    env = accelrl_env(game, num_envs, seed=1000)
    lean_env = accelrl_env(game, num_envs, seed=1000)
    steppers = {
        "raw": raw_stepper(game, num_envs, actions, seed=0),
        "accelrl": td_stepper(env, torch.from_numpy(actions)),
        "accelrl lean": lean_stepper(lean_env, torch.from_numpy(actions)),
    }
    rates = common.paired_rates(steppers, num_envs, rounds, seconds, verbose=verbose)
    env.close()
    lean_env.close()
    raw_r, acc_r = common.median(rates["raw"]), common.median(rates["accelrl"])
    lean_r = common.median(rates["accelrl lean"])
    return {
        "num_envs": num_envs,
        "raw_steps_per_s": raw_r,
        "accelrl_steps_per_s": acc_r,
        "accelrl_over_raw": common.median_ratio(rates["accelrl"], rates["raw"]),
        # Python time each batched step adds on top of the raw loop, from the median rates.
        "accelrl_overhead_us": 1e6 * num_envs * (1 / acc_r - 1 / raw_r),
        "lean_steps_per_s": lean_r,
        "lean_over_raw": common.median_ratio(rates["accelrl lean"], rates["raw"]),
        "lean_overhead_us": 1e6 * num_envs * (1 / lean_r - 1 / raw_r),
        "per_round": rates,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", default="breakout", choices=sorted(GAMES), help="MinAtar game")
    p.add_argument("--num-envs", type=int, nargs="+", default=[8, 64])
    p.add_argument("--seconds", type=float, default=6.0, help="timed seconds per env per size")
    p.add_argument("--rounds", type=int, default=60, help="interleaved rounds per size")
    p.add_argument("--json", default=None, help="write the results to this path")
    p.add_argument("-v", "--verbose", action="store_true", help="print every round")
    args = p.parse_args(argv)

    torch.set_num_threads(1)
    results = []
    for n in args.num_envs:
        print(f"num_envs={n}: {args.rounds} rounds x {args.seconds / args.rounds:.2f} s each")
        results.append(bench_num_envs(args.game, n, args.rounds, args.seconds, args.verbose))

    print(f"\nMinAtar {args.game}, {common.cores()} cores; agent steps/s = frames/s (median)")
    rows = [
        (
            r["num_envs"],
            r["raw_steps_per_s"],
            r["accelrl_steps_per_s"],
            r["accelrl_over_raw"],
            r["accelrl_overhead_us"],
            r["lean_steps_per_s"],
            r["lean_over_raw"],
            r["lean_overhead_us"],
        )
        for r in results
    ]
    headers = ["envs", "raw", "accelrl", "acc/raw", "acc us/step", "lean", "lean/raw", "lean us"]
    common.print_table(headers, rows)
    print(
        "acc/raw, lean/raw: median of per-round paired ratios; us/step: wrapper time per batched "
        "step; lean: stepped as LeanCollector steps it (step_into a batch's arrays)"
    )
    return common.results_payload(args.json, results, game=args.game)


if __name__ == "__main__":
    main()
