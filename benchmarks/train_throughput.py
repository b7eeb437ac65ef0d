"""Training-loop throughput: each recipe's ``train(cfg)`` against a plain PyTorch loop
(``reference.atari``) with the same simulators, network and hyperparameters: both run
from the one recipe ``Config`` that ``make_config`` builds (the plain loop reads it too).

Each recipe runs in this process through its importable ``train(cfg)`` with a temporary run
folder, no TensorBoard, no progress bar, no evaluation episodes and no checkpoint before the
final one, for a fixed number of iterations (batches). Setup is excluded by reading the run's
``metrics.csv``: one row per update with the frames so far and the seconds since the run's
logger started, so frames/s is taken between the row that ends the warm-up iterations and the
last row (``reference.atari.steady_fps``; the plain loops record the same per iteration). The
first iterations hold the collector's start (worker processes), allocator warm-up and, for
DQN, the batches before learning starts; the final checkpoint is written after the last row.

Recipe and plain loop alternate within each round (order swapped every round) and the ratio is
the median of the per-round ratios.

Run alone: ``python -m benchmarks.train_throughput [--quick] [--recipes ppo a2c] [--device cuda]``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.common import cores, median, median_ratio
from reference.atari import Record, steady_fps
from reference.atari_actor_critic import plain_a2c, plain_ppo
from reference.atari_dqn import plain_dqn


@dataclass
class TrainSpec:
    """One training row: which recipe, how it is configured, its plain reference."""

    name: str
    module: str
    section: str  # the recipe's hyperparameter section (cfg.ppo, cfg.a2c, ...)
    iterations: tuple[int, int]  # (full, quick) batches per run, warm-up included
    warmup: tuple[int, int]  # (full, quick) batches excluded from the rate
    preset: str | None = None
    reference: str = ""
    recurrent: bool = False  # --model.recurrent lstm (the plain loops read it too)

    @classmethod
    def dqn_preset(
        cls, preset: str, iterations: tuple[int, int], warmup: tuple[int, int], reference: str
    ) -> TrainSpec:
        """The DQN recipe with its preset ``preset`` (``recipes.dqn_atari``), named after it."""
        return cls(preset, "recipes.dqn_atari", "dqn", iterations, warmup, preset, reference)


SPECS = [
    TrainSpec("ppo", "recipes.ppo_atari", "ppo", (4, 2), (1, 1), reference="plain PPO"),
    # A2C's batches are 80 agent steps (~0.13 s): 40 steady ones (~5 s) read 0.91-0.94x with
    # run-to-run swings of +-10%, 120 read 0.97-1.00x (benchmarks.learner_speed, 2026-12-02).
    TrainSpec("a2c", "recipes.a2c_atari", "a2c", (125, 8), (5, 3), reference="plain A2C"),
    TrainSpec("dqn", "recipes.dqn_atari", "dqn", (33, 4), (3, 2), reference="plain DQN"),
    TrainSpec.dqn_preset("dqn-512", (6, 2), (2, 1), reference="plain double DQN"),
    TrainSpec.dqn_preset("rainbow", (23, 4), (3, 2), reference="plain rainbow"),
    TrainSpec("appo", "recipes.appo_atari", "appo", (6, 3), (2, 2), reference="plain PPO"),
    # PPO with an LSTM: the plain side is reference.recurrent's loop (CleanRL's PPO-LSTM form:
    # one LSTM step per simulator step, minibatches of whole sequences unrolled step by step).
    TrainSpec(
        "ppo-lstm",
        "recipes.ppo_atari",
        "ppo",
        (4, 2),
        (1, 1),
        reference="plain PPO-LSTM",
        recurrent=True,
    ),  # fmt: skip
]


def available_specs() -> list[TrainSpec]:
    """The specs whose recipe module exists in this checkout (APPO landed later). A recipe
    that exists but fails to import is an error, not a missing row."""
    import importlib.util

    return [spec for spec in SPECS if importlib.util.find_spec(spec.module) is not None]


def quiet_accelrl_logging() -> None:
    """Keep ``Run``'s console lines (run dir, threads) out of the benchmark's output."""
    log = logging.getLogger("accelrl")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    log.setLevel(logging.WARNING)
    log.propagate = False


def make_config(
    spec: TrainSpec,
    game: str,
    device: str,
    quick: bool,
    run_dir: str,
    num_envs: int = 0,
) -> Any:
    """The recipe's ``Config`` for a benchmark run (resolved: presets applied)."""
    mod = importlib.import_module(spec.module)
    cfg = mod.Config()
    cfg.env.game = game
    cfg.device = device
    cfg.run_dir = run_dir
    cfg.log.progress = False
    cfg.log.tensorboard = False
    cfg.log.eval_episodes = 0
    cfg.log.checkpoint_every_frames = 10**12
    if spec.recurrent:
        cfg.model.recurrent = "lstm"
    algo = getattr(cfg, spec.section)
    if spec.section in ("ppo", "appo"):
        if num_envs:
            cfg.env.num_envs = num_envs
        steps = 16 if quick else cfg.collector.steps_per_batch // cfg.env.num_envs
        procs = 1 if getattr(cfg.collector, "kind", "sync") == "async" else None
        procs = procs or max(1, cfg.collector.num_workers)
        cfg.collector.steps_per_batch = cfg.env.num_envs * procs * steps
    elif spec.section == "a2c":
        if num_envs:
            steps = cfg.collector.steps_per_batch // cfg.env.num_envs
            cfg.env.num_envs = num_envs
            cfg.collector.steps_per_batch = num_envs * steps
    else:
        algo.preset = spec.preset or "none"
        algo.replay_capacity = 10_000 if quick else 50_000
        if quick and spec.preset == "dqn-512":
            # 16 instead of 64 simulators: starting 64 emulators takes ~15 s on 2 cores.
            cfg.env.num_envs, cfg.collector.steps_per_batch = 16, 64
        cfg = mod.ALGORITHM.resolve(cfg)
        algo = cfg.dqn
        # Learning starts after the first batch: every later iteration updates.
        algo.learning_starts_frames = cfg.collector.steps_per_batch * cfg.env.frameskip
    iters = spec.iterations[quick]
    cfg.total_frames = iters * cfg.collector.steps_per_batch * cfg.env.frameskip
    return cfg


