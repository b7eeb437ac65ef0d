"""Env-only throughput: ale-py's raw vector env vs accelrl's ``AleVecEnv`` vs TorchRL's GymWrapper.

For each ``num_envs``, three envs over the same C++ simulator (ale-py's ``AtariVectorEnv``, same
thread count, SameStep autoreset, sticky actions 0.25, unclipped rewards) are stepped with
pre-generated random actions, in interleaved rounds within one process:

- raw: ``AtariVectorEnv.step(actions)`` on numpy arrays, the ceiling for any wrapper;
- accelrl: ``AleVecEnv.step_and_maybe_reset(td)``, the call TorchRL collectors make;
- generic: ``torchrl.envs.GymWrapper(AtariVectorEnv(...))`` stepped the same way.

``benchmarks.run`` also uses ``env_pipelines`` here for its env rows, which add accelrl's gym
backend (``ParallelEnv`` of preprocessed ALE workers), gymnasium's ``AsyncVectorEnv`` of
preprocessed ALE envs and TorchRL's reference pipeline (``benchmarks.torchrl_reference``).

Run: ``python -m benchmarks.env_throughput [--game pong] [--num-envs 8 16 32] [--seconds 6]``.
"""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from benchmarks.common import (
    cores,
    machine_info,
    median,
    median_ratio,
    paired_rates,
    print_table,
    verdict,
    write_json,
)

TARGET = 0.9  # accelrl / raw
FRAMESKIP = 4
ACTION_SEQ = 256  # pre-generated action batches, cycled


def raw_vec_env(game: str, num_envs: int, threads: int, seed: int):
    """ale-py's C++ vector env with the settings accelrl uses (Atari v5 sticky actions)."""
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(
        game,
        num_envs,
        num_threads=threads,
        autoreset_mode="SameStep",
        repeat_action_probability=0.25,
        reward_clipping=False,
    )
    env.reset(seed=seed)
    return env


def raw_stepper(env, actions: np.ndarray) -> Callable[[], Any]:
    i = 0

    def step() -> None:
        nonlocal i
        env.step(actions[i % len(actions)])
        i += 1

    return step


def td_stepper(env, actions: torch.Tensor) -> Callable[[], Any]:
    """Steps a TorchRL env as a collector does: act on the root, ``step_and_maybe_reset``."""
    root = env.reset()
    i = 0

    def step() -> None:
        nonlocal i, root
        root.set("action", actions[i % len(actions)])
        _, root = env.step_and_maybe_reset(root)
        i += 1

    return step


def _preprocessed_ale_env(game: str, sticky: float):
    """One gymnasium ALE env with the standard DeepMind preprocessing (what AsyncVectorEnv runs
    in each worker): frameskip 4 with max-pool, 84x84 grayscale, up to 30 no-ops, 4 stacked."""
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    from accelrl.envs.games import gym_id

    gym.register_envs(ale_py)
    env = gym.make(
        gym_id(game),
        frameskip=1,
        repeat_action_probability=sticky,
        full_action_space=False,
        disable_env_checker=True,
    )
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
    return FrameStackObservation(env, 4)


def async_vector_env(game: str, num_envs: int, seed: int, context: str = "fork"):
    """gymnasium's ``AsyncVectorEnv`` of preprocessed ALE envs (one process per simulator).

    Forked workers start in about a second; a spawned one re-imports the parent's modules (torch
    included: ~10 s each on 2 busy cores). The workers run gymnasium and ale-py only.
    """
    import gymnasium as gym

    env = gym.vector.AsyncVectorEnv(
        [functools.partial(_preprocessed_ale_env, game, 0.25)] * num_envs,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        context=context,
    )
    env.reset(seed=seed)
    return env


def reference_env(game: str, num_envs: int):
    """TorchRL's reference Atari pipeline (``benchmarks.torchrl_reference``) for ``game``."""
    from accelrl.envs.games import gym_id
    from benchmarks.torchrl_reference import make_parallel_env

    name = gym_id(game).removeprefix("ALE/").removesuffix("-v5") + "NoFrameskip-v4"
    return make_parallel_env(num_envs, env_name=name)


# Names of the env-only pipelines of ``benchmarks.run``; "raw" is every row's reference.
ENV_PIPELINES = ("raw", "accelrl ale_vec", "accelrl gym", "gymnasium async", "torchrl ref")


def env_pipelines(
    game: str,
    num_envs: int,
    threads: int,
    *,
    names: tuple[str, ...] = ENV_PIPELINES,
    reuse: dict[str, Any] | None = None,
    seed: int = 0,
    warmup_steps: int = 20,
) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    """Build, reset and warm up the env-only pipelines; returns (steppers, envs).

    Every stepper advances its env by one batched step with pre-generated random actions, as a
    collector would (TorchRL envs through ``step_and_maybe_reset``). ``reuse`` maps names to
    envs already built (the reference pipeline is shared with the collection section).
    Process-based pipelines are built first, before any simulator threads exist in this process.
    """
    from accelrl.config import EnvConfig
    from accelrl.envs import make_env

    reuse = reuse or {}
    envs: dict[str, Any] = {}
    order = sorted(names, key=lambda n: n in ("raw", "accelrl ale_vec"))
    for name in order:
        if name in reuse:
            envs[name] = reuse[name]
        elif name == "gymnasium async":
            envs[name] = async_vector_env(game, num_envs, seed + 300)
        elif name == "accelrl gym":
            envs[name] = make_env(
                EnvConfig(game=game, num_envs=num_envs, backend="gym"), seed=seed + 200
            )
        elif name == "torchrl ref":
            envs[name] = reference_env(game, num_envs)
        elif name == "raw":
            envs[name] = raw_vec_env(game_rom(game), num_envs, threads, seed=seed)
        elif name == "accelrl ale_vec":
            envs[name] = make_env(
                EnvConfig(game=game, num_envs=num_envs), seed=seed + 100, sim_threads=threads
            )
        else:
            raise ValueError(f"unknown env pipeline {name!r}")
    n_actions = int(envs["raw"].single_action_space.n) if "raw" in envs else None
    if n_actions is None:
        from accelrl.envs.ale_vec import AleVecEnv

        probe = AleVecEnv(game, 1)
        n_actions = probe.num_actions
        probe.close()
    actions = np.random.default_rng(seed).integers(0, n_actions, size=(ACTION_SEQ, num_envs))
    steppers: dict[str, Callable[[], Any]] = {}
    for name in names:
        env = envs[name]
        if name in ("raw", "gymnasium async"):
            steppers[name] = raw_stepper(env, actions)
        else:
            steppers[name] = td_stepper(env, torch.from_numpy(actions))
        for _ in range(warmup_steps):
            steppers[name]()
    return steppers, envs


