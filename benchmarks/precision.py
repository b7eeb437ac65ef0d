"""bf16 against fp32, each pair timed in alternating rounds of one process (``accelrl.precision``).

    python -m benchmarks.precision [--quick] [--device cpu|cuda] [--rounds 5] [--compile]
                                   [--kernels] [--json PATH]

Rows (each a rate next to its fp32 reference, ratio = median of per-round paired ratios, > 1
faster):

- ppo update: one PPO update of the Nature-CNN actor-critic on a Breakout-sized batch (8 envs
  x 128 steps, 4 minibatches of 256; one epoch per timed call: a default update is 4 of them),
  learner fp32 / bf16, with and without channels_last conv weights, and with fused Adam (the
  default) against foreach Adam in bf16 + channels_last;
- dqn update: one DQN step of the Nature Q-network on a batch of 32 (``DQN.update``);
- collect: the acting policy's forward pass on 8 frames (one collection step of 8 simulators:
  what the precision changes in collection; the simulators' time is the same);
- ``--compile``: the PPO update with ``--compile.loss``, fp32 and bf16 (minutes of compilation
  on a CPU first).

``--recipe``: the whole PPO recipe on Breakout (collection, update, everything a run does), its
steady frames/s with ``--precision.learner bf16`` (and with ``--precision.channels-last``)
against fp32, each variant run in turn in each round (``benchmarks.learner_speed.recipe_fps``:
the recipe's own thread plan, the first batches and the thread probe left out).

``--kernels`` runs one bf16 and one fp32 forward and backward pass of the Nature CNN under
``ONEDNN_VERBOSE=1`` (CPU) and prints which oneDNN implementation ran each convolution and
matrix product (``avx512_core_amx_bf16``: AMX tiles; ``avx512_core_bf16``: AVX-512 BF16; an
implementation without bf16 in its name, or ``ref``, would explain a missing gain).

``--quick`` (benchmarks.run's quick run): a batch of 8 x 32 steps, one round, no compile; its
figures check that everything runs.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from benchmarks.common import Row, median, median_ratio, print_table

FRAMES = {"obs_key": "pixels", "obs_shape": (4, 84, 84), "num_actions": 4}


def frames_batch(envs: int, steps: int, device: str, seed: int = 0) -> TensorDict:
    """A ``[envs, steps]`` batch as a collector hands PPO one: uint8 frames, actions, their
    log-probs and values, rewards and episode ends (a few)."""
    g = torch.Generator().manual_seed(seed)
    shape = (envs, steps)

    def frames() -> torch.Tensor:
        return torch.randint(0, 256, (*shape, 4, 84, 84), dtype=torch.uint8, generator=g)

    done = torch.rand(*shape, 1, generator=g) < 0.01
    nxt = {
        "pixels": frames(),
        "reward": (torch.rand(*shape, 1, generator=g) < 0.05).float(),
        "done": done,
        "terminated": done,
        "truncated": torch.zeros(*shape, 1, dtype=torch.bool),
    }
    return TensorDict(
        {
            "pixels": frames(),
            "action": torch.randint(0, 4, shape, generator=g),
            "action_log_prob": torch.full(shape, -1.386),
            "state_value": torch.zeros(*shape, 1),
            "next": nxt,
        },
        shape,
        device=device,
    )


def replay_batch(n: int, device: str) -> TensorDict:
    """A replay sample of ``n`` frame transitions as ``FrameReplay`` gives DQN."""
    batch = frames_batch(1, n, device)[0]
    return batch.select("pixels", "action", ("next", "pixels"), ("next", "reward"),
                        ("next", "terminated"))  # fmt: skip


def config(module: Any, learner: str, channels_last: bool, compile_loss: bool = False) -> Any:
    cfg = module.Config()
    cfg.precision.learner = learner
    cfg.precision.actor = learner if learner != "fp16" else "fp32"
    cfg.precision.channels_last = channels_last
    cfg.compile.loss = compile_loss
    return cfg


def ppo_steppers(args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    """name -> one PPO update (one epoch of 4 minibatches) on the same batch."""
    from recipes import ppo_atari

    envs, steps = (8, 32) if args.quick else (8, 128)
    batch = frames_batch(envs, steps, args.device)
    device = torch.device(args.device)
    variants = {
        "fp32": ("fp32", False, True, False),
        "bf16": ("bf16", False, True, False),
        "fp32+channels_last": ("fp32", True, True, False),
        "bf16+channels_last": ("bf16", True, True, False),
        "bf16+channels_last, foreach Adam": ("bf16", True, False, False),
    }
    if args.compile:
        variants["fp32+compile"] = ("fp32", False, True, True)
        variants["bf16+compile"] = ("bf16", False, True, True)
    steppers = {}
    for name, (learner, cl, fused, compiled) in variants.items():
        cfg = config(ppo_atari, learner, cl, compiled)
        cfg.ppo.epochs, cfg.ppo.minibatches = 1, 4
        torch.manual_seed(0)
        agent = ppo_atari.ALGORITHM.make_agent(cfg, FRAMES, device)
        if not fused:
            agent.optimizer = torch.optim.Adam(agent.params, lr=cfg.ppo.lr, foreach=True)
        steppers[name] = lambda a=agent: a.update(batch.clone(), progress=0.0)
    return steppers


VARIANTS = {"fp32": ("fp32", False), "bf16": ("bf16", False), "bf16+channels_last": ("bf16", True)}
"""The DQN and collection variants: name -> (precision, channels_last)."""


def agents(module: Any, device: str) -> dict[str, Any]:
    """name -> the recipe ``module``'s agent for frames in each of ``VARIANTS``."""
    out = {}
    for name, (chosen, channels_last) in VARIANTS.items():
        torch.manual_seed(0)
        cfg = config(module, chosen, channels_last)
        out[name] = module.ALGORITHM.make_agent(cfg, FRAMES, torch.device(device))
    return out