def read_records(run_dir: str) -> list[Record]:
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return [(int(float(r["frames"])), float(r["time_s"])) for r in csv.DictReader(f)]


def run_recipe(spec: TrainSpec, cfg: Any) -> list[Record]:
    mod = importlib.import_module(spec.module)
    try:
        mod.train(cfg)
        return read_records(cfg.run_dir)
    finally:
        torch.set_num_threads(1)
        shutil.rmtree(cfg.run_dir, ignore_errors=True)


def plain_runner(
    spec: TrainSpec, cfg: Any, seed: int, torch_threads: int | None = None
) -> Callable[[], list[Record]]:
    """The plain loop on ``cfg`` (every hyperparameter, the simulators and the batch layout read
    from it; batches until ``cfg.total_frames``) seeded ``seed``, with the simulator threads the
    recipe would plan and ``torch_threads`` (default: the recipe's learner share while it
    collects)."""
    from accelrl.collectors import plan_threads

    cfg = dataclasses.replace(cfg, seed=seed)
    plan = plan_threads(cfg.threads, 0)  # plain loops run the simulators in-process
    learner_threads = (
        torch_threads or plan_threads(cfg.threads, cfg.collector.num_workers).learner_torch
    )
    kw = dict(device=cfg.device, threads=plan.sim_threads)

    def run() -> list[Record]:
        # cfg.model.recurrent lstm: plain_ppo and plain_a2c run their LSTM loops.
        if spec.section in ("ppo", "appo"):
            return plain_ppo(cfg, section=spec.section, **kw)
        if spec.section == "a2c":
            return plain_a2c(cfg, **kw)
        return plain_dqn(cfg, **kw)

    def wrapped() -> list[Record]:
        torch.set_num_threads(learner_threads)
        try:
            return run()
        finally:
            torch.set_num_threads(1)

    return wrapped


def describe(spec: TrainSpec, cfg: Any) -> str:
    c, e = cfg.collector, cfg.env
    kind = getattr(c, "kind", "sync")
    lstm = f", LSTM {cfg.model.lstm_hidden}" if spec.recurrent else ""
    if spec.section in ("ppo", "appo"):
        a = getattr(cfg, spec.section)
        procs = f"{c.num_workers}w x " if c.num_workers else ""
        return (
            f"{kind} {procs}{e.num_envs} envs, batch {c.steps_per_batch}, "
            f"{a.epochs}x{a.minibatches} minibatches{lstm}"
        )
    if spec.section == "a2c":
        return f"{e.num_envs} envs x {c.steps_per_batch // e.num_envs} steps"
    d = cfg.dqn
    return (
        f"{e.num_envs} envs x {c.steps_per_batch // e.num_envs}, batch {d.batch_size}, "
        f"intensity {d.training_intensity:g}, replay {d.replay_capacity // 1000}k"
    )


