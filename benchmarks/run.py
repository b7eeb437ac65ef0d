"""The benchmark suite: env, collection, training and replay throughput in one table.

    python -m benchmarks.run [--quick] [--json PATH] [--games Pong Breakout] [--seconds S]
                             [--device cpu|cuda]
                             [--sections env collect train replay learner startup minatar
                                         precision acting]

Every row is a rate measured in this run next to the reference it is compared with, measured in
the same run, their ratio (the median of per-round paired ratios where the two alternate in
rounds) and the target, with ``MISSED`` where the target is not met:

- env (per game): agent steps/s (frames/s = 4x) of raw ale-py ``AtariVectorEnv`` (the simulator
  ceiling: preprocessing in C++, numpy out), accelrl's ``make_env`` with the ``ale_vec`` and
  ``gym`` backends, gymnasium's ``AsyncVectorEnv`` of preprocessed ALE envs and TorchRL's
  reference pipeline (``benchmarks.torchrl_reference``), all with ``--num-envs`` simulators and
  random actions, alternating in 0.1 s rounds. Reference: raw. Target: accelrl >= 0.9 x raw.
- collect (first game): the Nature-CNN actor-critic in the loop, no training. Every
  ``CollectorConfig.kind`` this checkout has (read at run time), ale-py's async mode, TorchRL's
  reference pipeline with its ``Collector``, and the parts of the synchronous ceiling: env alone
  and inference alone (frames to the policy's device, actions back), ceiling =
  ``1 / (1/env_rate + inference_s_per_step)`` per round. Targets: >= 0.9 x ceiling and >= 4 x
  TorchRL's reference for every accelrl kind.
- train (first game): each recipe's ``train(cfg)`` against a plain PyTorch loop with the same
  simulators, network and hyperparameters (``reference.atari``), frames/s after warm-up
  iterations (``benchmarks.train_throughput``), the plain loop at the recipe's collection
  share of torch threads and at its update count, the faster taken. Target: >= 1.0 x plain.
- minatar: agent steps/s (= frames/s) of accelrl's MinAtar env (``MinAtar/Breakout``, 64
  simulators; quick: 8) against a raw loop over ``minatar.Environment`` objects
  (``benchmarks.minatar_throughput``), alternating in 0.1 s rounds, and the same env stepped
  as ``LeanCollector`` steps it (``step_into``). Reference: raw. No target.
- precision: bf16 against fp32 (``benchmarks.precision``): PPO and DQN update time, the acting
  policy's step, channels_last and foreach Adam, each paired with fp32 in alternating rounds;
  ratio = speed-up over fp32. No target (docs/precision.md says when bf16 pays).
- acting: the framework's cost per agent step (``benchmarks.acting_overhead``): each recipe's
  collection (PPO, A2C, DQN with its replay write) against a plain torch loop on zero-cost
  simulators (``Null/Atari``, ``Null/CartPole``) with a tiny policy, at 8, 64 and 256
  simulators, alternating in rounds. Rate: microseconds per agent step; ratio = recipe / plain
  time. Target: <= 1.25 at 64 and 256 simulators. Quick: ``Null/CartPole``, 8 simulators, PPO
  and DQN, two short rounds.
- replay: ``FrameReplay`` bytes per 1M Atari transitions (target <= 7.5 GB; reference: storing
  obs and next obs stacks) and sample + DQN update time at batch 512 and 2048 against the update
  alone (``benchmarks.replay_memory``).

``--quick`` (about 5 minutes on 2 cores): 2 simulators, short rounds, small training batches
and few iterations, one game, a 40k-transition replay extrapolated to 1M, training rows with
the recipe fixed at the learner's thread count (no thread probe) against the plain loop at that
count only, the learner row ``recipe@1`` against ``plain@1`` only, one precision round. Its
figures check that everything runs; only full runs are worth quoting. Startup (worker
processes, first batches) is never timed.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.common import (
    Row,
    cores,
    machine_info,
    median,
    median_ratio,
    print_summary,
    run_rounds,
    time_steps,
    write_json,
)

SECTIONS = (
    "env", "collect", "train", "replay", "learner", "update", "startup", "minatar", "precision",
    "acting",
)  # fmt: skip
FRAMESKIP = 4
ENV_TARGET = 0.9
CEILING_TARGET = 0.9
REFERENCE_TARGET = 4.0
TRAIN_TARGET = 1.0
REPLAY_BUDGET_GB = 7.5
BACKGROUND_KINDS = ("async", "batched")  # collector kinds that work while nobody takes a batch

ENV_LABELS = {
    "raw": "raw ale-py AtariVectorEnv",
    "accelrl ale_vec": "accelrl make_env ale_vec",
    "accelrl gym": "accelrl make_env gym (ParallelEnv)",
    "gymnasium async": "gymnasium AsyncVectorEnv",
    "torchrl ref": "TorchRL ref (ParallelEnv+transforms)",
}


def log(msg: str) -> None:
    print(msg, flush=True)


# --- env --------------------------------------------------------------------------------------


def env_section(
    args: argparse.Namespace, threads: int, keep_ref: bool
) -> tuple[list[Row], dict[str, Any], Any]:
    """Env-only rows for every game; returns the first game's reference env when ``keep_ref``
    (the collection section reuses it: its 8 spawned workers take a minute to start)."""
    from benchmarks.env_throughput import ENV_PIPELINES, env_pipelines

    n = args.num_envs
    rows: list[Row] = []
    details: dict[str, Any] = {}
    kept = None
    seg_s = 0.1
    rounds = max(2, round(args.seconds / seg_s))
    for gi, game in enumerate(args.games):
        t0 = time.perf_counter()
        log(f"env {game}: building {len(ENV_PIPELINES)} pipelines of {n} simulators ...")
        steppers, envs = env_pipelines(game, n, threads, seed=1000 * gi)
        log(f"  built in {time.perf_counter() - t0:.0f} s; {rounds} rounds x {seg_s} s each")
        segments = {name: (lambda s, st=st: time_steps(st, n, s)) for name, st in steppers.items()}
        rates = run_rounds(segments, rounds, seg_s, verbose=args.verbose)
        for name, env in envs.items():
            if keep_ref and gi == 0 and name == "torchrl ref":
                kept = env
            else:
                env.close()
        raw = rates["raw"]
        for name in ENV_PIPELINES:
            r = rates[name]
            accelrl = name.startswith("accelrl")
            rows.append(
                Row(
                    "env",
                    f"env {game}: {ENV_LABELS[name]}",
                    median(r),
                    "steps/s",
                    FRAMESKIP * median(r),
                    reference="" if name == "raw" else f"raw, {n} sims",
                    ref_rate=None if name == "raw" else median(raw),
                    ratio=None if name == "raw" else median_ratio(r, raw),
                    target=ENV_TARGET if accelrl else None,
                )
            )
        details[game] = {"num_envs": n, "sim_threads": threads, "per_round": rates}
    return rows, details, kept


# --- collection -------------------------------------------------------------------------------


def collect_pipelines(n: int, workers: int) -> list[tuple[str, str, int, int, int]]:
    """(label, kind, envs per process, worker processes, ale-py async rows) for every collector
    kind this checkout has, with ``n`` simulators in all."""
    from benchmarks.collector_throughput import collector_kinds

    kinds = collector_kinds()
    w = workers if workers >= 1 and n % workers == 0 else 0
    out = [(f"sync in-process {n}", "sync", n, 0, 0)]
    if w:
        out.append((f"sync {w} workers x {n // w}", "sync", n // w, w, 0))
    if "alternating" in kinds and n >= 2 and n % 2 == 0:
        out.append((f"alternating 2 x {n // 2}", "alternating", n, 0, 0))
    if "async" in kinds and w:
        out.append((f"async {w} workers x {n // w}", "async", n // w, w, 0))
    if "batched" in kinds and w:
        out.append((f"batched {n} slots, {w} procs", "batched", n // w, w, 0))
    if n >= 2:
        out.append((f"sync ale-py async mode {n // 2}/{n}", "sync", n, 0, n // 2))
    return out


def shutdown_all(iterators: list[Any], collectors: dict[str, Any]) -> None:
    """Close the iterators (a suspended collector generator shuts its collector down when it is
    collected, late and noisily), shut the collectors down and collect them now: TorchRL's
    weight-sync objects left for interpreter exit can deadlock in their ``__del__``."""
    import gc

    for it in iterators:
        try:
            it.close()
        except Exception as err:  # noqa: BLE001 - best effort: shutdown follows
            log(f"  (closing a collector iterator: {err!r})")
    for c in collectors.values():
        try:
            c.shutdown()
        except Exception as err:  # noqa: BLE001
            log(f"  (collector shutdown: {err!r})")
    iterators.clear()
    collectors.clear()
    gc.collect()


def collect_section(args: argparse.Namespace, ref_env: Any) -> tuple[list[Row], dict[str, Any]]:
    """Block A: the kinds that stop when their batch is taken (sync, alternating, ale-py async
    mode), TorchRL's reference and the ceiling's parts, in rounds. Then one block per kind that
    works in the background (async, batched), each with its own rounds of [kind, env alone,
    inference alone, reference] and shut down before the next: their idle polling slowed a
    2-worker sync collector by ~20% when they shared the machine (measured), so every ratio is
    paired within its own block. Every collector segment starts with one untimed batch."""
    from benchmarks.collector_throughput import (
        BackgroundSegment,
        build_accelrl,
        build_reference,
        collector_segment,
        env_segment,
        inference_segment,
    )

    game, n, steps, device = args.games[0], args.num_envs, args.steps, args.device
    from accelrl.envs.ale_vec import AleVecEnv

    probe = AleVecEnv(game, 1)
    num_actions = probe.num_actions
    probe.close()
    pipelines = collect_pipelines(n, args.workers)
    foreground = [p for p in pipelines if p[1] not in BACKGROUND_KINDS]
    background_kinds = [p for p in pipelines if p[1] in BACKGROUND_KINDS]
    t0 = time.perf_counter()
    log(
        f"collect {game}: building {len(foreground)} accelrl collectors and TorchRL's reference "
        f"({n} simulators each, {steps} steps per simulator per batch, policy on {device}) ..."
    )

    def build(i: int, label: str, kind: str, per_proc: int, w: int, rows: int):
        c, fpb = build_accelrl(
            per_proc, w, rows, num_actions, seed=100 * i, kind=kind, steps=steps,
            device=device, game=game,
        )  # fmt: skip
        it = iter(c)
        next(it)  # warm-up: the first batch holds the workers' start
        if kind in BACKGROUND_KINDS:
            seg = BackgroundSegment(c, it, fpb, max(1, w))
            seg.settle()
            return c, it, seg
        return c, it, collector_segment(it, fpb, prime=True)

    collectors: dict[str, Any] = {}
    iterators: list[Any] = []
    segments: dict[str, Any] = {}
    for i, (label, kind, per_proc, w, rows) in enumerate(foreground):
        collectors[label], it, segments[label] = build(i, label, kind, per_proc, w, rows)
        iterators.append(it)
    ref, fpb = build_reference(n, num_actions, env=ref_env, steps=steps, device=device, game=game)
    ref_it = iter(ref)
    next(ref_it)
    shared = {"reference": collector_segment(ref_it, fpb, prime=True)}
    env, shared["env alone"] = env_segment(n, seed=5000, game=game)
    shared["inference alone"] = inference_segment(n, num_actions, device)
    log(f"  built and warmed up in {time.perf_counter() - t0:.0f} s (not timed)")

    rounds = args.collect_rounds
    seg_s = args.seconds / rounds
    log(f"  block A: {rounds} rounds x {seg_s:.2f} s per pipeline (whole batches, one untimed)")
    rates = run_rounds({**segments, **shared}, rounds, seg_s, verbose=args.verbose)
    shutdown_all(iterators, collectors)
    blocks = {label: rates for label, *_ in foreground}
    b_rounds = max(2, rounds - 2)
    for j, (label, kind, per_proc, w, rows) in enumerate(background_kinds):
        t1 = time.perf_counter()
        c, it, seg = build(len(foreground) + j, label, kind, per_proc, w, rows)
        log(
            f"  block {label}: built in {time.perf_counter() - t1:.0f} s; {b_rounds} rounds "
            f"with the reference and the ceiling's parts"
        )
        block = run_rounds({label: seg, **shared}, b_rounds, seg_s, verbose=args.verbose)
        seg.close()
        shutdown_all([it], {label: c})
        blocks[label] = block
        rates[label] = block[label]
    shutdown_all([ref_it], {"reference": ref})
    env.close()

    def ceiling_of(r: dict[str, list[float]]) -> list[float]:
        return [
            1.0 / (1.0 / e + 1.0 / i)
            for e, i in zip(r["env alone"], r["inference alone"], strict=True)
        ]

    out: list[Row] = []
    for label, *_ in pipelines:
        block = blocks[label]
        r, ceiling, ref_r = block[label], ceiling_of(block), block["reference"]
        what = f"collect {game}: accelrl {label}"
        common = dict(rate=median(r), unit="steps/s", frames_per_s=FRAMESKIP * median(r))
        for reference, ref, target in (
            ("sync ceiling", ceiling, CEILING_TARGET),
            ("TorchRL ref Collector", ref_r, REFERENCE_TARGET),
        ):
            out.append(
                Row(
                    "collect",
                    what,
                    **common,
                    reference=reference,
                    ref_rate=median(ref),
                    ratio=median_ratio(r, ref),
                    target=target,
                )
            )
    # The reference and the ceiling's rows: block A's measurements.
    ceiling, ref_r = ceiling_of(rates), rates["reference"]
    env_r, inf_r = rates["env alone"], rates["inference alone"]
    out.append(
        Row(
            "collect",
            f"collect {game}: TorchRL ref (ParallelEnv+transforms) + Collector",
            median(ref_r),
            "steps/s",
            FRAMESKIP * median(ref_r),
            reference="sync ceiling",
            ref_rate=median(ceiling),
            ratio=median_ratio(ref_r, ceiling),
        )
    )
    out.append(
        Row(
            "collect",
            f"collect {game}: ceiling 1/(1/env + inference s/step)",
            median(ceiling),
            "steps/s",
            FRAMESKIP * median(ceiling),
        )
    )
    out.append(
        Row(
            "collect",
            f"collect {game}: part: accelrl env alone, {n} sims",
            median(env_r),
            "steps/s",
            FRAMESKIP * median(env_r),
        )
    )
    ms = 1e3 * n / median(inf_r)
    out.append(
        Row(
            "collect",
            f"collect {game}: part: inference alone, batch {n} ({ms:.2f} ms)",
            median(inf_r),
            "steps/s",
        )
    )
    details = {
        "game": game,
        "num_envs": n,
        "steps_per_env_per_batch": steps,
        "device": device,
        "pipelines": [list(p) for p in pipelines],
        "inference_ms_per_batch": ms,
        "per_round": {**rates, "ceiling": ceiling},
        "background_blocks": {
            label: {**blocks[label], "ceiling": ceiling_of(blocks[label])}
            for label, *_ in background_kinds
        },
    }
    return out, details


# --- training ---------------------------------------------------------------------------------


def train_section(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    from benchmarks.train_throughput import available_specs, bench_spec, quiet_accelrl_logging

    quiet_accelrl_logging()
    game = args.games[0]
    rows, details = [], {}
    specs = [s for s in available_specs() if not args.recipes or s.name in args.recipes]
    log(f"train {game}: {[s.name for s in specs]}, {args.train_rounds} round(s) each ...")
    for spec in specs:
        res = bench_spec(
            spec,
            game,
            args.device,
            args.quick,
            args.train_rounds,
            num_envs=args.train_envs,
            verbose=True,
        )
        details[spec.name] = res
        rows.append(
            Row(
                "train",
                f"train {game}: {spec.name} ({res['config']})",
                res["recipe_fps"] / FRAMESKIP,
                "steps/s",
                res["recipe_fps"],
                reference=f"{spec.reference} ({res['plain_best']})",
                ref_rate=res["plain_fps"] / FRAMESKIP,
                ratio=res["ratio"],
                target=TRAIN_TARGET,
            )
        )
    return rows, details


# --- replay -----------------------------------------------------------------------------------


def replay_section(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    from benchmarks.replay_memory import measure

    cap = args.replay_capacity
    log(f"replay: filling a {cap:,}-transition FrameReplay (memmap) ...")
    reps = {512: 1, 2048: 1} if args.quick else None
    res = measure(
        cap,
        storage_dir=args.replay_dir,
        sample_reps=5 if args.quick else 20,
        update_reps=reps,
        device=args.device,
        verbose=False,
    )
    how = f"extrapolated from {cap // 1000}k" if res["extrapolated"] else "measured"
    rows = [
        Row(
            "replay",
            f"replay: FrameReplay per 1M Atari transitions ({how})",
            res["bytes_at_1m"] / 1e9,
            "GB",
            reference="obs+next obs uint8 stacks",
            ref_rate=res["naive_bytes_at_1m"] / 1e9,
            ratio=res["bytes_at_1m"] / res["naive_bytes_at_1m"],
            target=REPLAY_BUDGET_GB,
            op="<=",
            target_on="rate",
        )
    ]
    for batch, v in res["batches"].items():
        total = v["sample_s"] + v["update_s"]
        rows.append(
            Row(
                "replay",
                f"replay: sample + DQN update, batch {batch} ({args.device})",
                1e3 * total,
                "ms",
                reference="DQN update alone",
                ref_rate=1e3 * v["update_s"],
                ratio=total / v["update_s"],
            )
        )
    return rows, res


# --- main -------------------------------------------------------------------------------------


# --- learner speed and time to first batch ----------------------------------------------------


def learner_section(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    """Each recipe's thread plan (and ``--compile.loss``) against its plain loop at the plain
    loop's best torch thread count (``benchmarks.learner_speed``); quick: PPO, idle, eager, the
    recipe at one torch thread (no thread probe) against the plain loop at one."""
    from benchmarks import learner_speed

    if args.quick:
        quick = "--algos ppo --batches 2 --warmup 1 --no-compile --only recipe@1 plain@1"
        runs = [quick.split()]
    else:
        # One round of 4 steady PPO batches (~4 s) read the recipe anywhere in 0.70-1.21x of
        # the same plain loop across runs of the same code (2026-12-02): PPO gets 8 steady
        # batches and 2 rounds (medians; 12 batches x 3 rounds would take ~1.5 h on a slow
        # 2-core host). CartPole times a whole 20k-step run: one round.
        runs = [
            ["--algos", "ppo", "--batches", "10", "--rounds", "2", "--busy"],
            ["--algos", "dqn-cartpole", "--busy"],
        ]
    results: dict[str, Any] = {}
    for flags in runs:
        log(f"learner: {' '.join(flags)} ...")
        results.update(learner_speed.main(flags))
    rows = []
    for key, configs in results.items():
        algo, condition = key.split("/")
        plain = {k: v for k, v in configs.items() if k.startswith("plain")}
        best = max(plain, key=lambda k: plain[k]["fps"])
        for name in ("recipe", "recipe@1", "recipe+compile"):
            if name not in configs:
                continue
            rows.append(
                Row(
                    "learner",
                    f"learner {algo}, {condition}: {name}",
                    configs[name]["fps"],
                    "frames/s",
                    configs[name]["fps"],
                    reference=best,
                    ref_rate=plain[best]["fps"],
                    ratio=configs[name]["x_best_plain"],
                    target=TRAIN_TARGET,
                )
            )
    return rows, results


def update_section(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    """The DQN recipe's update (replay sample to priority write) against the plain loop's, each
    at its best threads and kernels (``benchmarks.dqn_update``): the CartPole MLP and the
    MinAtar CNN, plain DQN (targets) and the rainbow combination; quick: plain DQN, one round."""
    from benchmarks import dqn_update

    if args.quick:
        flags = [*dqn_update.quick_args(), "--variants", "dqn"]
    else:
        flags = ["--split", "0"]
    results = dqn_update.main(flags)
    rows = []
    for key, r in results.items():
        net, variant = key.split()
        rows.append(
            Row(
                "update",
                f"update DQN {net} {variant}: {r['best_recipe']}",
                r["updates_per_s"][r["best_recipe"]],
                "updates/s",
                reference=r["best_plain"],
                ref_rate=r["updates_per_s"][r["best_plain"]],
                ratio=r["ratio"],
                target=r["target"] if variant == "dqn" else None,
            )
        )
    return rows, results


def startup_section(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    """Seconds from the command to the first batch, against ``import torch, torchrl``."""
    from benchmarks import first_batch

    results = first_batch.main(["--rounds", "1" if args.quick else "3"])
    floor_name = next(k for k in results if "floor" in k)
    floor = results[floor_name]["median_s"]
    rows = [
        Row(
            "startup",
            f"first batch: {name}",
            value["median_s"],
            "s",
            reference=floor_name,
            ref_rate=floor,
            ratio=value["x_floor"],
        )
        for name, value in results.items()
        if name != floor_name
    ]
    return rows, results


def minatar_section(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    """accelrl's MinAtar env against the raw ``minatar.Environment`` loop (one frame a step)."""
    from benchmarks.minatar_throughput import bench_num_envs

    n = 8 if args.quick else 64
    seg_s = 0.1
    rounds = max(2, round(args.seconds / seg_s))
    result = bench_num_envs("breakout", n, rounds, args.seconds, args.verbose)
    rate, raw = result["accelrl_steps_per_s"], result["raw_steps_per_s"]
    row = Row(
        "minatar",
        "env MinAtar/Breakout: accelrl make_env minatar",
        rate,
        "steps/s",
        rate,  # one MinAtar frame per agent step
        reference=f"raw minatar loop, {n} sims",
        ref_rate=raw,
        ratio=result["accelrl_over_raw"],
    )
    lean = Row(
        "minatar",
        "env MinAtar/Breakout: stepped as LeanCollector steps it",
        result["lean_steps_per_s"],
        "steps/s",
        result["lean_steps_per_s"],
        reference=f"raw minatar loop, {n} sims",
        ref_rate=raw,
        ratio=result["lean_over_raw"],
    )
    return [row, lean], result