def dqn_steppers(args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    """name -> one DQN step on the same replay sample of 32."""
    from recipes import dqn_atari

    sample = replay_batch(32, args.device)
    return {
        name: (lambda a=agent: a.update(sample.clone()))
        for name, agent in agents(dqn_atari, args.device).items()
    }


def collect_steppers(args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    """name -> the acting policy's forward pass on 8 frames."""
    from recipes import ppo_atari

    obs = frames_batch(8, 1, args.device)[:, 0].select("pixels")

    def acting(policy: torch.nn.Module) -> Callable[[], Any]:
        def act() -> None:
            with torch.no_grad():
                policy(obs.clone())

        return act

    return {
        name: acting(agent.collect_policy) for name, agent in agents(ppo_atari, args.device).items()
    }


def time_pairs(
    steppers: dict[str, Callable[[], Any]], rounds: int, calls: int, device: str
) -> dict[str, list[float]]:
    """Seconds per call of each stepper, ``rounds`` rounds of ``calls`` calls in rotating order
    (one warm-up call each first)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for step in steppers.values():
        step()
    names = list(steppers)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                steppers[name]()
            sync()
            times[name].append((time.perf_counter() - start) / calls)
    return times


def kernels(device: str) -> dict[str, Any]:
    """oneDNN's implementation of each primitive in one fp32 and one bf16 forward + backward of
    the Nature CNN (``ONEDNN_VERBOSE=1``), counted by (kind, implementation)."""
    if device != "cpu":
        return {}
    code = (
        "import torch; from accelrl.models import NatureCNN; net = NatureCNN(); "
        "x = torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8)\n"
        "for dt in (None, torch.bfloat16):\n"
        "    print('=== ' + str(dt), flush=True)\n"
        "    with torch.autocast('cpu', dtype=dt or torch.bfloat16, enabled=dt is not None):\n"
        "        y = net(x).float().sum()\n"
        "    y.backward()\n"
    )
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    found: dict[str, collections.Counter] = {}
    current = "?"
    for line in out.stdout.splitlines():
        if line.startswith("=== "):
            current = "bf16" if "bfloat16" in line else "fp32"
            found[current] = collections.Counter()
        elif current in found and line.startswith("onednn_verbose") and ",exec," in line:
            fields = line.split(",")
            # onednn_verbose,[timestamp,]primitive,exec,cpu,KIND,IMPLEMENTATION,PROP,...
            i = fields.index("exec")
            found[current][f"{fields[i + 2]} {fields[i + 3]} {fields[i + 4]}"] += 1
    return {k: dict(v) for k, v in found.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=0, help="default 5, quick 1")
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    p.add_argument("--compile", action="store_true", help="add --compile.loss pairs (slow)")
    p.add_argument("--kernels", action="store_true", help="oneDNN's kernels (ONEDNN_VERBOSE)")
    p.add_argument("--recipe", action="store_true", help="whole-recipe frames/s (PPO, Breakout)")
    p.add_argument("--recipe-batches", type=int, default=10)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 5)
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"device": args.device, "threads": args.threads}
    load = os.getloadavg()[0]
    print(f"benchmarks.precision: device {args.device}, {args.threads} torch thread(s), "
          f"{args.rounds} rounds, load average {load:.1f}", flush=True)  # fmt: skip
    groups = {
        "ppo update": (ppo_steppers, 1),
        "dqn update": (dqn_steppers, 5 if args.quick else 20),
        "collect step": (collect_steppers, 10 if args.quick else 50),
    }
    for group, (make, calls) in groups.items():
        times = time_pairs(make(args), args.rounds, calls, args.device)
        ref = times["fp32"]
        rows = []
        for name, t in times.items():
            ref_name = "fp32+compile" if name == "bf16+compile" else "fp32"
            ref = times[ref_name]
            rows.append([name, 1e3 * median(t), median_ratio(t, ref), median_ratio(ref, t)])
            results[f"{group}: {name}"] = {
                "ms": 1e3 * median(t),
                "reference": ref_name,
                "time_ratio": median_ratio(t, ref),
                "speedup": median_ratio(ref, t),
                "ms_rounds": [1e3 * x for x in t],
            }
        print(f"\n{group} (per call; ratios: medians of per-round pairs)")
        print_table(["variant", "ms", "time / fp32", "speed-up"], rows)
    if args.recipe:
        results.update(recipe_pairs(args))
    if args.kernels:
        results["kernels"] = kernels(args.device)
        for dt, counts in results["kernels"].items():
            print(f"\noneDNN primitives, {dt} forward + backward:")
            for what, n in sorted(counts.items()):
                print(f"  {n:3d} x {what}")
    results["load_average"] = (load, os.getloadavg()[0])
    print(f"\nload average {load:.1f} -> {results['load_average'][1]:.1f}")
    if args.json:
        from benchmarks.common import write_json

        write_json(args.json, results)
    return results


RECIPE_VARIANTS = {
    "fp32": [],
    "bf16": ["--precision.learner", "bf16"],
    "bf16+channels_last": ["--precision.learner", "bf16", "--precision.channels-last"],
}
"""The whole-recipe variants: name -> the PPO recipe's flags (the acting policy stays fp32)."""


def recipe_pairs(args: argparse.Namespace) -> dict[str, Any]:
    """Steady frames/s of the PPO recipe on Breakout in each of ``RECIPE_VARIANTS``, the
    variants in turn in each of ``args.rounds`` rounds; ratios are medians of per-round pairs
    with fp32."""
    from benchmarks.learner_speed import recipe_fps

    fps: dict[str, list[float]] = {name: [] for name in RECIPE_VARIANTS}
    for r in range(args.rounds):
        for name, flags in RECIPE_VARIANTS.items():
            fps[name].append(recipe_fps("ppo", flags, args.recipe_batches, 2, args.device,
                                        game="Breakout"))  # fmt: skip
        print(f"  recipe round {r + 1}/{args.rounds}: "
              + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in fps.items()), flush=True)  # fmt: skip
    out, table = {}, []
    for name, rates in fps.items():
        speedup = median_ratio(rates, fps["fp32"])
        out[f"ppo recipe: {name}"] = {"frames_per_s": median(rates), "reference": "fp32",
                                      "speedup": speedup, "fps_rounds": rates}  # fmt: skip
        table.append([name, median(rates), speedup])
    print("\nppo recipe on Breakout (frames/s; ratio: median of per-round pairs)")
    print_table(["variant", "frames/s", "speed-up"], table)
    return out


def rows(results: dict[str, Any]) -> list[Row]:
    """``benchmarks.run``'s rows: every variant against its fp32 reference (no targets)."""
    out = []
    for key, value in results.items():
        if not isinstance(value, dict) or "speedup" not in value or key.endswith(": fp32"):
            continue
        if "frames_per_s" in value:
            ref = value["frames_per_s"] / value["speedup"]
            out.append(Row("precision", key, value["frames_per_s"], "frames/s",
                           reference="fp32", ref_rate=ref, ratio=value["speedup"]))  # fmt: skip
            continue
        out.append(
            Row(
                "precision",
                key,
                1e3 / value["ms"],
                "calls/s",
                reference=value["reference"],
                ref_rate=1e3 / value["ms"] * value["time_ratio"],
                ratio=value["speedup"],
            )
        )
    return out


if __name__ == "__main__":
    main()
