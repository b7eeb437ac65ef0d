"""Wall time for a recipe to reach a mean episode return (PPO on Pong to 18 by default).

Starts the recipe as a subprocess (``python recipes/<algo>_atari.py`` with the given flags and a
run folder), reads the run's ``episodes.csv`` once a second, and stops the run (SIGTERM, then
SIGKILL after 20 s) when the mean unclipped return of the last ``--window`` finished episodes
reaches ``--target`` or when ``--budget-s`` has passed. Writes ``time_to_score.json``: whether
the target was reached, the wall time from launch and from the first logged update (excluding
start-up), frames at that moment, the best windowed mean seen and the frames/s; copies the run's
``metrics.csv`` and ``episodes.csv`` next to it.

Run: ``python -m benchmarks.time_to_score --out DIR [--budget-s 300] [--target 18]
[--device cuda] [-- extra recipe flags]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from typing import Any

FRAMESKIP = 4


def read_episodes(path: str, window: int) -> tuple[int, float | None, int]:
    """(episodes, mean return of the last ``window``, frames of the last episode)."""
    if not os.path.exists(path):
        return 0, None, 0
    last: deque[float] = deque(maxlen=window)
    n, frames = 0, 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                last.append(float(row["return"]))
                frames = int(float(row["frames"]))
            except (KeyError, ValueError):
                continue  # a torn last line
            n += 1
    mean = sum(last) / len(last) if len(last) == window else None
    return n, mean, frames


def has_update(metrics: str) -> bool:
    """True once the run's metrics.csv holds a data row (its first update is done)."""
    if not os.path.exists(metrics):
        return False
    with open(metrics) as f:
        return sum(1 for _ in f) >= 2


def last_metrics(metrics: str) -> dict[str, str]:
    if not os.path.exists(metrics):
        return {}
    rows = []
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[-1] if rows else {}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="time_to_score", help="folder for the results")
    p.add_argument("--algo", default="ppo", help="recipe: ppo, a2c, appo, dqn")
    p.add_argument("--game", default="Pong")
    p.add_argument("--target", type=float, default=18.0)
    p.add_argument("--window", type=int, default=100, help="episodes in the running mean")
    p.add_argument("--budget-s", type=float, default=300.0, help="wall-time budget from launch")
    p.add_argument("--device", default="auto")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("extra", nargs="*", help="recipe flags (after --)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    run_dir = tempfile.mkdtemp(prefix=f"tts_{args.algo}_")
    shutil.rmtree(run_dir)
    cmd = [
        args.python,
        os.path.join("recipes", f"{args.algo}_atari.py"),
        "--env.game",
        args.game,
        "--device",
        args.device,
        "--run-dir",
        run_dir,
        "--log.no-progress",
        "--log.no-tensorboard",
        "--log.eval-episodes",
        "0",
        "--log.checkpoint-every-frames",
        str(10**12),
        *args.extra,
    ]
    print("launch:", " ".join(cmd), flush=True)
    episodes_csv = os.path.join(run_dir, "episodes.csv")
    metrics_csv = os.path.join(run_dir, "metrics.csv")
    t_launch = time.time()
    log_path = os.path.join(args.out, "recipe.log")
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        t_first: float | None = None
        reached_at: float | None = None
        reached_frames = None
        best = None
        last_print = 0.0
        while True:
            time.sleep(1.0)
            now = time.time()
            if t_first is None and has_update(metrics_csv):
                t_first = now
            n, mean, frames = read_episodes(episodes_csv, args.window)
            if mean is not None:
                best = mean if best is None else max(best, mean)
            if now - last_print >= 15:
                last_print = now
                m = "-" if mean is None else f"{mean:.1f}"
                print(
                    f"  {now - t_launch:5.0f} s: {n} episodes, mean of last {args.window} {m}, "
                    f"frames {frames:,}",
                    flush=True,
                )
            if mean is not None and mean >= args.target:
                reached_at, reached_frames = now, frames
                break
            if proc.poll() is not None or now - t_launch >= args.budget_s:
                break
        ended_by = (
            "target"
            if reached_at
            else ("recipe exited" if proc.poll() is not None else "time budget")
        )
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    last = last_metrics(metrics_csv)
    n, mean, frames = read_episodes(episodes_csv, args.window)
    result = {
        "algo": args.algo,
        "game": args.game,
        "target": args.target,
        "window": args.window,
        "budget_s": args.budget_s,
        "reached": reached_at is not None,
        "ended_by": ended_by,
        "wall_s_from_launch": None if reached_at is None else reached_at - t_launch,
        "wall_s_from_first_update": (
            None if reached_at is None or t_first is None else reached_at - t_first
        ),
        "frames_at_target": reached_frames,
        "startup_s": None if t_first is None else t_first - t_launch,
        "episodes": n,
        "final_mean": mean,
        "best_mean": best,
        "frames": int(float(last.get("frames", 0) or 0)),
        "fps_logged": float(last.get("perf/fps", "nan") or "nan"),
        "recipe_returncode": proc.returncode,
        "command": cmd,
    }
    for name in ("metrics.csv", "episodes.csv", "config.json"):
        src = os.path.join(run_dir, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, name))
    shutil.rmtree(run_dir, ignore_errors=True)
    with open(os.path.join(args.out, "time_to_score.json"), "w") as f:
        json.dump(result, f, indent=2)
    status = (
        f"reached {args.target} after {result['wall_s_from_launch']:.0f} s "
        f"({reached_frames:,} frames)"
        if reached_at
        else f"did not reach {args.target} ({ended_by}; best mean {best})"
    )
    print(f"{args.algo} {args.game}: {status}; {result['frames']:,} frames in all")
    return result


if __name__ == "__main__":
    main()