def game_rom(game: str) -> str:
    from accelrl.envs.games import rom_id

    return rom_id(game)


def bench_num_envs(
    game: str, num_envs: int, threads: int, rounds: int, seconds: float, verbose: bool
) -> dict[str, Any]:
    from torchrl.envs import GymWrapper

    from accelrl.config import EnvConfig
    from accelrl.envs import make_env

    raw = raw_vec_env(game, num_envs, threads, seed=0)
    acc = make_env(EnvConfig(game=game, num_envs=num_envs), seed=1000, sim_threads=threads)
    gen = GymWrapper(
        raw_vec_env(game, num_envs, threads, seed=2000), categorical_action_encoding=True
    )
    n_actions = int(raw.single_action_space.n)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, n_actions, size=(ACTION_SEQ, num_envs))
    actions_t = torch.from_numpy(actions)
    steppers = {
        "raw": raw_stepper(raw, actions),
        "accelrl": td_stepper(acc, actions_t),
        "generic": td_stepper(gen, actions_t),
    }
    rates = paired_rates(steppers, num_envs, rounds, seconds, verbose=verbose)
    raw.close()
    acc.close()
    gen.close()
    raw_r, acc_r, gen_r = median(rates["raw"]), median(rates["accelrl"]), median(rates["generic"])
    return {
        "num_envs": num_envs,
        "sim_threads": threads,
        "raw_steps_per_s": raw_r,
        "accelrl_steps_per_s": acc_r,
        "generic_steps_per_s": gen_r,
        "accelrl_over_raw": median_ratio(rates["accelrl"], rates["raw"]),
        "generic_over_raw": median_ratio(rates["generic"], rates["raw"]),
        # Python time each batched step adds on top of the simulator, from the median rates.
        "accelrl_overhead_us": 1e6 * num_envs * (1 / acc_r - 1 / raw_r),
        "generic_overhead_us": 1e6 * num_envs * (1 / gen_r - 1 / raw_r),
        "per_round": rates,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", default="pong", help="ale-py ROM id (pong, breakout, ...)")
    p.add_argument("--num-envs", type=int, nargs="+", default=[8, 16, 32])
    p.add_argument("--threads", type=int, default=0, help="simulator threads (0: core count)")
    p.add_argument("--seconds", type=float, default=6.0, help="timed seconds per env per size")
    # Short segments pair better: on a shared machine the rate drifts within a second.
    # Short rounds pair better: the machine's speed drifts within a second (0.1 s rounds gave
    # the tightest paired ratios here).
    p.add_argument("--rounds", type=int, default=60, help="interleaved rounds per size")
    p.add_argument("--json", default=None, help="write the results to this path")
    p.add_argument("-v", "--verbose", action="store_true", help="print every round")
    args = p.parse_args(argv)

    torch.set_num_threads(1)  # torch threads would contend with ALE's on the same cores
    import torchrl  # noqa: F401  (configures its logger on import; quieten it afterwards)

    logging.getLogger("torchrl").setLevel(logging.WARNING)  # GymWrapper's spec-probe notices
    threads = args.threads or cores()
    results = []
    for n in args.num_envs:
        print(f"num_envs={n}: {args.rounds} rounds x {args.seconds / args.rounds:.2f} s each")
        results.append(
            bench_num_envs(args.game, n, threads, args.rounds, args.seconds, args.verbose)
        )

    print(f"\n{args.game}, {threads} simulator threads, {cores()} cores; agent steps/s (median)")
    rows = [
        (
            r["num_envs"],
            r["raw_steps_per_s"],
            r["accelrl_steps_per_s"],
            r["generic_steps_per_s"],
            r["accelrl_over_raw"],
            r["generic_over_raw"],
            r["accelrl_overhead_us"],
            r["generic_overhead_us"],
            FRAMESKIP * r["raw_steps_per_s"],
            FRAMESKIP * r["accelrl_steps_per_s"],
            verdict(r["accelrl_over_raw"], TARGET),
        )
        for r in results
    ]
    print_table(
        [
            "envs",
            "raw",
            "accelrl",
            "generic",
            "acc/raw",
            "gen/raw",
            "acc us/step",
            "gen us/step",
            "raw frames/s",
            "acc frames/s",
            f"acc/raw>={TARGET}",
        ],
        rows,
    )
    print("ratios: median of per-round paired ratios; us/step: wrapper time per batched step")
    payload = {**machine_info(), "game": args.game, "target": TARGET, "results": results}
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
