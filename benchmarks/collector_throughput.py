"""Collection throughput with the Nature-CNN actor-critic in the loop (no training), Pong.

Pipelines, timed in interleaved rounds within one process after their startup and warm-up:

- accelrl: ``accelrl.collectors.make_collector`` with 8 and 16 envs in-process (``Collector``), 16
  envs in ale-py's async mode returning the first 8 to finish each step (``async_batch_size=8``:
  the simulators keep running during inference), and (unless ``--no-workers``) 2 worker
  processes x 8 envs (``MultiSyncCollector``); 64 steps per row per batch;
- reference: TorchRL's own Atari pipeline (``benchmarks.torchrl_reference``): ``ParallelEnv`` of
  8 ``GymEnv`` workers, pixel transforms in the parent, TorchRL ``Collector``, same batch layout;
- ceiling parts: accelrl's env alone (random actions) and the policy forward alone on a
  ``[num_envs, 4, 84, 84]`` uint8 batch; a synchronous collector cannot beat
  ``1 / (1 / env_rate + 1 / inference_rate)`` agent steps/s;
- env+policy loop: the env and the policy alternating in a bare Python loop, no collector: the
  gap between it and the ceiling is the simulator and the network evicting each other's data
  from the caches, the gap between accelrl and it is the collector's own work.

Run: ``python -m benchmarks.collector_throughput [--seconds 2.5] [--rounds 5] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from benchmarks.common import (
    cores,
    machine_info,
    median,
    median_ratio,
    print_table,
    run_rounds,
    time_steps,
    verdict,
    write_json,
)

CEILING_TARGET = 0.9  # accelrl / ceiling
REFERENCE_TARGET = 4.0  # accelrl / reference, same number of simulators
FRAMESKIP = 4
STEPS_PER_ENV = 64  # per batch, for every pipeline
GAME = "Pong"
# (name, envs per process, worker processes, async rows per step or 0 for sync)
ACCELRL_PIPELINES = [
    ("accelrl 8", 8, 0, 0),
    ("accelrl 16", 16, 0, 0),
    ("accelrl 16 async8", 16, 0, 8),
    ("accelrl 2x8", 8, 2, 0),
]
SIMULATORS = {name: n * max(1, w) for name, n, w, _ in ACCELRL_PIPELINES}


def blank(x: float | None) -> float | str:
    return "" if x is None else x


def collector_segment(
    it: Iterator, frames_per_batch: int, prime: bool = False
) -> Callable[[float], tuple[int, float]]:
    """Whole batches from ``it`` until ``seconds`` have passed; with ``prime`` one untimed
    batch first (a collector idle while the other pipelines ran starts cold: steady-state
    throughput is what is compared)."""

    def segment(seconds: float) -> tuple[int, float]:
        if prime:
            next(it)
        return time_steps(lambda: next(it), frames_per_batch, seconds)

    return segment


class BackgroundSegment:
    """Timing for collectors that keep working after a batch is taken (``async``: every
    worker starts its next batch at once; ``batched``: the inference server and simulators run
    until a bounded queue fills).

    Untimed before each segment: take the batches finished in the background since the last one
    (the first of them, or as many as ``queue_out`` holds). Timed: whole batches. Untimed after:
    wait for the workers' in-flight batches to land (async) or pause the server (batched), so
    that neither their work nor their idle polling runs inside another pipeline's segment.
    """

    def __init__(self, collector: Any, it: Iterator, frames_per_batch: int, workers: int) -> None:
        self.collector, self.it, self.fpb, self.workers = collector, it, frames_per_batch, workers
        self._pause = None

    def _queue_len(self) -> int | None:
        queue = getattr(self.collector, "queue_out", None)
        try:
            return None if queue is None else queue.qsize()
        except (NotImplementedError, OSError):
            return None

    def settle(self) -> None:
        """Let the background workers fill their queue (or pause the inference server) so that
        the next timed segment starts from a steady state."""
        from accelrl.collectors import BatchedInferenceCollector

        if isinstance(self.collector, BatchedInferenceCollector):
            self._pause = self.collector.pause()
            self._pause.__enter__()
            return
        deadline = time.perf_counter() + 10.0
        while time.perf_counter() < deadline:
            n = self._queue_len()
            if n is None or n >= self.workers:
                break
            time.sleep(0.005)

    def _resume(self) -> None:
        if self._pause is not None:
            self._pause.__exit__(None, None, None)
            self._pause = None
            next(self.it)  # transitions buffered at the pause
            return
        n = self._queue_len()
        for _ in range(self.workers if n is None else n):
            next(self.it)

    def __call__(self, seconds: float) -> tuple[int, float]:
        self._resume()
        out = time_steps(lambda: next(self.it), self.fpb, seconds)
        self.settle()
        return out

    def close(self) -> None:
        if self._pause is not None:
            self._pause.__exit__(None, None, None)
            self._pause = None


def make_policy(num_actions: int, device: str = "cpu") -> torch.nn.Module:
    from accelrl.models import make_actor_critic

    return make_actor_critic("pixels", (4, 84, 84), num_actions).to(device)


def collector_kinds() -> tuple[str, ...]:
    """The ``CollectorConfig.kind`` values this checkout of accelrl knows (``sync`` before kinds
    existed); read at run time so that the benchmarks follow kinds as they land."""
    import dataclasses
    import typing

    from accelrl.config import CollectorConfig

    if "kind" not in {f.name for f in dataclasses.fields(CollectorConfig)}:
        return ("sync",)
    hint = typing.get_type_hints(CollectorConfig)["kind"]
    return tuple(typing.get_args(hint)) or (CollectorConfig().kind,)


def build_accelrl(
    num_envs: int,
    num_workers: int,
    async_rows: int,
    num_actions: int,
    seed: int,
    *,
    kind: str = "sync",
    steps: int = STEPS_PER_ENV,
    device: str = "cpu",
    game: str = GAME,
) -> tuple[Any, int]:
    """accelrl's collector of ``kind`` with ``num_envs`` simulators per process;
    ``async_rows`` > 0 selects ale-py's async mode (rows per step). Returns (collector, agent
    steps per batch)."""
    from accelrl.collectors import make_collector, plan_threads
    from accelrl.config import CollectorConfig, EnvConfig, ThreadsConfig

    procs = 1 if kind == "async" else max(1, num_workers)  # an async batch is one worker's
    fpb = (async_rows or num_envs) * procs * steps
    extra = {"kind": kind} if kind != "sync" else {}
    collector = make_collector(
        EnvConfig(game=game, num_envs=num_envs, async_batch_size=async_rows),
        CollectorConfig(num_workers=num_workers, steps_per_batch=fpb, **extra),
        make_policy(num_actions, device),
        seed=seed,
        plan=plan_threads(ThreadsConfig(), num_workers),
        learner_device=device,
    )
    torch.set_num_threads(1)  # make_collector may set the learner's share; keep 1 here
    return collector, fpb


def build_reference(
    num_envs: int,
    num_actions: int,
    *,
    env: Any = None,
    steps: int = STEPS_PER_ENV,
    device: str = "cpu",
    game: str = GAME,
):
    """TorchRL's ``Collector`` over its reference pipeline (built here unless ``env`` is given);
    policy and storage on ``device`` as in TorchRL's PPO example."""
    from torchrl.collectors import Collector

    from benchmarks.env_throughput import reference_env

    fpb = num_envs * steps
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # InitTracker notice
        collector = Collector(
            env if env is not None else reference_env(game, num_envs),
            make_policy(num_actions, device),
            frames_per_batch=fpb,
            total_frames=-1,
            device=device,
            storing_device=device,
            max_frames_per_traj=-1,
        )
    torch.set_num_threads(1)
    return collector, fpb


