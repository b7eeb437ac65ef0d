"""Runs one plain loop alone.

    python -m reference atari ppo|a2c|dqn [--game Pong] [--iterations 5] [--device cuda]
    python -m reference cartpole ALGO [--json PATH] [every recipe flag, over the CartPole presets]

``atari``: the loop for a few batches with the recipe's default ``Config`` (DQN learning from
the first batch in a 50k-transition replay), then its frames/s. ``cartpole``: the loop with
``reference.cartpole_presets.cartpole_config(ALGO)``, any recipe flag applied over it, then its
returns.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any

import torch
import tyro

from accelrl.algos.catalog import algorithm
from accelrl.config import cpu_count
from reference import atari, classic, pqn
from reference.atari import steady_fps
from reference.atari_actor_critic import plain_a2c, plain_ppo
from reference.atari_dqn import plain_dqn
from reference.cartpole_presets import KINDS, cartpole_config


def recipe_config(algo: str, game: str) -> Any:
    """The recipe's default ``Config`` for ``game`` (resolved for DQN), with DQN learning from
    the first batch in a 50k-transition replay (the command line's short runs)."""
    record = algorithm(algo)
    cfg = record.config()
    cfg.env.game = game
    if algo == "dqn":
        cfg.dqn.learning_starts_frames = 0
        cfg.dqn.replay_capacity = 50_000
        cfg = record.resolve(cfg)
    return cfg


def atari_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(
        prog="python -m reference atari", description=atari.__doc__.splitlines()[0]
    )
    p.add_argument("algo", choices=["ppo", "a2c", "dqn"])
    p.add_argument("--game", default="Pong")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="simulator threads (0: core count)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    loop = {"ppo": plain_ppo, "a2c": plain_a2c, "dqn": plain_dqn}[args.algo]
    cfg = recipe_config(args.algo, args.game)
    recs = loop(cfg, args.iterations, device=args.device, threads=args.threads or cpu_count())
    for frames, t in recs:
        print(f"{frames:>10,} frames  {t:8.2f} s")
    print(f"steady frames/s (after {args.warmup} warm-up): {steady_fps(recs, args.warmup):,.0f}")
    print(f"({math.nan if not recs else recs[-1][0] / recs[-1][1]:,.0f} including the first)")


def cartpole_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(
        prog="python -m reference cartpole",
        description=classic.__doc__.splitlines()[0],
        add_help=False,
        epilog="Every other flag is the recipe's own (ALGO --help lists them), applied over "
        "reference.cartpole_presets' settings for ALGO.",
    )
    p.add_argument("algo", choices=list(KINDS))
    p.add_argument("--json", help="write the config and the result (with the curve) here")
    args, rest = p.parse_known_args(argv)
    kind = KINDS[args.algo]
    cfg = cartpole_config(args.algo)
    cfg = tyro.cli(type(cfg), default=cfg, args=rest, prog=f"reference cartpole {args.algo}")
    if kind == "dqn":
        cfg = algorithm("dqn").resolve(cfg)
    torch.set_num_threads(1)
    loop = {
        "dqn": classic.plain_dqn,
        "ppo": classic.plain_ppo,
        "a2c": classic.plain_a2c,
        "pqn": pqn.plain_pqn,
    }[kind]
    out = loop(cfg)
    print(
        f"{args.algo} seed {cfg.seed}: last-100 {out['last100']:.1f}, greedy "
        f"{out['greedy_eval']:.1f}, {out['episodes']} episodes, {out['seconds']:.1f} s"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": dataclasses.asdict(cfg), "seed": cfg.seed, **out}, fh)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    families = {"atari": atari_main, "cartpole": cartpole_main}
    if not argv or argv[0] not in families:
        raise SystemExit(f"usage: python -m reference {{atari,cartpole}} ...\n\n{__doc__}")
    families[argv[0]](argv[1:])


if __name__ == "__main__":
    main()
