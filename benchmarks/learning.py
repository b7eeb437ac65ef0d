"""Learning parity: each recipe next to its plain single-file loop, same settings and seeds.

Atari (one run per call, meant for ``nohup``; both kinds write ``episodes.csv`` and
``metrics.csv`` in the run folder, so ``accelrl.tools.plot`` and ``compare`` read either):

    python -m benchmarks.learning atari ppo --impl plain   --game Breakout --frames 2000000 \\
        --seed 0 --run-dir runs/parity/ppo-breakout-plain-s0 [--resume]
    python -m benchmarks.learning atari ppo --impl accelrl --game Breakout --frames 2000000 \\
        --seed 0 --run-dir runs/parity/ppo-breakout-accelrl-s0 [--resume] [-- RECIPE FLAGS]
    python -m benchmarks.learning compare runs/parity/ppo-breakout-*-s0 \\
        -o docs/results/learning/ppo_breakout_2m_s0_DATE

With ``-- --model.recurrent lstm`` both sides have an LSTM: the recipe's, and the plain loop's
``reference.recurrent`` (``plain_ppo`` and ``plain_a2c`` run their LSTM loops for that config).

Both read one recipe ``Config``, parsed from the same flags (``atari_recipe_args``): ``--impl
accelrl`` runs the recipe itself (``recipes/<algo>_atari.py``) with it, ``--impl plain`` runs
the plain loop (``reference.atari``: numpy + PyTorch, no TorchRL) with it (``atari_config``).
CartPole mode, the side-by-side table of every algorithm (``benchmarks.learning_cartpole``):

    python -m benchmarks.learning cartpole [--algos ...] [--seeds 0 1 2] [--quick] [--json P]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# --- Atari settings shared by both implementations ------------------------------------------


def atari_recipe_args(
    algo: str, game: str, frames: int, seed: int, run_dir: str, extra: Sequence[str] = ()
) -> list[str]:
    """Recipe flags for the parity runs: the recipe defaults plus the DQN variant the issue
    names (``DQN_ATARI``: double, 3-step), then ``extra`` recipe flags (both sides read them)."""
    args = [
        "--env.game", game, "--total-frames", str(frames), "--seed", str(seed),
        "--run-dir", run_dir,
        # DQN checkpoints carry the replay (0.7 GB at 100k transitions): fewer of them.
        "--log.checkpoint-every-frames", "250000" if algo == "dqn" else "100000",
    ]  # fmt: skip
    if algo == "dqn":
        for name, value in DQN_ATARI.items():
            flag = "--dqn." + name.replace("_", "-")
            args += [flag] if value is True else [flag, str(value)]
    return [*args, *extra]


DQN_ATARI = dict(double=True, n_step=3, replay_capacity=100_000, eps_decay_frames=250_000)
"""The DQN parity run: the recipe's defaults (Nature DQN with Adam, 8 envs x 4 steps, batch 32,
intensity 8, 80k warm-up frames, target copy every 2000 updates) with double Q-learning and
3-step returns; epsilon reaches 0.01 after a quarter of the 1M frames, and the replay holds 100k
transitions (the plain loop stores both stacks of each: 5.6 GB at 100k)."""


def atari_config(
    algo: str, game: str, frames: int, seed: int, run_dir: str = "unused", extra: Sequence[str] = ()
) -> Any:
    """The recipe's ``Config`` that ``--impl accelrl`` runs with: ``atari_recipe_args`` parsed by
    the recipe's own flag parser (DQN presets applied). The plain loop reads its settings here."""
    from accelrl.algos.catalog import algorithm
    from accelrl.cli import parse_flags

    record = algorithm(algo)
    cfg = parse_flags(record.config, atari_recipe_args(algo, game, frames, seed, run_dir, extra))
    return record.resolve(cfg)


