"""Learner speed: each recipe's steady-state frames/s next to its plain PyTorch loop at the plain
loop's *best* torch thread count, on an idle machine and next to one other busy process.

Configurations per algorithm (each a fresh process; rounds alternate them):

- ``plain@N``: the plain loop (``reference.atari``) with N torch threads (1 and every core);
- ``plain@N+ftz``: the same with subnormal floats flushed to zero (``torch.set_flush_denormal``,
  which the recipes do in ``accelrl.process.flush_denormals``), so the reference is the plain
  loop at its best of both;
- ``recipe`` : the recipe's default thread plan (learner: 1 thread while collecting, every core
  while updating in a synchronous run);
- ``recipe@1``: ``--threads.torch-threads 1`` (the plan before the update-time switch);
- ``recipe@N``: ``--threads.torch-threads N`` with N every core (collection's inference too);
- ``recipe+compile``: ``--compile.loss`` (idle only: compilation takes minutes on a CPU);
- ``recipe+compile-policy``: ``--compile.policy`` (Atari, idle only);
- ``recipe+cudagraphs``: ``--compile.policy --compile.cudagraphs on`` (TorchRL's graphs of a
  compiled policy; with ``--device cuda``);
- ``recipe+eager``: ``--compile.cudagraphs off`` (with ``--device cuda``: the acting network
  eager, where ``recipe``'s default ``auto`` may replay it as a CUDA graph).

Steady state excludes the first ``--warmup`` batches (start-up, allocator warm-up, compilation);
for the recipes it also excludes their first thread probe (``accelrl.collectors.UpdateThreads``:
after one warm-up update, ``2 x probes`` updates alternate between 1 thread and every core, and
from the second collection on ``4 x probes`` in-process collections do, half of each at the
slower count), which a run repeats only every ``probe_every`` (500) updates: ``probes /
probe_every`` (0.4%) of a long run's updates and twice that of its collections, each at most
~3.5x slower (measured). The recipe then runs that many more batches, so both sides average
the same number of updates.
Ratios are against the best plain configuration of the same condition.

    python -m benchmarks.learner_speed [--algos ppo a2c dqn dqn-cartpole] [--batches 8] [--busy]
    python -m benchmarks.learner_speed --algos ppo --device cuda --only plain@16 recipe \
        recipe+compile recipe+compile-policy recipe+cudagraphs recipe+eager  # gpu.sh COMPILE=1
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GAME = "SpaceInvaders"
QUIET = ["--log.no-progress", "--log.no-tensorboard", "--log.eval-episodes", "0"]

# (steps per batch, frames per batch) of each recipe's default, DQN with learning from the start
RECIPE_ARGS = {
    "ppo": [],
    "a2c": [],
    "dqn": ["--dqn.learning-starts-frames", "0", "--dqn.replay-capacity", "50000"],
}

PLAIN = """
import sys, torch
torch.set_num_threads({threads})
torch.set_flush_denormal({ftz})
from reference.atari import steady_fps
from reference.atari_{module} import plain_{algo}
from benchmarks.common import cores
from recipes.{algo}_atari import Config
cfg = Config()
cfg.env.game = "{game}"
{extra}
recs = plain_{algo}(cfg, {batches}, threads=cores(), device="{device}")
print(steady_fps(recs, {warmup}))
"""


CARTPOLE_FRAMES = 20_000
"""DQN on CartPole at RL-zoo's settings (intensity 32, 128 updates per 256-step batch)."""

CARTPOLE = """
import sys, torch
from reference.cartpole_presets import cartpole_config
cfg = cartpole_config("dqn", 0, eval_episodes=0, run_dir=sys.argv[1], threads={threads})
cfg.total_frames = {frames}
if {plain}:
    torch.set_num_threads({threads})
    torch.set_flush_denormal({ftz})
    from reference.classic import plain_dqn
    print(cfg.total_frames / plain_dqn(cfg)["seconds"])
else:
    from recipes.dqn_atari import train
    cfg.compile.loss = {compile}
    print(train(cfg)["fps"])
"""