def probe_batches(spec: TrainSpec, cfg: Any, plan: Any) -> int:
    """Batches at the start of a synchronous recipe run during which
    ``accelrl.collectors.UpdateThreads`` is still probing thread counts (whole collections and
    updates at the count being tried; repeated every 500 updates, 0.4-2% of a long run): 0
    where nothing is probed (asynchronous kinds, DQN's replay feeder, a fixed count). The
    train rows report steady state, so the recipe runs these batches on top of the warm-up and
    they are left out of its rate (``benchmarks.learner_speed`` does the same)."""
    from accelrl.process import learner_threads

    overlapped = spec.section == "dqn" and cfg.dqn.asynchronous
    if getattr(cfg.collector, "kind", "sync") != "sync" or overlapped:
        return 0
    return learner_threads(cfg, plan, overlapped).probe_phase()


def bench_spec(
    spec: TrainSpec,
    game: str,
    device: str,
    quick: bool,
    rounds: int,
    num_envs: int = 0,
    verbose: bool = True,
) -> dict[str, Any]:
    """Recipe and plain loop alternately for ``rounds`` rounds; rates in frames/s.

    The plain loop runs at the recipe's learner share of torch threads and, where the recipe's
    synchronous updates may use more (``ThreadPlan.update_torch``), at that count too; the
    ratio is against the faster of the two (the plain loop at its best, as the recipe picks its
    update threads by measurement). The recipe's rate also leaves out its first thread probe
    (``probe_batches``, run on top of the warm-up)."""
    from accelrl.collectors import plan_threads

    warmup = spec.warmup[quick]
    probe = make_config(spec, game, device, quick, "unused", num_envs)
    plan = plan_threads(probe.threads, probe.collector.num_workers)
    counts = sorted({plan.learner_torch, plan.update_torch or plan.learner_torch})
    fixed = 0
    if quick:
        # A smoke test of the row, not a figure: one plain run at the learner's share and the
        # recipe fixed at that count, so it probes no thread counts (about 10 batches per
        # recipe; the choice of the faster count and the probe are the same code, tested on
        # their own).
        counts = counts[:1]
        fixed = counts[0]
    plains = {f"plain@{n}": n for n in counts}
    probing = 0 if fixed else probe_batches(spec, probe, plan)
    rates: dict[str, list[float]] = {"recipe": [], **{name: [] for name in plains}}
    details: dict[str, Any] = {}
    t0 = time.perf_counter()
    for r in range(rounds):
        order = ["recipe", *plains] if r % 2 == 0 else [*plains, "recipe"]
        for which in order:
            run_dir = tempfile.mkdtemp(prefix=f"bench_{spec.name}_")
            cfg = make_config(spec, game, device, quick, run_dir, num_envs)
            if fixed:
                cfg.threads.torch_threads = fixed
            if which == "recipe":
                cfg.total_frames += probing * cfg.collector.steps_per_batch * cfg.env.frameskip
                records = run_recipe(spec, cfg)
                rates[which].append(steady_fps(records, warmup + probing))
            else:
                shutil.rmtree(run_dir, ignore_errors=True)
                records = plain_runner(spec, cfg, seed=r, torch_threads=plains[which])()
                rates[which].append(steady_fps(records, warmup))
            details["config"] = describe(spec, cfg)
            details.setdefault(f"records_{which}", []).append(records)
        if verbose:
            plain_rates = ", ".join(f"{name} {rates[name][-1]:,.0f}" for name in plains)
            print(
                f"  train {spec.name} round {r + 1}/{rounds}: recipe "
                f"{rates['recipe'][-1]:,.0f} frames/s, {plain_rates}",
                flush=True,
            )
    best = max(plains, key=lambda name: median(rates[name]))
    return {
        "name": spec.name,
        "reference": spec.reference,
        "recipe_fps": median(rates["recipe"]),
        "plain_fps": median(rates[best]),
        "plain_best": best,
        "ratio": median_ratio(rates["recipe"], rates[best]),
        "per_round": rates,
        "warmup_iterations": warmup,
        "recipe_probe_iterations": probing,
        "iterations": spec.iterations[quick],
        "seconds": time.perf_counter() - t0,
        **details,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--game", default="Pong")
    p.add_argument("--recipes", nargs="+", default=None, help="subset of " + str(
        [s.name for s in SPECS]))  # fmt: skip
    p.add_argument("--rounds", type=int, default=0, help="0: 2 (1 with --quick)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-envs", type=int, default=0, help="PPO/APPO/A2C simulators (0: recipe's)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    quiet_accelrl_logging()
    rounds = args.rounds or (1 if args.quick else 2)
    print(f"{cores()} cores, device {args.device}")
    for spec in available_specs():
        if args.recipes and spec.name not in args.recipes:
            continue
        res = bench_spec(spec, args.game, args.device, args.quick, rounds, args.num_envs)
        print(
            f"{spec.name:8s} {res['config']}: recipe {res['recipe_fps']:,.0f} frames/s, "
            f"{spec.reference} ({res['plain_best']}) {res['plain_fps']:,.0f}, "
            f"ratio {res['ratio']:.3f}"
        )


if __name__ == "__main__":
    main()