class EpisodeFiles:
    """``episodes.csv`` (frames, return, length) and ``metrics.csv`` (frames, time_s, episodes,
    return_mean100) in the columns accelrl's RunLogger writes. ``resume_frames``: keep the rows
    up to that frame count (a resumed loop's checkpoint; later rows belong to the killed run's
    lost stretch, as the recipes drop them) and continue the clock from the last kept row."""

    def __init__(self, run_dir: Path, resume_frames: int | None = None) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        kept_ep, kept_m = [], []
        if resume_frames is not None:
            kept_ep = self._rows_upto(run_dir / "episodes.csv", resume_frames)
            kept_m = self._rows_upto(run_dir / "metrics.csv", resume_frames)
        self.episodes = open(run_dir / "episodes.csv", "w", newline="", encoding="utf-8")
        self.metrics = open(run_dir / "metrics.csv", "w", newline="", encoding="utf-8")
        self._ep, self._m = csv.writer(self.episodes), csv.writer(self.metrics)
        self._ep.writerows([["frames", "return", "length"], *kept_ep])
        self._m.writerows([["frames", "time_s", "episodes", "return_mean100"], *kept_m])
        self.returns: list[float] = [float(row[1]) for row in kept_ep]
        self.start = time.perf_counter() - (float(kept_m[-1][1]) if kept_m else 0.0)

    @staticmethod
    def _rows_upto(path: Path, frames: int) -> list[list[str]]:
        if not path.exists():
            return []
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))[1:]
        return [row for row in rows if int(row[0]) <= frames]

    def iteration(self, frames: int, finished: list[tuple[float, int]]) -> None:
        for ret, length in finished:
            self._ep.writerow([frames, ret, length])
            self.returns.append(ret)
        last = self.returns[-100:]
        mean = sum(last) / len(last) if last else math.nan
        self._m.writerow([frames, f"{time.perf_counter() - self.start:.3f}", len(self.returns),
                          f"{mean:.4g}"])  # fmt: skip
        self.episodes.flush()
        self.metrics.flush()

    def close(self) -> None:
        self.episodes.close()
        self.metrics.close()


PLAIN_CHECKPOINT_EVERY = {"ppo": 500_000, "a2c": 500_000, "dqn": 250_000, "pqn": 500_000}
"""Frames between the plain loops' checkpoints (``plain_checkpoint.pt``: ~10 MB for PPO and A2C;
DQN's carries its replay, 5.6 GB at 100k transitions, so it is written as often as the
recipe's, every 250k frames: about every half hour side by side on 2 cores)."""