def cartpole_fps(plain: bool, threads: int, compile_loss: bool = False, ftz: bool = False) -> float:
    """Frames/s of a whole CartPole DQN run (threads 0: the recipe's default plan; ``ftz``:
    the plain loop flushes subnormals)."""
    code = CARTPOLE.format(
        threads=threads, frames=CARTPOLE_FRAMES, plain=plain, compile=compile_loss, ftz=ftz
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", code, f"{tmp}/run"],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
    return float(out.stdout.strip().splitlines()[-1])


def plain_fps(
    algo: str, threads: int, batches: int, warmup: int, device: str = "cpu", ftz: bool = False
) -> float:
    extra = ""
    if algo == "dqn":
        extra = "cfg.dqn.learning_starts_frames = 0\ncfg.dqn.replay_capacity = 50000"
    code = PLAIN.format(
        algo=algo,
        module="dqn" if algo == "dqn" else "actor_critic",
        threads=threads,
        game=GAME,
        batches=batches,
        warmup=warmup,
        extra=extra,
        device=device,
        ftz=ftz,
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def probe_window() -> int:
    """Batches before a synchronous in-process recipe's thread choices settle: the warm-up
    update and the first probes of update and collection threads."""
    from accelrl.collectors import ThreadPlan, UpdateThreads

    probe = UpdateThreads(ThreadPlan(2, 1, 1, 1, update_torch=2), probe_collection=True)
    return probe.probe_phase()


def recipe_fps(
    algo: str, flags: list[str], batches: int, warmup: int, device: str = "cpu", game: str = GAME
) -> float:
    """Steady frames/s over ``batches - warmup`` updates after the warm-up and the first thread
    probe (see the module docstring)."""
    from recipes import a2c_atari, dqn_atari, ppo_atari

    # A fixed thread count (``--threads.torch-threads N``) leaves nothing to probe.
    fixed = "--threads.torch-threads" in flags
    skip = 0 if fixed else max(0, probe_window() - warmup)
    batches, warmup = batches + skip, warmup + skip

    cfg = {"ppo": ppo_atari, "a2c": a2c_atari, "dqn": dqn_atari}[algo].Config()
    frames = batches * cfg.collector.steps_per_batch * cfg.env.frameskip
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, f"recipes/{algo}_atari.py", "--env.game", game,
            "--total-frames", str(frames), "--run-dir", f"{tmp}/run", "--device", device,
            *QUIET, *RECIPE_ARGS[algo], *flags,
        ]  # fmt: skip
        subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=True)
        rows = list(csv.DictReader(open(f"{tmp}/run/metrics.csv")))
    first, last = rows[warmup - 1], rows[-1]
    frames_done = int(last["frames"]) - int(first["frames"])
    return frames_done / (float(last["time_s"]) - float(first["time_s"]))


def busy_process() -> subprocess.Popen:
    """One other CPU-bound process (a Python spin loop)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--algos", nargs="+", default=["ppo", "a2c", "dqn", "dqn-cartpole"],
        choices=["ppo", "a2c", "dqn", "dqn-cartpole"],
    )  # fmt: skip
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--busy", action="store_true", help="also next to one busy process")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--device", default="cpu", help="learner device of both sides")
    parser.add_argument("--only", nargs="+", help="run only these configurations (names above)")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    conditions = ["idle", "busy"] if opts.busy else ["idle"]
    results: dict = {}
    for algo in opts.algos:
        # DQN batches are 32 steps, A2C's 80: more of them for a steady figure. With 24 steady
        # A2C batches (~3 s) two rounds read the recipe at 0.82x of the plain loop; with 120
        # (--batches 40), three rounds read 0.97-1.00x, rounds overlapping (2026-12-02).
        per_algo = {"dqn": 16, "a2c": 16}.get(algo, 1)
        batches, warmup = opts.batches * per_algo, opts.warmup * per_algo
        for condition in conditions:
            configs: dict[str, tuple[str, object]] = {
                "plain@1": ("plain", (1, False)),
                f"plain@{cores}": ("plain", (cores, False)),
                "plain@1+ftz": ("plain", (1, True)),
                f"plain@{cores}+ftz": ("plain", (cores, True)),
                "recipe": ("recipe", []),
                "recipe@1": ("recipe", ["--threads.torch-threads", "1"]),
                f"recipe@{cores}": ("recipe", ["--threads.torch-threads", str(cores)]),
            }
            if condition == "idle" and not opts.no_compile:
                configs["recipe+compile"] = ("recipe", ["--compile.loss"])
                if algo != "dqn-cartpole":
                    configs["recipe+compile-policy"] = ("recipe", ["--compile.policy"])
                    if opts.device.startswith("cuda"):
                        cuda_graphs = ["--compile.policy", "--compile.cudagraphs", "on"]
                        configs["recipe+cudagraphs"] = ("recipe", cuda_graphs)
                        configs["recipe+eager"] = ("recipe", ["--compile.cudagraphs", "off"])
            if opts.only:
                configs = {k: v for k, v in configs.items() if k in opts.only}
            rates: dict[str, list[float]] = {name: [] for name in configs}
            for _ in range(opts.rounds):
                for name, (kind, arg) in configs.items():
                    hog = busy_process() if condition == "busy" else None
                    try:
                        if algo == "dqn-cartpole":
                            flags = list(arg) if kind == "recipe" else []
                            threads, ftz = arg if kind == "plain" else (0, False)
                            if flags[:1] == ["--threads.torch-threads"]:
                                threads = int(flags[1])
                            compiled = flags == ["--compile.loss"]
                            rates[name].append(
                                cartpole_fps(kind == "plain", threads, compiled, ftz)
                            )
                        elif kind == "plain":
                            threads, ftz = arg
                            rates[name].append(
                                plain_fps(algo, threads, batches, warmup, opts.device, ftz)
                            )
                        else:
                            rates[name].append(
                                recipe_fps(algo, list(arg), batches, warmup, opts.device)
                            )
                    finally:
                        if hog is not None:
                            hog.kill()
                            hog.wait()
            medians = {name: statistics.median(v) for name, v in rates.items()}
            best_plain = max(
                (v for k, v in medians.items() if k.startswith("plain")), default=float("nan")
            )
            env = "CartPole-v1" if algo == "dqn-cartpole" else GAME
            print(f"\n{algo} on {env}, {condition} machine ({cores} cores), frames/s:")
            for name, value in medians.items():
                print(f"  {name:<16} {value:8.0f}   {value / best_plain:5.2f}x best plain")
            results[f"{algo}/{condition}"] = {
                name: {
                    "fps": medians[name],
                    "rounds": rates[name],
                    "x_best_plain": medians[name] / best_plain,
                }
                for name in medians
            }
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
