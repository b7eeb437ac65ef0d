"""Time to first batch: seconds from the command to the first collected batch of a recipe.

Each case runs ``python recipes/<algo>_atari.py`` in a fresh process for one batch and reads
``first_batch_s`` from its summary (imports, config, env and collector start-up, the first
rollout). The floor next to it is a bare ``python -c "import torch, torchrl"`` on the same
machine: what no recipe can avoid. Rounds alternate the cases; the table gives medians.

    python -m benchmarks.first_batch [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUIET = ["--log.no-progress", "--log.no-tensorboard", "--log.eval-episodes", "0"]

CASES: dict[str, list[str]] = {
    "ppo Pong, in-process (8 envs)": [
        "recipes/ppo_atari.py", "--env.game", "Pong", "--total-frames", "4096",
    ],
    "ppo Pong, 2 worker processes": [
        "recipes/ppo_atari.py", "--env.game", "Pong", "--collector.num-workers", "2",
        "--env.num-envs", "4", "--total-frames", "4096",
    ],
    "dqn Pong, in-process (8 envs)": [
        "recipes/dqn_atari.py", "--env.game", "Pong", "--total-frames", "128",
        "--dqn.replay-capacity", "10000",
    ],
    "ppo CartPole-v1": [
        "recipes/ppo_atari.py", "--env.game", "CartPole-v1", "--total-frames", "1024",
    ],
}  # fmt: skip


def import_floor() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, torchrl"], check=True, cwd=REPO)
    return time.perf_counter() - start


def first_batch(argv: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, *argv, *QUIET, "--run-dir", f"{tmp}/run"]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{out.stderr[-2000:]}")
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        return float(summary["first_batch_s"])


def main(args: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(args)
    times: dict[str, list[float]] = {"import torch, torchrl (floor)": []}
    times.update({name: [] for name in CASES})
    for _ in range(opts.rounds):
        times["import torch, torchrl (floor)"].append(import_floor())
        for name, argv in CASES.items():
            times[name].append(first_batch(argv))
    floor = statistics.median(times["import torch, torchrl (floor)"])
    print(f"{'case':<36} {'first batch s':>14} {'x floor':>8}   rounds")
    result = {}
    for name, values in times.items():
        med = statistics.median(values)
        result[name] = {"median_s": med, "rounds_s": values, "x_floor": med / floor}
        rounds = " ".join(f"{v:.1f}" for v in values)
        print(f"{name:<36} {med:>14.1f} {med / floor:>8.2f}   {rounds}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
