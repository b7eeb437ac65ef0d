"""Training throughput with each sampling mode (collector kind), PPO/APPO on Pong, side by side.

    python -m benchmarks.sampling_modes [--frames 40000] [--repeats 2] [--json PATH]

Each mode trains PPO (APPO for ``async``, same hyperparameters) through the recipe's own
``train(cfg)`` for ``--frames`` emulator frames; modes alternate within each repeat so machine
drift hits them alike. For every mode the table shows frames/s, the learner's mean time per
batch waiting for data (``collect``) and updating (``update``), and the overlap: the sync mode's
collect + update time per batch divided by this mode's wall time per batch (1.0: no gain;
2.0: collection fully hidden behind an update of equal length).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import cores, machine_info, write_json

MODES = {
    # name: (recipe, collector kind, workers, envs per worker)
    "sync (MultiSync 2x4)": ("ppo", "sync", 2, 4),
    "sync (in-process 8)": ("ppo", "sync", 0, 8),
    "alternating (2x4 in-process)": ("ppo", "alternating", 0, 8),
    "async APPO (MultiAsync 2x4)": ("appo", "async", 2, 4),
    "batched (server, 2x4 slots)": ("ppo", "batched", 2, 4),
}


def train_once(mode: str, frames: int, root: Path) -> dict[str, float]:
    recipe, kind, workers, envs = MODES[mode]
    if recipe == "ppo":
        from recipes.ppo_atari import Config, train

        cfg = Config()
        algo = cfg.ppo
    else:
        from recipes.appo_atari import Config, train

        cfg = Config()
        algo = cfg.appo
    cfg.env.game = "Pong"
    cfg.env.num_envs = envs
    cfg.collector.kind = kind
    cfg.collector.num_workers = workers
    # One batch = 8 simulators x 64 steps in every mode (async: one worker's 4 x 128).
    cfg.collector.steps_per_batch = 512
    algo.epochs, algo.minibatches = 2, 4
    cfg.total_frames = frames
    cfg.log.progress = False
    cfg.log.tensorboard = False
    cfg.log.eval_episodes = 0
    cfg.log.checkpoint_every_frames = 10**12
    cfg.run_dir = str(root / f"{kind}-{workers}-{len(list(root.iterdir()))}")
    summary = train(cfg)
    rows = list(csv.DictReader(open(Path(cfg.run_dir) / "metrics.csv")))[2:]  # skip warm-up
    collect = statistics.mean(float(r["perf/collect_s"]) for r in rows)
    update = statistics.mean(float(r["perf/update_s"]) for r in rows)
    lag = [float(r["async/policy_lag_mean"]) for r in rows if r.get("async/policy_lag_mean")]
    return {
        "fps": summary["fps"],
        "collect_s": collect,
        "update_s": update,
        "wall_s": collect + update,
        "policy_lag": statistics.mean(lag) if lag else 0.0,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in args.modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = args.modes[r % len(args.modes) :] + args.modes[: r % len(args.modes)]
            for mode in order:
                results[mode].append(train_once(mode, args.frames, Path(tmp)))
    med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in results.items()}
    base = med.get("sync (MultiSync 2x4)") or next(iter(med.values()))
    print(
        f"PPO/APPO on Pong, {cores()} cores, {args.frames} frames per run, median of {args.repeats}"
    )
    print(
        f"{'mode':32s} {'frames/s':>9s} {'vs sync':>8s} {'collect':>8s} {'update':>8s} "
        f"{'overlap':>8s} {'lag':>5s}"
    )
    for mode, m in med.items():
        overlap = (base["collect_s"] + base["update_s"]) / m["wall_s"]
        print(
            f"{mode:32s} {m['fps']:9.0f} {m['fps'] / base['fps']:8.2f} {m['collect_s']:8.3f} "
            f"{m['update_s']:8.3f} {overlap:8.2f} {m['policy_lag']:5.2f}"
        )
        m["vs_sync"] = m["fps"] / base["fps"]
        m["overlap"] = overlap
    out = {"machine": machine_info(), "frames": args.frames, "results": med}
    if args.json:
        write_json(args.json, out)
    return out


if __name__ == "__main__":
    main()
