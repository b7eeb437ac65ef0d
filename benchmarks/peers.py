"""Against the libraries people use: steady-state frames/s of Stable-Baselines3, CleanRL, Sample
Factory and TorchRL's own PPO Atari example next to ``recipes/ppo_atari.py`` doing the same work
per batch, in alternating rounds on the same machine.

    python -m benchmarks.peers setup sb3 cleanrl sf [--cache ~/.cache/accelrl-peers]
        --cleanrl-script PATH [--torch SPEC] [--pip-arg ARG ...]
    python -m benchmarks.peers [--peers sb3,cleanrl,sf,torchrl] [--cache DIR]
        [--torchrl-sota PATH] [--game Pong] [--batches 12] [--warmup 2] [--rounds 2]
        [--sf-workers N[,N...]] [--json out.json]

Setup. Each library gets a venv of its own under the cache folder, with the pinned versions of
``benchmarks.peer_libs.PEERS`` and torch 2.13.0 (``--torch`` and ``--pip-arg`` choose another
build or index; pip's own configuration decides where the wheel comes from); nothing of theirs
is kept in this repository:

- ``sb3``: stable-baselines3 2.9.2 and rl-zoo3 2.9.2 (RL Baselines3 Zoo: SB3's training script
  and its Atari PPO hyperparameters), with the project's gymnasium 1.4.0 and ale-py 0.12.1.
- ``cleanrl``: envpool 0.8.4 (the oldest envpool wheel for Python 3.11) and gym 0.23.1. CleanRL
  is not packaged for Python 3.11 (its 1.2.0 on PyPI needs < 3.11), so ``--cleanrl-script``
  takes ``ppo_atari_envpool.py`` or a checkout of github.com/vwxyzjn/cleanrl and copies the
  file into the cache, recording its source and sha256.
- ``sf``: sample-factory 2.1.1 with gymnasium 0.29.1 and ale-py 0.9.1 (it needs gymnasium < 1).
- ``torchrl``: TorchRL's ``sota-implementations/ppo/ppo_atari.py`` is not packaged either:
  ``--torchrl-sota`` points at that folder of a TorchRL checkout matching the installed torchrl
  (it runs in the project's venv and needs ``hydra-core`` and ``torchvision`` there).

The work per batch. Each peer runs as shipped with only the overrides that give it the recipe's
batch (``peer_libs.speed_args``, ``torchrl_overrides``): 8 simulators x 128 steps = 1,024 agent
steps (4,096 frames), 4 epochs of 4 minibatches of 256, the Nature CNN shared by the policy and
value heads. SB3's zoo, CleanRL's script and Sample Factory's Atari example already default to
that batch; the overrides restate it from the recipe's ``Config``, so that a change there
follows. Sample Factory: ``--sf-workers N`` rollout processes of 8 / N simulators each (default:
the most that divide 8 and fit the cores, 2 x 4 on 2 cores; its shipped layout is 8 x 1,
``--sf-workers 8``; ``--sf-workers 2,8,1`` times several layouts in the same rounds, one row
each, ``sf 2x4`` and so on), ``rollout`` 128, ``batch_size`` 256 x ``num_batches_per_epoch``
4 = 1,024 steps per training iteration, 4 epochs: the same learner batch whatever the layout.
TorchRL: hydra overrides for the batch, the minibatch size and 4 epochs (its default is 3), no
logger, one evaluation episode at the first batch (left out by the warm-up). The recipe runs with
``--env.sticky-actions 0``, as every peer's env does.

Timing. Each peer starts through a wrapper that notes ``time.perf_counter()`` at the end of
each batch's update without editing the peer (``peer_wrappers/``: SB3's ``PPO.train`` wrapped,
CleanRL's ``charts/SPS`` scalar, Sample Factory's ``AlgoObserver.on_training_step``, TorchRL's
progress bar), so every side is timed from the end of batch ``warmup`` to the end of the last
batch; the recipe's first thread probe is left out as in ``benchmarks.learner_speed``. A round
runs the recipe, then each peer in the order of ``--peers``; the ratio recipe / peer is taken
per round and the median of the paired ratios is the figure.

What still differs (the work per batch and the settings named above are equal):

- Simulators: the recipe steps ale-py 0.12.1's ``AtariVectorEnv`` (preprocessing in its C++
  threads) in the learner process; CleanRL steps envpool 0.8.4 (its own ALE build and C++
  thread pool, ``num_threads`` left at its default); SB3 steps gymnasium envs with Python
  wrappers (``AtariWrapper``, OpenCV) one after another in a ``DummyVecEnv`` (the zoo's default)
  in the learner process; Sample Factory steps gymnasium envs with Python wrappers in N rollout
  processes, acts in a separate inference process and learns in a third, through shared memory;
  TorchRL steps 8 ``ParallelEnv`` processes and preprocesses RGB frames in the parent.
- Threads: the recipe measures 1 against all cores for its updates and its in-process
  inference (``accelrl.collectors.UpdateThreads``); SB3 and CleanRL keep torch's default;
  Sample Factory sets one torch thread in its learner, inference and rollout processes, and
  their niceness (0, 2 and 10 from its ``default_niceness``), whatever the benchmark runs at.
- Frame storage: the recipe, SB3 and Sample Factory keep uint8 frames in the batch; CleanRL
  converts every step's frames to float32 tensors (about 116 MB per batch).
- Observations: 84 x 84 grey, 4 stacked, in all; Sample Factory resizes the RGB frame before
  turning it grey (gymnasium's ``ResizeObservation`` then ``GrayScaleObservation``) and
  normalises inputs with a running mean and std (``normalize_input``, on in its Atari
  defaults), where the others divide by 255.
- Sticky actions: equal, none (the recipe's own default is ALE v5's 0.25).
- Lives: every peer ends an episode at a lost life inside the env and presses FIRE after it
  (Baselines' ``EpisodicLifeEnv`` and ``FireResetEnv``, envpool's ``episodic_life``); the recipe
  plays whole games, cuts bootstrapping at a lost life in the loss (``ppo.life_loss_boundary``)
  and presses FIRE only after a reset (``--env.fire-on-life-loss`` off). Pong has no lives.
- Rewards: clipped to their sign for learning in all; every side reports unclipped game scores.
- Learning settings that leave the work as it is: SB3 does not clip the value loss; Sample
  Factory clips value changes at 1.0 on normalised returns, does not reshuffle minibatches
  between epochs and keeps its clip range fixed, as CleanRL does; the recipe and SB3 anneal it.
- Logging: the zoo prints a table per update and writes Monitor CSVs (its evaluation is off);
  CleanRL writes TensorBoard events; Sample Factory writes TensorBoard events and a checkpoint
  every 120 s; the recipe writes ``metrics.csv`` only.
- torch: 2.13.0 in the peers' venvs, the project's 2.14 for the recipe and TorchRL.

The peers' own default settings, run to a score: ``benchmarks.time_to_score --peer NAME``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import peer_libs
from benchmarks.common import cores, cpu_name, median_ratio, print_table, write_json
from benchmarks.learner_speed import recipe_fps
from benchmarks.peer_libs import MARK, PeerError, read_marks, steady_rate

__all__ = ["main", "read_marks", "steady_rate", "torchrl_fps", "torchrl_overrides"]

TORCHRL_TITLE = "TorchRL sota-implementations/ppo/ppo_atari.py"
# Every peer's env has no sticky actions (v4 ids, envpool's default); the recipe's default
# is ALE v5's 0.25.
RECIPE_FLAGS = ["--env.sticky-actions", "0"]

WRAPPER = f"""
import os, runpy, sys, time
import tqdm
script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
update = tqdm.tqdm.update
def noted(self, n=1):
    out = update(self, n)
    os.write(2, f"{MARK} {{self.n}} {{time.perf_counter()}}\\n".encode())
    return out