def run_plain_atari(
    algo: str,
    game: str,
    frames: int,
    seed: int,
    run_dir: Path,
    extra: Sequence[str] = (),
    resume: bool = False,
) -> None:
    import torch

    from reference.atari import Checkpoint, iterations_for
    from reference.atari_actor_critic import plain_a2c, plain_ppo
    from reference.atari_dqn import plain_dqn
    from reference.common import batch_layout
    from reference.pqn import plain_pqn_atari

    torch.set_num_threads(1)
    cfg = atari_config(algo, game, frames, seed, str(run_dir), extra)
    checkpoint = Checkpoint(run_dir / "plain_checkpoint.pt", PLAIN_CHECKPOINT_EVERY[algo],
                               str(cfg), resume)  # fmt: skip
    envs, steps = batch_layout(cfg)
    per_iter = envs * steps * cfg.env.frameskip
    iterations = iterations_for(cfg)
    (run_dir).mkdir(parents=True, exist_ok=True)
    (run_dir / "settings.txt").write_text(f"{algo} {game} seed {seed} (plain loop)\n{cfg}\n")
    files = EpisodeFiles(run_dir, checkpoint.frames if resume else None)
    report_every = max(1, iterations // 200)

    def on_iteration(done_frames: int, env) -> None:
        files.iteration(done_frames, env.finished)
        env.finished.clear()
        if (done_frames // per_iter) % report_every == 0:
            last = files.returns[-100:]
            mean = sum(last) / len(last) if last else float("nan")
            elapsed = time.perf_counter() - files.start
            line = f"{done_frames:>10,} frames  {done_frames / elapsed:7.0f} frames/s  "
            print(f"{line}episodes {len(files.returns):5d}  last-100 {mean:7.2f}", flush=True)

    try:
        loop = {"ppo": plain_ppo, "a2c": plain_a2c, "dqn": plain_dqn, "pqn": plain_pqn_atari}[algo]
        loop(cfg, iterations, threads=2, on_iteration=on_iteration, checkpoint=checkpoint)
    finally:
        files.close()


def run_accelrl_atari(algo: str, game: str, frames: int, seed: int, run_dir: Path,
                      resume: bool, extra: Sequence[str] = ()) -> None:  # fmt: skip
    from accelrl import loops
    from accelrl.algos.catalog import algorithm
    from accelrl.cli import run_recipe

    record = algorithm(algo)

    argv = atari_recipe_args(algo, game, frames, seed, str(run_dir), extra)
    if resume:
        argv.append("--resume")
    run_recipe(record.config, lambda cfg: loops.train(cfg, record), description=algo, argv=argv)


# --- comparison -------------------------------------------------------------------------------


def read_returns(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    from accelrl.tools.plot import read_columns

    cols = read_columns(run_dir / "episodes.csv", ("frames", "return"))
    return cols["frames"], cols["return"]


def final_mean(run_dir: Path, window: int = 100) -> tuple[float, int, float]:
    """(last-``window`` mean return, episodes, frames reached)."""
    frames, returns = read_returns(run_dir)
    if len(returns) == 0:
        return math.nan, 0, 0.0
    return float(returns[-window:].mean()), len(returns), float(frames[-1])


def compare(run_dirs: Sequence[Path], out: Path | None) -> list[dict]:
    rows = []
    for d in run_dirs:
        mean, episodes, frames = final_mean(d)
        rows.append({"run": d.name, "frames": int(frames), "episodes": episodes,
                     "last100_mean": round(mean, 2)})  # fmt: skip
    width = max(len(r["run"]) for r in rows)
    print(f"{'run':<{width}}  {'frames':>10}  {'episodes':>8}  {'last-100 mean':>13}")
    for r in rows:
        print(f"{r['run']:<{width}}  {r['frames']:>10,}  {r['episodes']:>8}  "
              f"{r['last100_mean']:>13.2f}")  # fmt: skip
    if out is not None:
        from accelrl.tools.plot import main as plot_main

        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out.with_suffix(".csv"), "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["run", "frames", "return"])
            for d in run_dirs:
                f, r = read_returns(d)
                for fi, ri in zip(f, r, strict=True):
                    w.writerow([d.name, int(fi), ri])
        plot_main([*map(str, run_dirs), "-o", str(out.with_suffix(".png"))])
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("atari", help="one Atari learning run (recipe or plain loop)")
    a.add_argument("algo", choices=["ppo", "a2c", "dqn", "pqn"])
    a.add_argument("--impl", choices=["plain", "accelrl"], required=True)
    a.add_argument("--game", default="Breakout")
    a.add_argument("--frames", type=int, default=2_000_000)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--run-dir", type=Path, required=True)
    a.add_argument(
        "--resume", action="store_true", help="continue from the run folder's checkpoint"
    )
    c = sub.add_parser("compare", help="last-100 table, curves CSV + PNG of run folders")
    c.add_argument("run_dirs", nargs="+", type=Path)
    c.add_argument("-o", "--out", type=Path, default=None, help="path stem for .csv and .png")
    sub.add_parser("cartpole", help="the CartPole table: benchmarks.learning_cartpole's flags")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["cartpole"]:
        from benchmarks import learning_cartpole

        learning_cartpole.main(argv[1:])
        return
    # after "--": recipe flags that both sides read (e.g. -- --env.sticky-actions 0)
    recipe_flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.recipe_flags = recipe_flags
    if args.mode == "atari":
        if args.impl == "plain":
            run_plain_atari(args.algo, args.game, args.frames, args.seed, args.run_dir,
                            args.recipe_flags, args.resume)  # fmt: skip
        else:
            run_accelrl_atari(args.algo, args.game, args.frames, args.seed, args.run_dir,
                              args.resume, args.recipe_flags)  # fmt: skip
    else:
        compare(args.run_dirs, args.out)


if __name__ == "__main__":
    main()