def precision_section(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    """bf16 / channels_last against fp32 on the learner's device (``benchmarks.precision``)."""
    from benchmarks import precision

    flags = ["--device", args.device] + (["--quick"] if args.quick else [])
    results = precision.main(flags)
    return precision.rows(results), results


# --- acting overhead (self-contained: benchmarks.acting_overhead) -----------------------------


def acting_section(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    """Each recipe's collection against a plain loop on zero-cost simulators, in microseconds
    per agent step (``benchmarks.acting_overhead``)."""
    from benchmarks import acting_overhead

    if args.quick:
        games, sizes, recipes, rounds, seconds = ["Null/CartPole"], [8], ("ppo", "dqn"), 2, 0.4
    else:
        games, sizes = ["Null/Atari", "Null/CartPole"], [8, 64, 256]
        recipes, rounds, seconds = acting_overhead.RECIPES, 20, max(args.seconds, 4.0)
    rows: list[Row] = []
    results = []
    for game in games:
        for n in sizes:
            log(f"acting {game}, {n} simulators: {rounds} rounds")
            r = acting_overhead.bench(
                game, n, recipes, rounds, seconds, args.verbose, device=args.device
            )
            results.append(r)
            for recipe in recipes:
                target = n in acting_overhead.TARGET_NUM_ENVS
                rows.append(
                    Row(
                        "acting",
                        f"acting {game}, {n} sims: {recipe} collection ({args.device})",
                        r[f"{recipe} us/step"],
                        "us/step",
                        reference=f"plain {recipe} loop",
                        ref_rate=r[f"plain {recipe} us/step"],
                        ratio=r[f"{recipe} / plain"],
                        target=acting_overhead.TARGET if target else None,
                        op="<=",
                    )
                )
    return rows, {"results": results}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="smoke-test sizes (~5 min on 2 cores)")
    p.add_argument("--json", default=None, help="write rows and raw measurements here")
    p.add_argument("--games", nargs="+", default=None, help="default Pong Breakout (quick: Pong)")
    p.add_argument(
        "--seconds", type=float, default=0, help="timed seconds per pipeline (default 6, quick 1)"
    )
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    p.add_argument("--device", default="cpu", help="policy/learner device: cpu, cuda, auto")
    p.add_argument("--num-envs", type=int, default=0, help="simulators (default 8, quick 2)")
    p.add_argument("--workers", type=int, default=-1, help="collector worker processes")
    p.add_argument("--steps", type=int, default=0, help="collection steps per simulator/batch")
    p.add_argument("--collect-rounds", type=int, default=0)
    p.add_argument("--train-rounds", type=int, default=0, help="default 3, quick 1")
    p.add_argument("--train-envs", type=int, default=0, help="PPO/APPO/A2C simulators override")
    p.add_argument("--recipes", nargs="+", default=None, help="subset: ppo a2c dqn ...")
    p.add_argument("--replay-capacity", type=int, default=0, help="default 1M, quick 40k")
    p.add_argument("--replay-dir", default=None, help="parent folder of the memmap replay")
    p.add_argument("--threads", type=int, default=0, help="simulator threads (0: core count)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every round")
    args = p.parse_args(argv)
    q = args.quick
    args.games = args.games or (["Pong"] if q else ["Pong", "Breakout"])
    args.seconds = args.seconds or (1.0 if q else 6.0)
    args.num_envs = args.num_envs or (2 if q else 8)
    if args.workers < 0:
        args.workers = 1 if q else min(2, cores(), args.num_envs)
    args.steps = args.steps or (16 if q else 64)
    args.collect_rounds = args.collect_rounds or (2 if q else 5)
    args.train_rounds = args.train_rounds or (1 if q else 3)
    args.replay_capacity = args.replay_capacity or (40_000 if q else 1_000_000)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


SECTIONS_OF_ARGS: dict[str, Callable[[argparse.Namespace], tuple[list[Row], dict[str, Any]]]] = {
    "train": train_section,
    "replay": replay_section,
    "learner": learner_section,
    "update": update_section,
    "startup": startup_section,
    "minatar": minatar_section,
    "precision": precision_section,
    "acting": acting_section,
}
"""The sections that read only the arguments (``env`` and ``collect`` share a simulator)."""


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(1)  # next to ALE's threads torch's default threads stall
    import torchrl  # noqa: F401  (configures its logger on import; quieten it afterwards)

    logging.getLogger("torchrl").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=UserWarning, module="torchrl")
    threads = args.threads or cores()
    info = machine_info()
    log(
        f"benchmarks.run{' --quick' if args.quick else ''}: {info['cores']} cores, device "
        f"{args.device}, games {args.games}, {args.num_envs} simulators, {args.seconds:g} s "
        f"per pipeline, sections {args.sections}"
    )
    rows: list[Row] = []
    details: dict[str, Any] = {}
    ref_env = None
    section_s: dict[str, float] = {}
    section_load: dict[str, tuple[float, float]] = {}
    for section in SECTIONS:
        if section not in args.sections:
            continue
        t0 = time.perf_counter()
        load_before = os.getloadavg()[0]
        if section == "env":
            r, details["env"], ref_env = env_section(args, threads, "collect" in args.sections)
        elif section == "collect":
            r, details["collect"] = collect_section(args, ref_env)
            ref_env = None
        else:
            r, details[section] = SECTIONS_OF_ARGS[section](args)
        rows += r
        section_s[section] = time.perf_counter() - t0
        # Other work on a shared machine shows in the 1-minute load average.
        section_load[section] = (load_before, os.getloadavg()[0])
        log(f"{section}: {section_s[section]:.0f} s, load average {load_before:.1f} -> "
            f"{section_load[section][1]:.1f}")  # fmt: skip
    if ref_env is not None:
        ref_env.close()
    elapsed = time.perf_counter() - start

    print()
    quick = " (QUICK: smoke-test sizes)" if args.quick else ""
    print(
        f"accelrl benchmarks, {info['date']}, {info['cores']} cores, torch {info['torch']}, "
        f"device {args.device}; rates are medians over rounds, ratios medians of per-round "
        f"paired ratios; frames/s = 4 x agent steps/s (MinAtar: 1 x){quick}"
    )
    print_summary(rows)
    missed = [r for r in rows if r.met == "MISSED"]
    print(f"\n{len(missed)} of {sum(r.target is not None for r in rows)} targets MISSED")
    for r in missed:
        ratio = "nan" if r.ratio is None or not math.isfinite(r.ratio) else f"{r.ratio:.3f}"
        print(f"  MISSED: {r.what} vs {r.reference or 'target'}: {ratio} ({r.target_text()})")
    print(
        f"total {elapsed:.0f} s ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in section_s.items())
        + "); 1-min load average before -> after each section: "
        + ", ".join(f"{k} {a:.1f} -> {b:.1f}" for k, (a, b) in section_load.items())
    )
    payload = {
        **info,
        "argv": sys.argv[1:] if argv is None else argv,
        "quick": args.quick,
        "device": args.device,
        "games": args.games,
        "num_envs": args.num_envs,
        "workers": args.workers,
        "sections": args.sections,
        "seconds": args.seconds,
        "elapsed_s": elapsed,
        "section_s": section_s,
        "section_load_average": section_load,
        "rows": [r.as_dict() for r in rows],
        "details": details,
    }
    if args.json:
        write_json(args.json, payload)
    return payload


def run_and_exit(fn, argv: list[str] | None = None) -> None:
    """Run ``fn(argv)`` and leave with ``os._exit``: TorchRL collectors' finalizers
    (weight-sync schemes putting to multiprocessing queues during interpreter shutdown) were seen
    to deadlock at exit after every collector had been shut down; nothing is left to clean up."""
    code = 0
    try:
        fn(argv)
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    import multiprocessing

    for child in multiprocessing.active_children():  # none after a clean run
        child.terminate()
        child.join(timeout=5)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run_and_exit(main)
