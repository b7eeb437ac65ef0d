"""Against TorchRL's own PPO Atari example: steady-state frames/s of TorchRL's
``sota-implementations/ppo/ppo_atari.py`` next to ``recipes/ppo_atari.py`` doing the same work
per batch, in alternating rounds on the same machine.

TorchRL's script is not part of the torchrl package: point ``--torchrl-sota`` at the
``sota-implementations/ppo`` folder of a TorchRL checkout whose version matches the installed
torchrl (it needs ``hydra-core`` and ``torchvision`` too). It runs as shipped, from its folder,
with hydra overrides that give it the recipe's work per batch: the recipe's simulators and batch
(8 x 128 agent steps = 4096 frames), its minibatch size and number of epochs (TorchRL's default
is 3, the recipe's 4); no logger, one evaluation episode at the first batch (TorchRL evaluates
at batch 0 whatever the interval; the warm-up leaves it out). What stays TorchRL's is the point
of the comparison: its env pipeline (``GymEnv`` with RGB frames resized by torchvision, a
``ParallelEnv``, ``VecNorm``), its advantage pass every epoch, its collector and update.

Timing: the script is started through a small wrapper that notes ``time.perf_counter()`` at each
of its progress-bar updates (one per collected batch; nothing in the script changes), so both
sides are timed from the end of batch ``warmup`` to the end of the last batch. The recipe's
first thread probe is left out as in ``benchmarks.learner_speed``. Ratios are recipe / TorchRL
per round; the median of the paired ratios is the figure.

    python -m benchmarks.peers --torchrl-sota ~/rl/sota-implementations/ppo [--game Pong]
        [--batches 12] [--warmup 2] [--rounds 2] [--json out.json]

CleanRL and rlpyt are not run here: CleanRL's newest release on PyPI (1.2.0) needs Python < 3.11
with ale-py 0.7.4 or envpool < 0.7 (no wheels for Python 3.11, and envpool 1.x dropped the gym
API its script uses); rlpyt is not packaged. The plain loops of ``reference/atari*.py`` are the
single-file reference in every other row.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import cores, median_ratio, write_json
from benchmarks.learner_speed import recipe_fps

MARK = "accelrl-peers-mark"

WRAPPER = f"""
import os, runpy, sys, time
import tqdm
script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
update = tqdm.tqdm.update
def noted(self, n=1):
    out = update(self, n)
    print("{MARK}", self.n, time.perf_counter(), file=sys.stderr, flush=True)
    return out