def env_segment(num_envs: int, seed: int, game: str = GAME):
    """accelrl's env alone, stepped as its collector does, with pre-generated random actions."""
    from accelrl.collectors import plan_threads
    from accelrl.config import EnvConfig, ThreadsConfig
    from accelrl.envs import make_env

    env = make_env(
        EnvConfig(game=game, num_envs=num_envs),
        seed=seed,
        sim_threads=plan_threads(ThreadsConfig(), 0).sim_threads,
    )
    actions = torch.randint(0, env.num_actions, (256, num_envs))
    state = {"root": env.reset(), "i": 0}

    def step() -> None:
        root = state["root"]
        root.set("action", actions[state["i"] % len(actions)])
        state["i"] += 1
        _, state["root"] = env.step_and_maybe_reset(root)

    return env, (lambda s: time_steps(step, num_envs, s))


def loop_segment(num_envs: int, num_actions: int, seed: int):
    """accelrl's env and the policy in a bare loop (no collector): the ceiling with the cache
    interference between simulator and network that the separate parts do not see."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from accelrl.collectors import plan_threads
    from accelrl.config import EnvConfig, ThreadsConfig
    from accelrl.envs import make_env

    env = make_env(
        EnvConfig(game=GAME, num_envs=num_envs),
        seed=seed,
        sim_threads=plan_threads(ThreadsConfig(), 0).sim_threads,
    )
    policy = make_policy(num_actions)
    state = {"root": env.reset()}

    def step() -> None:
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            root = policy(state["root"])
        _, state["root"] = env.step_and_maybe_reset(root)

    return env, (lambda s: time_steps(step, num_envs, s))


def inference_segment(num_envs: int, num_actions: int, device: str = "cpu"):
    """Policy forward alone on a fresh-looking uint8 batch, as the collector calls it: frames
    moved to the policy's device, actions back to the CPU (which waits for the GPU)."""
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    policy = make_policy(num_actions, device)
    pixels = torch.randint(0, 256, (num_envs, 4, 84, 84), dtype=torch.uint8)

    def step() -> None:
        td = TensorDict({"pixels": pixels}, batch_size=[num_envs]).to(device)
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            policy(td).get("action").cpu()

    return lambda s: time_steps(step, num_envs, s)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2.5, help="timed seconds per pipeline")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ref-envs", type=int, default=8, help="ParallelEnv workers of the reference")
    p.add_argument("--no-workers", action="store_true", help="skip the 2-worker accelrl variant")
    p.add_argument("--no-reference", action="store_true", help="skip TorchRL's reference")
    p.add_argument("--json", default=None, help="write the results to this path")
    p.add_argument("-v", "--verbose", action="store_true", help="print every round")
    args = p.parse_args(argv)

    torch.set_num_threads(1)  # see the torchrl notes: torch threads stall next to ALE's
    import torchrl  # noqa: F401  (configures its logger on import; quieten it afterwards)

    logging.getLogger("torchrl").setLevel(logging.WARNING)
    from accelrl.envs.ale_vec import AleVecEnv

    probe = AleVecEnv(GAME, 1)
    num_actions = probe.num_actions
    probe.close()

    t0 = time.perf_counter()
    collectors: dict[str, Any] = {}
    segments: dict[str, Callable[[float], tuple[int, float]]] = {}
    envs = []
    # Each pipeline is built and warmed up (one batch) before any timing.
    for name, n, workers, rows in ACCELRL_PIPELINES:
        if workers and args.no_workers:
            continue
        seed = len(collectors) * 100
        collectors[name], fpb = build_accelrl(n, workers, rows, num_actions, seed=seed)
        it = iter(collectors[name])
        next(it)
        segments[name] = collector_segment(it, fpb)
    if not args.no_reference:
        print(f"starting TorchRL's reference ({args.ref_envs} spawned workers; slow) ...")
        collectors["reference"], fpb = build_reference(args.ref_envs, num_actions)
        it = iter(collectors["reference"])
        next(it)
        segments["reference"] = collector_segment(it, fpb)
    for n in (8, 16):
        env, segments[f"env {n}"] = env_segment(n, seed=1000 + n)
        envs.append(env)
        segments[f"inference {n}"] = inference_segment(n, num_actions)
        env, segments[f"loop {n}"] = loop_segment(n, num_actions, seed=2000 + n)
        envs.append(env)
    print(f"startup and warm-up: {time.perf_counter() - t0:.0f} s (not timed)")

    seg_s = args.seconds / args.rounds
    print(f"{args.rounds} rounds x {seg_s:.2f} s per pipeline (collectors run whole batches)")
    rates = run_rounds(segments, args.rounds, seg_s, verbose=args.verbose)
    for c in collectors.values():
        c.shutdown()
    for env in envs:
        env.close()

    # Per-round ceilings, so that every ratio pairs numbers measured within the same round.
    ceiling = {
        n: [
            1.0 / (1.0 / e + 1.0 / i)
            for e, i in zip(rates[f"env {n}"], rates[f"inference {n}"], strict=True)
        ]
        for n in (8, 16)
    }
    ref = rates.get("reference")
    rows = []
    results: dict[str, Any] = {}
    for name in [k for k in segments if k.startswith("accelrl")] + (["reference"] if ref else []):
        n = args.ref_envs if name == "reference" else SIMULATORS[name]
        r = rates[name]
        # The ceiling is accelrl's env plus inference: not a bound for the reference.
        vs_ceiling = median_ratio(r, ceiling[n]) if name != "reference" else None
        vs_ref = median_ratio(r, ref) if ref else None
        results[name] = {
            "num_envs": n,
            "steps_per_s": median(r),
            "frames_per_s": FRAMESKIP * median(r),
            "over_ceiling": vs_ceiling,
            "over_reference": vs_ref,
        }
        rows.append((name, n, median(r), FRAMESKIP * median(r), blank(vs_ceiling), blank(vs_ref)))
    for n in (8, 16):
        env_r, inf_r, ceil_r = (
            median(rates[f"env {n}"]),
            median(rates[f"inference {n}"]),
            median(ceiling[n]),
        )
        results[f"ceiling {n}"] = {
            "num_envs": n,
            "env_steps_per_s": env_r,
            "inference_steps_per_s": inf_r,
            "inference_ms_per_batch": 1e3 * n / inf_r,
            "steps_per_s": ceil_r,
            "frames_per_s": FRAMESKIP * ceil_r,
        }
        rows.append((f"env alone {n}", n, env_r, FRAMESKIP * env_r, "", ""))
        rows.append((f"inference alone {n}", n, inf_r, "", "", ""))
        rows.append((f"ceiling {n}", n, ceil_r, FRAMESKIP * ceil_r, "", ""))
        loop_r = median(rates[f"loop {n}"])
        results[f"loop {n}"] = {
            "num_envs": n,
            "steps_per_s": loop_r,
            "frames_per_s": FRAMESKIP * loop_r,
            "over_ceiling": median_ratio(rates[f"loop {n}"], ceiling[n]),
        }
        rows.append(
            (
                f"env+policy loop {n}",
                n,
                loop_r,
                FRAMESKIP * loop_r,
                results[f"loop {n}"]["over_ceiling"],
                "",
            )
        )

    print(f"\n{GAME}, Nature-CNN actor-critic, {cores()} cores, torch threads 1 (medians)")
    print_table(["pipeline", "envs", "steps/s", "frames/s", "/ceiling", "/reference"], rows)
    print(
        "ratios: median of per-round paired ratios; pipelines with 16 simulators are compared\n"
        "with the 16-env ceiling (async8 and 2x8 overlap simulation and inference, so they can\n"
        "pass it: for them the ratio is informative, not a target)"
    )
    checks = [("accelrl 8", "over_ceiling", CEILING_TARGET)]
    checks += [("accelrl 16", "over_ceiling", CEILING_TARGET)]
    checks += [(name, "over_reference", REFERENCE_TARGET) for name, *_ in ACCELRL_PIPELINES]
    for name, key, target in checks:
        value = results.get(name, {}).get(key)
        if value is not None:  # None: pipeline not run
            what = "ceiling" if key == "over_ceiling" else "reference"
            print(f"{name} / {what} = {value:.2f} (target >= {target}): {verdict(value, target)}")
    for n in (8, 16):
        c = results[f"ceiling {n}"]
        print(
            f"{n} envs: inference {c['inference_ms_per_batch']:.1f} ms per batched step, "
            f"env {1e3 * n / c['env_steps_per_s']:.1f} ms per batched step"
        )
    payload = {
        **machine_info(),
        "game": GAME,
        "steps_per_env_per_batch": STEPS_PER_ENV,
        "results": results,
        "per_round": rates,
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
