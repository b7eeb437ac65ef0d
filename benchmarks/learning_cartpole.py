"""Learning parity on CartPole-v1: each accelrl recipe next to its plain single-file loop.

    python -m benchmarks.learning_cartpole [--algos ppo a2c dqn double-dueling double-dueling-nstep
        nstep-prioritized c51 rainbow pqn] [--seeds 0 1 2] [--json PATH] [--quick]
        [--plain-epsilon-per-batch] [--plain-fused-adam]

For every algorithm and seed, the plain loop (``reference.classic``, PQN's ``reference.pqn``:
gymnasium vector env, numpy, PyTorch) and the recipe (``recipes/<algo>_atari.py``'s ``train`` with
``env.game = "CartPole-v1"``) train from one and the same recipe ``Config``, built by
``reference.cartpole_presets.cartpole_config`` (the recipe's defaults plus RL-zoo's CartPole
settings, which the CartPole learning tests read too); one table then lists the mean return of
the last 100 training episodes, the mean greedy evaluation return (``--eval-episodes`` episodes
after training) and the wall time of each run, followed by the mean over seeds per algorithm
and implementation. ``--quick`` runs a tenth of every budget (a
smoke test: the figures mean nothing).
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from accelrl import loops
from accelrl.algos.catalog import algorithm
from reference.cartpole_presets import KINDS, cartpole_config
from reference.classic import plain_a2c, plain_dqn, plain_ppo
from reference.pqn import plain_pqn

PLAIN_LOOPS = {"dqn": plain_dqn, "ppo": plain_ppo, "a2c": plain_a2c, "pqn": plain_pqn}


# --- runs -------------------------------------------------------------------------------------


def run_plain(
    algo: str, cfg: Any, epsilon_per_batch: bool = False, fused_adam: bool = False
) -> dict:
    extra = {"epsilon_per_batch": True} if epsilon_per_batch else {}  # DQN family only
    if fused_adam:
        extra["fused_adam"] = True
    return {"impl": "plain", **PLAIN_LOOPS[KINDS[algo]](cfg, **extra)}


def run_recipe(algo: str, cfg: Any) -> dict:
    record = algorithm(KINDS[algo])
    with tempfile.TemporaryDirectory(prefix=f"cartpole-{algo}-s{cfg.seed}-") as tmp:
        cfg = copy.deepcopy(cfg)
        cfg.run_dir = str(Path(tmp) / "run")
        start = time.perf_counter()
        summary = loops.train(cfg, record)
        seconds = time.perf_counter() - start
        with open(Path(tmp) / "run" / "episodes.csv") as fh:
            curve = [(int(r["frames"]), float(r["return"])) for r in csv.DictReader(fh)]
    return {
        "impl": "accelrl",
        "last100": float(summary["mean_return_100"]),
        "greedy_eval": float(summary.get("eval/greedy_return", math.nan)),
        "episodes": int(summary["episodes"]),
        "seconds": seconds,
        "curve": curve,
    }


def mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def table(rows: list[dict]) -> str:
    head = f"{'algo':<18} {'seed':>4}  {'impl':<8} {'last-100':>8} {'greedy':>7} {'wall s':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['algo']:<18} {r['seed']:>4}  {r['impl']:<8} {r['last100']:>8.1f} "
            f"{r['greedy_eval']:>7.1f} {r['seconds']:>7.1f}"
        )
    lines += ["", "mean over seeds", head.replace("seed", "  n "), "-" * len(head)]
    for algo in dict.fromkeys(r["algo"] for r in rows):
        for impl in ("plain", "accelrl"):
            sel = [r for r in rows if r["algo"] == algo and r["impl"] == impl]
            if not sel:
                continue
            lines.append(
                f"{algo:<18} {len(sel):>4}  {impl:<8} {mean([r['last100'] for r in sel]):>8.1f} "
                f"{mean([r['greedy_eval'] for r in sel]):>7.1f} "
                f"{mean([r['seconds'] for r in sel]):>7.1f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", nargs="+", choices=list(KINDS), default=list(KINDS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--impls", nargs="+", choices=["plain", "accelrl"], default=["plain", "accelrl"])
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="torch threads for both (default 1)")
    p.add_argument("--quick", action="store_true", help="a tenth of every budget (smoke test)")
    p.add_argument(
        "--plain-epsilon-per-batch",
        action="store_true",
        help="DQN family: the plain loop sets epsilon once per batch, as the recipe does",
    )
    p.add_argument(
        "--plain-fused-adam",
        action="store_true",
        help="DQN family: the plain loop steps with PyTorch's fused Adam kernel, as the recipe "
        "does (default: torch.optim.Adam's default, foreach)",
    )
    p.add_argument("--json", help="write settings, rows and curves here")
    args = p.parse_args(argv)
    not_dqn = [a for a in args.algos if KINDS[a] != "dqn"]
    for flag in ("plain_epsilon_per_batch", "plain_fused_adam"):
        if getattr(args, flag) and not_dqn:
            name = "--" + flag.replace("_", "-")
            p.error(f"{name} applies to the DQN family only; drop {not_dqn}")
    torch.set_num_threads(args.threads)

    rows: list[dict] = []
    settings: dict[str, dict] = {}
    for algo in args.algos:
        for seed in args.seeds:
            cfg = cartpole_config(
                algo, seed, quick=args.quick, eval_episodes=args.eval_episodes, threads=args.threads
            )
            settings[algo] = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "seed"}
            for impl in args.impls:
                if impl == "plain":
                    out = run_plain(algo, cfg, args.plain_epsilon_per_batch, args.plain_fused_adam)
                else:
                    out = run_recipe(algo, cfg)
                    torch.set_num_threads(args.threads)  # the recipe sets its own share
                row = {"algo": algo, "seed": seed, **out}
                rows.append(row)
                print(
                    f"[learning_cartpole] {algo} seed {seed} {impl}: last-100 "
                    f"{row['last100']:.1f}, greedy {row['greedy_eval']:.1f}, "
                    f"{row['seconds']:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    print(table(rows))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"quick": args.quick, "settings": settings, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
