"""Small helpers that several test files share (fixtures and collection hooks stay in
conftest.py; float64 comparisons in numerics.py; the plain-loop parity setup in
plain_parity.py)."""

from __future__ import annotations

import csv
import os
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from reference.cartpole_presets import cartpole_config, use_cartpole

# The torch threads of the test processes (conftest.py sets them) and of the recipe runs the
# tests start; ACCELRL_TEST_THREADS=2 runs both with two. A recipe's own plan would give its
# updates every core and probe 1 against 2 threads, while the suite's second pytest-xdist worker
# keeps the other core busy: oversubscribed OpenMP updates, several times slower.
TEST_THREADS = int(os.environ.get("ACCELRL_TEST_THREADS", "1"))


def count_batches(run: Callable[[], Any]) -> tuple[Any, int]:
    """``run()``'s result and the number of batches the run counted during it."""
    from accelrl.run.progress import Progress as Run

    real = Run.collected
    count = {"n": 0}

    def collected(self, batch):
        count["n"] += 1
        return real(self, batch)

    Run.collected = collected
    try:
        return run(), count["n"]
    finally:
        Run.collected = real


def cartpole_recipe_config(
    config: Callable[..., Any], algo: str, run_dir: Path | str, eval_episodes: int, seed: int = 0
) -> Any:
    """A recipe's ``Config`` (``config``: its class) with the CartPole settings for ``algo``
    (``reference.cartpole_presets.use_cartpole``), ``seed`` and ``run_dir``, ``TEST_THREADS``
    torch threads, no progress line, no TensorBoard, and ``eval_episodes`` greedy episodes after
    training."""
    cfg = use_cartpole(config(seed=seed, run_dir=str(run_dir)), algo)
    cfg.threads.torch_threads = TEST_THREADS
    cfg.log.progress = False
    cfg.log.tensorboard = False
    cfg.log.eval_episodes = eval_episodes
    return cfg


def cartpole_flags(*extra: str, eval_episodes: int = 0) -> list[str]:
    """The recipe flags of a CartPole PPO run of a few seconds (4 simulators, 64 steps a batch,
    ``TEST_THREADS`` torch threads, ``eval_episodes`` greedy episodes after training, no
    TensorBoard, no progress line), then ``extra``."""
    return ["--env.game", "CartPole-v1", "--env.num-envs", "4", "--collector.steps-per-batch",
            "64", "--threads.torch-threads", str(TEST_THREADS), "--log.eval-episodes",
            str(eval_episodes), "--log.no-tensorboard", "--log.no-progress", *extra]  # fmt: skip


def print_cartpole_result(capsys: Any, name: str, summary: dict[str, Any]) -> None:
    """Prints a CartPole run's last-100 mean and greedy evaluation return past pytest's
    capture (``capsys``), under ``name`` (algorithm and seed)."""
    with capsys.disabled():
        print(f"\n  {name}: last-100 {summary['mean_return_100']:.1f}, "
              f"greedy {summary['eval/greedy_return']:.1f}")  # fmt: skip


def run_main(main: Callable[[list[str]], int], capsys: Any, *argv: str) -> tuple[int, str, str]:
    """``main(argv)``'s exit code with what it printed to stdout and to stderr (``capsys``)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for a process group's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def grads(params: Iterable[torch.nn.Parameter]) -> list[torch.Tensor]:
    """Copies of the parameters' gradients."""
    return [p.grad.detach().clone() for p in params]


def first_episodes_mean(run_dir: Path, n: int = 100) -> float:
    """Mean return of a run folder's first ``n`` episodes (``episodes.csv``)."""
    with open(run_dir / "episodes.csv") as fh:
        rows = list(csv.DictReader(fh))[:n]
    return sum(float(r["return"]) for r in rows) / len(rows)


def untrained_episodes_mean(run_dir: Path, learning_starts_frames: int) -> float:
    """Mean return of the episodes recorded before the learner's first update (``frames`` at
    most ``learning_starts_frames`` in ``episodes.csv``): the untrained policy's. A fast learner
    (rainbow on CartPole) lifts the mean of its first 100 episodes to about 60, so that mean
    says little about where the run started."""
    with open(run_dir / "episodes.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if float(r["frames"]) <= learning_starts_frames]
    assert rows, f"{run_dir}: no episode ended within the first {learning_starts_frames} frames"
    return sum(float(r["return"]) for r in rows) / len(rows)


def dqn_cartpole_run(algo: str, seed: int, run_dir: Path) -> dict[str, Any]:
    """The recipe with the learning-parity benchmark's settings for ``algo`` (the same values
    its plain loop runs with: ``reference.cartpole_presets.cartpole_config``). ``untrained``:
    the mean return of the episodes before the first update."""
    from recipes.dqn_atari import train

    cfg = cartpole_config(algo, seed, eval_episodes=10, run_dir=str(run_dir))
    summary = train(cfg)
    untrained = untrained_episodes_mean(run_dir, cfg.dqn.learning_starts_frames)
    print(
        f"[cartpole {algo}] seed {seed}: before the first update {untrained:.1f}, last-100 "
        f"{summary['mean_return_100']:.1f}, greedy {summary['eval/greedy_return']:.1f}"
    )
    return {**summary, "untrained": untrained}
