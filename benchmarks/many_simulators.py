"""The recipes with many simulators per machine: training frames/s against simulator count.

The paper ran 256 and more simulators per GPU. Each recipe's ``train(cfg)`` runs here on one
process (in-process collection, the default) at each simulator count, with its own settings
otherwise (batches as ``benchmarks.train_throughput`` sizes them: PPO 1024 agent steps in all,
A2C 5 and DQN 4 per simulator; DQN with its replay and updates), for a warm-up batch and then
at least two batches and 8192 agent steps, as ``benchmarks.train_throughput`` runs it
(temporary run folder, no evaluation, no TensorBoard), at one torch thread. Frames/s is read
from the run's ``metrics.csv`` after the warm-up batch (``reference.atari.steady_fps``):
collection and updates together, the number a run logs.

Run: ``python -m benchmarks.many_simulators [--game MinAtar/Breakout] [--num-envs 8 64 256]
[--recipes ppo a2c dqn] [--min-steps 8192] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import torch

from benchmarks import common
from benchmarks.train_throughput import SPECS, make_config, quiet_accelrl_logging, run_recipe
from reference.atari import steady_fps

WARMUP = 1  # batches left out of the rate (collector start, allocator warm-up)


def config(recipe: str, game: str, num_envs: int, min_steps: int, run_dir: str) -> Any:
    """The recipe's ``Config`` with ``num_envs`` simulators for ``WARMUP`` batches and then
    at least two batches and ``min_steps`` agent steps."""
    from accelrl.envs import frames_per_step

    spec = next(s for s in SPECS if s.name == recipe)
    cfg = make_config(spec, game, "cpu", quick=False, run_dir=run_dir, num_envs=num_envs)
    if recipe == "dqn":
        cfg.env.num_envs = num_envs
        cfg.collector.steps_per_batch = num_envs * 4
        cfg.dqn.learning_starts_frames = 0
    # One torch thread, fixed: the learner's thread probe would time some updates at every
    # core, which next to other work on a small machine measures the neighbours.
    cfg.threads.torch_threads = 1
    steps = cfg.collector.steps_per_batch
    batches = max(2, -(-min_steps // steps))
    cfg.total_frames = (WARMUP + batches) * steps * frames_per_step(cfg.env)
    return cfg


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", default="MinAtar/Breakout")
    p.add_argument("--num-envs", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--recipes", nargs="+", default=["ppo", "a2c", "dqn"])
    p.add_argument(
        "--min-steps", type=int, default=8192, help="timed agent steps (2 batches at least)"
    )
    p.add_argument("--json", default=None, help="write the results to this path")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    quiet_accelrl_logging()
    results = []
    for recipe in args.recipes:
        for n in args.num_envs:
            with tempfile.TemporaryDirectory() as parent:
                cfg = config(recipe, args.game, n, args.min_steps, f"{parent}/run")
                start = time.perf_counter()
                records = run_recipe(next(s for s in SPECS if s.name == recipe), cfg)
                wall = time.perf_counter() - start
            fps = steady_fps(records, WARMUP)
            print(f"{recipe} {args.game} {n} simulators: {fps:,.0f} frames/s ({wall:.0f} s)")
            results.append(
                {
                    "recipe": recipe,
                    "num_envs": n,
                    "steps_per_batch": cfg.collector.steps_per_batch,
                    "frames_per_s": fps,
                    "wall_s": wall,
                }
            )
    print(f"\n{args.game}, {common.cores()} cores, training frames/s by simulators")
    common.print_table(
        ["recipe", "sims", "steps/batch", "frames/s"],
        [[r["recipe"], r["num_envs"], r["steps_per_batch"], r["frames_per_s"]] for r in results],
    )
    return common.results_payload(args.json, results, game=args.game)


if __name__ == "__main__":
    main()
