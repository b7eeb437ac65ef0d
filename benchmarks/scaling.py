"""Collection throughput against the number of simulators and collector worker processes.

For every worker count (0: simulators stepped in the learner process by TorchRL's ``Collector``;
W >= 1: ``MultiSyncCollector`` with W processes) and every total of 1, 2, 4, 8, ... simulators
(split evenly over the workers), accelrl's synchronous collector runs the Nature-CNN
actor-critic (no training) for ``--seconds`` after a warm-up batch; each configuration is built,
timed and shut down on its own (worker processes are not shared). The grid runs ``--repeats``
times (default 2), every other pass in reverse order, and each configuration's rate is the
median over passes, so that drift of a shared machine's speed spreads over all lines. Then:

- ``scaling.csv``: simulators, workers, simulators per worker, agent steps/s, frames/s, startup;
- ``scaling.png``: frames/s against simulators, one line per worker count;
- a recommended config for this machine: the fewest simulators (then workers) within 5% of the
  fastest configuration, with ``frames_per_batch`` = simulators x 128 steps (PPO's default T).

Run: ``python -m benchmarks.scaling [--out DIR] [--max-sims 32] [--workers 0 1 2] [--device cuda]``
(``--quick``: up to 4 simulators, 0.5 s each).
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import statistics
import time
from typing import Any

import torch

from benchmarks.common import cores, machine_info, write_json

FRAMESKIP = 4
PPO_STEPS = 128
WITHIN = 0.05


def default_workers(n_cores: int) -> list[int]:
    """0, 1, 2, 4, ... up to the core count (and the core count itself)."""
    out, w = [0, 1], 2
    while w <= n_cores:
        out.append(w)
        w *= 2
    if n_cores not in out:
        out.append(n_cores)
    return out


def sim_counts(max_sims: int) -> list[int]:
    out, n = [], 1
    while n <= max_sims:
        out.append(n)
        n *= 2
    return out


def measure(
    game: str, sims: int, workers: int, steps: int, seconds: float, device: str, seed: int
) -> dict[str, Any]:
    from accelrl.envs.ale_vec import AleVecEnv
    from benchmarks.collector_throughput import build_accelrl
    from benchmarks.common import time_steps

    probe = AleVecEnv(game, 1)
    num_actions = probe.num_actions
    probe.close()
    t0 = time.perf_counter()
    per = sims // max(1, workers)
    collector, fpb = build_accelrl(
        per, workers, 0, num_actions, seed, steps=steps, device=device, game=game
    )
    it = iter(collector)
    try:
        next(it)  # warm-up (and the workers' start)
        startup = time.perf_counter() - t0
        n, elapsed = time_steps(lambda: next(it), fpb, seconds)
    finally:
        it.close()
        collector.shutdown()
    rate = n / elapsed
    return {
        "sims": sims,
        "workers": workers,
        "sims_per_worker": per,
        "steps_per_s": rate,
        "frames_per_s": FRAMESKIP * rate,
        "startup_s": startup,
        "batch_steps": fpb,
    }


def recommend(results: list[dict[str, Any]]) -> dict[str, Any]:
    best = max(r["frames_per_s"] for r in results)
    good = [r for r in results if r["frames_per_s"] >= (1 - WITHIN) * best]
    pick = min(good, key=lambda r: (r["sims"], r["workers"]))
    sims, workers = pick["sims"], pick["workers"]
    return {
        "num_envs": pick["sims_per_worker"],
        "num_workers": workers,
        "frames_per_batch": sims * PPO_STEPS,
        "frames_per_s": pick["frames_per_s"],
        "best_frames_per_s": best,
        "flags": (
            f"--env.num-envs {pick['sims_per_worker']} --collector.num-workers {workers} "
            f"--collector.steps-per-batch {sims * PPO_STEPS}"
        ),
    }


def plot(results: list[dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for w in sorted({r["workers"] for r in results}):
        pts = sorted((r["sims"], r["frames_per_s"]) for r in results if r["workers"] == w)
        label = "in-process (0 workers)" if w == 0 else f"{w} worker{'s' if w > 1 else ''}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    sims = sorted({r["sims"] for r in results})
    ax.set_xticks(sims, [str(n) for n in sims])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("simulators (all workers)")
    ax.set_ylabel("frames/s (4 x agent steps/s)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="scaling_results", help="folder for scaling.csv/png/json")
    p.add_argument("--game", default="Pong")
    p.add_argument("--max-sims", type=int, default=0, help="default max(32, 4 x cores)")
    p.add_argument("--workers", type=int, nargs="+", default=None, help="default 0 1 2 4 .. cores")
    p.add_argument("--seconds", type=float, default=0, help="timed seconds each (default 3)")
    p.add_argument("--steps", type=int, default=32, help="steps per simulator per batch")
    p.add_argument("--repeats", type=int, default=0, help="passes over the grid (default 2)")
    p.add_argument("--device", default="cpu", help="policy device: cpu, cuda, auto")
    p.add_argument("--quick", action="store_true", help="up to 4 simulators, 0/1 workers, 0.5 s")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    import torchrl  # noqa: F401

    logging.getLogger("torchrl").setLevel(logging.WARNING)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    n_cores = cores()
    workers = args.workers or ([0, 1] if args.quick else default_workers(n_cores))
    max_sims = args.max_sims or (4 if args.quick else max(32, 4 * n_cores))
    repeats = args.repeats or (1 if args.quick else 2)
    seconds = args.seconds or (0.5 if args.quick else 3.0)
    steps = 8 if args.quick and args.steps == 32 else args.steps
    grid = [
        (n, w)
        for n in sim_counts(max_sims)
        for w in workers
        if n >= max(1, w) and n % max(1, w) == 0
    ]
    # Alternate worker counts from one configuration to the next.
    grid.sort(key=lambda nw: (nw[0], nw[1] if (nw[0].bit_length() % 2) else -nw[1]))
    os.makedirs(args.out, exist_ok=True)
    print(
        f"scaling on {n_cores} cores, {args.game}, policy on {args.device}: {len(grid)} configs, "
        f"{seconds:g} s each, {steps} steps per simulator per batch"
    )
    passes: dict[tuple[int, int], list[dict[str, Any]]] = {nw: [] for nw in grid}
    start = time.perf_counter()
    for rep in range(repeats):
        order = grid if rep % 2 == 0 else grid[::-1]
        for i, (n, w) in enumerate(order):
            r = measure(args.game, n, w, steps, seconds, args.device, seed=1000 * i + rep)
            passes[(n, w)].append(r)
            print(
                f"  pass {rep + 1}/{repeats}: {n:4d} sims, {w:2d} workers: "
                f"{r['frames_per_s']:9,.0f} frames/s (startup {r['startup_s']:.1f} s)",
                flush=True,
            )
    results = []
    for rs in passes.values():
        fps = statistics.median(r["frames_per_s"] for r in rs)
        results.append(
            {
                **rs[0],
                "steps_per_s": fps / FRAMESKIP,
                "frames_per_s": fps,
                "startup_s": statistics.median(r["startup_s"] for r in rs),
                "passes_frames_per_s": ";".join(f"{r['frames_per_s']:.0f}" for r in rs),
            }
        )
    csv_path = os.path.join(args.out, "scaling.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    info = machine_info()
    title = (
        f"accelrl sync collection, Nature CNN on {args.device}, {args.game}, "
        f"{n_cores} cores, {info['date']}"
    )
    png_path = os.path.join(args.out, "scaling.png")
    plot(results, png_path, title)
    rec = recommend(results)
    print(f"wrote {csv_path} and {png_path} ({time.perf_counter() - start:.0f} s)")
    print(
        f"recommended on this machine ({n_cores} cores, policy on {args.device}): "
        f"num_envs={rec['num_envs']} num_workers={rec['num_workers']} "
        f"frames_per_batch={rec['frames_per_batch']} ({rec['frames_per_s']:,.0f} frames/s; "
        f"fastest {rec['best_frames_per_s']:,.0f}; fewest simulators within {WITHIN:.0%})\n"
        f"  {rec['flags']}"
    )
    payload = {
        **info,
        "game": args.game,
        "device": args.device,
        "seconds": seconds,
        "repeats": repeats,
        "steps": steps,
        "results": results,
        "recommended": rec,
    }
    write_json(os.path.join(args.out, "scaling.json"), payload)
    return payload


if __name__ == "__main__":
    from benchmarks.run import run_and_exit

    run_and_exit(main)