tqdm.tqdm.update = noted
runpy.run_path(script, run_name="__main__")
"""


def torchrl_overrides(game: str, batches: int, tmp: str, device: str = "cpu") -> list[str]:
    """Hydra overrides that give TorchRL's script the recipe's default work per batch."""
    work = peer_libs.recipe_work()
    batch_frames = work.batch_steps * peer_libs.FRAMESKIP  # TorchRL counts frames at skip 4
    return [
        f"env.env_name={game}NoFrameskip-v4",
        f"env.num_envs={work.num_envs}",
        "++env.backend=gymnasium",
        f"collector.frames_per_batch={batch_frames}",
        f"collector.total_frames={batches * batch_frames}",
        f"loss.mini_batch_size={batch_frames // work.minibatches}",
        f"loss.ppo_epochs={work.epochs}",
        "logger.backend=",
        "logger.num_test_episodes=1",
        f"logger.test_interval={10**12}",
        f"optim.device={device}",
        f"hydra.run.dir={tmp}",
        "hydra.output_subdir=null",
    ]


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


def library_fps(name: str, opts: argparse.Namespace, sf_workers: int) -> float:
    """Steady frames/s of a library peer run through its wrapper (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = speed_args(name, opts, tmp, sf_workers)
        marks = peer_libs.run_for_marks(
            name, peer_libs.command(name, opts.cache, args), tmp, opts.batches
        )
    return steady_rate(marks, opts.warmup)


def speed_args(name: str, opts: argparse.Namespace, tmp: str, sf_workers: int) -> list[str]:
    work = peer_libs.recipe_work()
    return peer_libs.speed_args(
        name,
        opts.game,
        opts.batches,
        work,
        tmp,
        seed=opts.seed,
        device=opts.device,
        sf_workers=sf_workers,
    )


def sf_layouts(text: str | None, num_envs: int) -> list[int]:
    """``--sf-workers`` as a list of rollout process counts (default: the one that fits)."""
    if text is None:
        return [peer_libs.default_sf_workers(cores(), num_envs)]
    layouts = []
    for part in text.split(","):
        try:
            workers = int(part)
        except ValueError:
            raise PeerError(
                f"--sf-workers {text}: give whole numbers, one per layout, e.g. 2 or 2,8,1"
            ) from None
        peer_libs.sf_layout(workers, num_envs)
        if workers not in layouts:
            layouts.append(workers)
    return layouts


def setup_main(argv: list[str]) -> list[dict]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peers setup",
        description="Make each peer's venv (pinned versions) under the cache folder.",
    )
    parser.add_argument("peers", nargs="+", choices=list(peer_libs.PEERS))
    parser.add_argument("--cache", type=Path, default=peer_libs.DEFAULT_CACHE)
    parser.add_argument(
        "--cleanrl-script",
        type=Path,
        help="CleanRL's ppo_atari_envpool.py, or a checkout of github.com/vwxyzjn/cleanrl",
    )
    parser.add_argument("--torch", default=peer_libs.TORCH, help="pip requirement for torch")
    parser.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        help="passed to pip install (repeat), e.g. --pip-arg=--extra-index-url=URL",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venvs")
    opts = parser.parse_args(argv)
    if "cleanrl" in opts.peers:  # refused before any venv is made
        if opts.cleanrl_script is None:
            parser.error(
                "setup cleanrl needs --cleanrl-script PATH: CleanRL's ppo_atari_envpool.py or a "
                "checkout of github.com/vwxyzjn/cleanrl (its PyPI release needs Python < 3.11)"
            )
        try:
            peer_libs.cleanrl_source(opts.cleanrl_script)
        except PeerError as err:
            parser.error(str(err))
    records = []
    for name in opts.peers:
        print(f"setup {name}: {opts.cache / name / 'venv'}", flush=True)
        try:
            record = peer_libs.setup(
                name,
                opts.cache,
                python=opts.python,
                torch=opts.torch,
                pip_args=tuple(opts.pip_arg),
                cleanrl_script=opts.cleanrl_script,
            )
        except PeerError as err:
            parser.error(str(err))
        print(f"  {record['versions']}", flush=True)
        records.append(record)
    return records