tqdm.tqdm.update = noted
runpy.run_path(script, run_name="__main__")
"""


def torchrl_overrides(game: str, batches: int, tmp: str, device: str = "cpu") -> list[str]:
    """Hydra overrides that give TorchRL's script the recipe's default work per batch."""
    from recipes.ppo_atari import Config

    cfg = Config()
    frameskip = cfg.env.frameskip  # TorchRL's script counts frames with a fixed frame skip of 4
    if frameskip != 4:
        raise ValueError(f"TorchRL's PPO script assumes frameskip 4; the recipe has {frameskip}")
    batch_frames = cfg.collector.steps_per_batch * frameskip
    return [
        f"env.env_name={game}NoFrameskip-v4",
        f"env.num_envs={cfg.env.num_envs}",
        "++env.backend=gymnasium",
        f"collector.frames_per_batch={batch_frames}",
        f"collector.total_frames={batches * batch_frames}",
        f"loss.mini_batch_size={batch_frames // cfg.ppo.minibatches}",
        f"loss.ppo_epochs={cfg.ppo.epochs}",
        "logger.backend=",
        "logger.num_test_episodes=1",
        f"logger.test_interval={10**12}",
        f"optim.device={device}",
        f"hydra.run.dir={tmp}",
        "hydra.output_subdir=null",
    ]


def steady_rate(marks: list[tuple[int, float]], warmup: int, frames_per_step: int = 4) -> float:
    """Frames/s between the ``warmup``-th progress mark (1-based: the end of batch ``warmup``)
    and the last one; marks are (agent steps so far, perf_counter seconds)."""
    if not 1 <= warmup < len(marks):
        raise ValueError(f"{len(marks)} progress marks: need 1 <= warmup ({warmup}) < marks")
    (n0, t0), (n1, t1) = marks[warmup - 1], marks[-1]
    return (n1 - n0) * frames_per_step / (t1 - t0)


def read_marks(stderr: str) -> list[tuple[int, float]]:
    """The wrapper's marks; a mark may follow a progress bar's text on the same line (tqdm
    redraws with a carriage return and no newline)."""
    marks = []
    for line in stderr.splitlines():
        if MARK in line:
            _, n, t = line[line.index(MARK) :].split()
            marks.append((int(n), float(t)))
    return marks


def torchrl_fps(sota: Path, game: str, batches: int, warmup: int, device: str = "cpu") -> float:
    """Steady frames/s of TorchRL's script (see the module docstring)."""
    script = sota / "ppo_atari.py"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", WRAPPER, str(script)]
        cmd += torchrl_overrides(game, batches, tmp, device)
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=sota)
    if out.returncode:
        tail = "\n".join(out.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"TorchRL's {script} failed (exit {out.returncode}):\n{tail}")
    return steady_rate(read_marks(out.stderr), warmup)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--torchrl-sota",
        type=Path,
        required=True,
        help="the sota-implementations/ppo folder of a TorchRL checkout matching torchrl",
    )
    parser.add_argument("--game", default="Pong")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    script = opts.torchrl_sota / "ppo_atari.py"
    if not script.is_file():
        parser.error(
            f"--torchrl-sota {opts.torchrl_sota}: no ppo_atari.py there; pass the "
            "sota-implementations/ppo folder of a TorchRL checkout"
        )
    if opts.warmup < 1 or opts.batches <= opts.warmup:
        parser.error(f"--warmup {opts.warmup} --batches {opts.batches}: need 1 <= warmup < batches")
    overrides = torchrl_overrides(opts.game, opts.batches, "<tmp>", opts.device)
    batch = next(o for o in overrides if o.startswith("collector.frames_per_batch="))
    print(
        f"peers: {opts.game}, {cores()} cores, device {opts.device}, {opts.batches} batches "
        f"({batch}), first {opts.warmup} left out, {opts.rounds} round(s); TorchRL script {script}",
        flush=True,
    )
    rates: dict[str, list[float]] = {"recipe": [], "torchrl": []}
    for r in range(opts.rounds):
        rec = recipe_fps("ppo", [], opts.batches, opts.warmup, opts.device, game=opts.game)
        ref = torchrl_fps(opts.torchrl_sota, opts.game, opts.batches, opts.warmup, opts.device)
        rates["recipe"].append(rec)
        rates["torchrl"].append(ref)
        print(
            f"  round {r + 1}/{opts.rounds}: recipe {rec:,.0f} frames/s, TorchRL's "
            f"ppo_atari.py {ref:,.0f}, ratio {rec / ref:.2f}",
            flush=True,
        )
    result = {
        "game": opts.game,
        "cores": cores(),
        "device": opts.device,
        "batches": opts.batches,
        "warmup": opts.warmup,
        "overrides": overrides,
        "rounds": rates,
        "ratios": [a / b for a, b in zip(rates["recipe"], rates["torchrl"], strict=True)],
        "ratio_median": median_ratio(rates["recipe"], rates["torchrl"]),
    }
    print(
        f"recipe vs TorchRL's PPO Atari example: median {statistics.median(rates['recipe']):,.0f} "
        f"vs {statistics.median(rates['torchrl']):,.0f} frames/s, paired ratio "
        f"{result['ratio_median']:.2f}x"
    )
    if opts.json:
        write_json(str(opts.json), result)
    return result


if __name__ == "__main__":
    main()