def chosen_peers(opts: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """``--peers``, each checked for what it needs; without it, every peer that is ready."""
    known = [*peer_libs.PEERS, "torchrl"]
    if opts.peers is None:
        ready = [n for n in peer_libs.PEERS if (opts.cache / n / "venv").exists()]
        names = ready + (["torchrl"] if opts.torchrl_sota else [])
        if not names:
            parser.error(
                f"no peer is set up in {opts.cache}: run `python -m benchmarks.peers setup "
                "sb3 cleanrl sf --cache DIR --cleanrl-script PATH`, or pass --torchrl-sota PATH"
            )
    else:
        names = [n.strip() for n in opts.peers.split(",") if n.strip()]
    for name in names:
        if name not in known:
            parser.error(f"--peers {opts.peers}: unknown peer {name!r}; choose from {known}")
        if name == "torchrl":
            if opts.torchrl_sota is None or not (opts.torchrl_sota / "ppo_atari.py").is_file():
                parser.error(
                    f"--torchrl-sota {opts.torchrl_sota}: no ppo_atari.py there; pass the "
                    "sota-implementations/ppo folder of a TorchRL checkout"
                )
        else:
            try:
                peer_libs.venv_python(name, opts.cache)
            except PeerError as err:
                parser.error(str(err))
    return names


def main(argv: list[str] | None = None) -> dict | list[dict]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["setup"]:
        return setup_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", help="comma-separated: sb3,cleanrl,sf,torchrl")
    parser.add_argument("--cache", type=Path, default=peer_libs.DEFAULT_CACHE)
    parser.add_argument(
        "--torchrl-sota",
        type=Path,
        help="the sota-implementations/ppo folder of a TorchRL checkout matching torchrl",
    )
    parser.add_argument("--game", default="Pong")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=1, help="the peers' seed")
    parser.add_argument(
        "--sf-workers",
        help="Sample Factory's rollout processes; several (2,8,1) time each layout as a row",
    )
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    if opts.warmup < 1 or opts.batches <= opts.warmup:
        parser.error(f"--warmup {opts.warmup} --batches {opts.batches}: need 1 <= warmup < batches")
    work = peer_libs.recipe_work()
    try:
        layouts = sf_layouts(opts.sf_workers, work.num_envs)
    except PeerError as err:
        parser.error(str(err))
    peer_names = chosen_peers(opts, parser)
    # One row per peer; Sample Factory gets one per layout when several are asked for.
    rows_of: dict[str, tuple[str, int]] = {}  # row name -> (peer, sf rollout processes)
    for name in peer_names:
        if name == "sf" and len(layouts) > 1:
            for w in layouts:
                rows_of[f"sf {w}x{work.num_envs // w}"] = (name, w)
        else:
            rows_of[name] = (name, layouts[0])
    names = list(rows_of)
    titles, commands = {}, {}
    for row, (name, workers) in rows_of.items():
        if name == "torchrl":
            titles[row] = TORCHRL_TITLE
            commands[row] = [str(opts.torchrl_sota / "ppo_atari.py")]
            commands[row] += torchrl_overrides(opts.game, opts.batches, "<tmp>", opts.device)
        else:
            titles[row] = peer_libs.peer(name).title
            if row != name:  # one of several Sample Factory layouts
                titles[row] += f", {workers} x {work.num_envs // workers} simulators"
            args = speed_args(name, opts, "<tmp>", workers)
            commands[row] = peer_libs.command(name, opts.cache, args)
    print(
        f"peers: {opts.game}, {cores()} cores, device {opts.device}, {opts.batches} batches of "
        f"{work.batch_steps} agent steps, first {opts.warmup} left out, {opts.rounds} round(s); "
        f"recipe flags {' '.join(RECIPE_FLAGS)}",
        flush=True,
    )
    for name in names:
        print(f"  {name}: {' '.join(commands[name])}", flush=True)
    rates: dict[str, list[float]] = {"recipe": [], **{n: [] for n in names}}
    for r in range(opts.rounds):
        rates["recipe"].append(
            recipe_fps("ppo", RECIPE_FLAGS, opts.batches, opts.warmup, opts.device, game=opts.game)
        )
        for row, (name, workers) in rows_of.items():
            if name == "torchrl":
                rate = torchrl_fps(
                    opts.torchrl_sota, opts.game, opts.batches, opts.warmup, opts.device
                )
            else:
                rate = library_fps(name, opts, workers)
            rates[row].append(rate)
        line = ", ".join(
            f"{n} {rates[n][-1]:,.0f} ({rates['recipe'][-1] / rates[n][-1]:.2f})" for n in names
        )
        print(
            f"  round {r + 1}/{opts.rounds}: recipe {rates['recipe'][-1]:,.0f} frames/s; {line}",
            flush=True,
        )
    ratios = {n: [a / b for a, b in zip(rates["recipe"], rates[n], strict=True)] for n in names}
    medians = {n: median_ratio(rates["recipe"], rates[n]) for n in names}
    result = {
        "game": opts.game,
        "host": cpu_name(),
        "cores": cores(),
        "device": opts.device,
        "batches": opts.batches,
        "warmup": opts.warmup,
        "seed": opts.seed,
        "sf_workers": layouts[0] if len(layouts) == 1 else layouts,
        "recipe_flags": RECIPE_FLAGS,
        "peers": {
            row: {
                "title": titles[row],
                "command": commands[row],
                "installed": {} if name == "torchrl" else peer_libs.installed(name, opts.cache),
            }
            for row, (name, _) in rows_of.items()
        },
        "rounds": rates,
        "ratios": ratios,
        "ratio_median": medians,
    }
    print(f"\nrecipe vs peers, {opts.game}: frames/s medians over rounds, ratio recipe / peer")
    rows = [
        (
            titles[n],
            statistics.median(rates["recipe"]),
            statistics.median(rates[n]),
            " ".join(f"{x:.2f}" for x in ratios[n]),
            medians[n],
        )
        for n in names
    ]
    print_table(["peer", "recipe frames/s", "peer frames/s", "round ratios", "median ratio"], rows)
    if opts.json:
        write_json(str(opts.json), result)
    return result


if __name__ == "__main__":
    main()
