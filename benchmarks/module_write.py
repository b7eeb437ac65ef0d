"""Policy forward: accelrl's acting module, its direct-write TensorDict modules, and plain
``TensorDictModule``.

    python -m benchmarks.module_write [--seconds 2] [--rounds 7] [--no-collector]

``TensorDictModule`` passes each output through ``TensorDict.from_any``, which looks pandas up
on ``sys.path`` on every call (tensordict 0.14); accelrl's actor-critic modules write their
tensors directly (``accelrl.models._DirectWrite``). The learners collect with
``accelrl.models.acting_policy``: trunk, heads and the action draw in one module instead of the
``ActorValueOperator``'s seven nested TensorDict modules. All variants are the same network with
the same weights and draw the same actions; rounds alternate and each ratio is the median of
per-round ratios. The second table runs three in-process Pong collectors (8 simulators, 64 steps
per batch), one with each variant, in alternating rounds.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import time

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import ValueOperator

from accelrl.models import (
    DirectTensorDictModule,
    DirectValueOperator,
    acting_policy,
    make_actor_critic,
)
from benchmarks.common import median, median_ratio, print_table, run_rounds, time_steps


def plain_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The same modules and weights with TensorDict's own write path."""
    plain = copy.deepcopy(model)
    for module in plain.modules():
        if type(module) is DirectTensorDictModule:
            module.__class__ = TensorDictModule
        elif type(module) is DirectValueOperator:
            module.__class__ = ValueOperator
    return plain


def cases(batch: int) -> dict[str, tuple[torch.nn.Module, TensorDict]]:
    frames = make_actor_critic("pixels", (4, 84, 84), 6)
    vector = make_actor_critic("observation", (4,), 2)
    pixels = TensorDict(
        {"pixels": torch.randint(0, 255, (batch, 4, 84, 84), dtype=torch.uint8)}, [batch]
    )
    obs = TensorDict({"observation": torch.randn(batch, 4)}, [batch])
    return {
        f"Nature CNN actor+value, batch {batch}": (frames, pixels),
        f"CartPole MLP actor+value, batch {batch}": (vector, obs),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--no-collector", dest="collector", action="store_false", help="skip the collector A/B"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    t = time.perf_counter()
    for _ in range(2000):
        importlib.util.find_spec("pandas")
    print(f"importlib.util.find_spec('pandas'): {(time.perf_counter() - t) / 2000 * 1e6:.0f} us")
    rows = []
    for name, (model, td) in cases(args.batch).items():
        plain = plain_copy(model)

        def segment(m: torch.nn.Module, td: TensorDict = td):
            def run(seconds: float) -> tuple[int, float]:
                with torch.no_grad():
                    return time_steps(lambda: m(td.clone(False)), 1, seconds)

            return run

        acting = acting_policy(model)
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):  # same draws
            outs = []
            for variant in (model, plain, acting):
                torch.manual_seed(0)
                outs.append(variant(td.clone(False)))
        keys = ("action", "action_log_prob", "state_value")
        assert all(torch.equal(o[k], outs[0][k]) for o in outs for k in keys)
        rates = run_rounds(
            {"acting": segment(acting), "direct": segment(model), "plain": segment(plain)},
            args.rounds,
            args.seconds,
        )
        rows.append(
            [
                name,
                f"{1e6 / median(rates['acting']):.0f}",
                f"{1e6 / median(rates['direct']):.0f}",
                f"{1e6 / median(rates['plain']):.0f}",
                f"{median_ratio(rates['acting'], rates['direct']):.3f}",
                f"{median_ratio(rates['direct'], rates['plain']):.3f}",
            ]
        )
    print_table(
        [
            "forward",
            "acting us",
            "direct us",
            "TensorDictModule us",
            "acting/direct speed",
            "direct/plain speed",
        ],
        rows,
    )
    if args.collector:
        collector_ab(args.rounds, 2 * args.seconds)


def collector_ab(rounds: int, seconds: float) -> None:
    from accelrl.collectors import make_collector, plan_threads
    from accelrl.config import CollectorConfig, EnvConfig, ThreadsConfig
    from benchmarks.collector_throughput import collector_segment, make_policy

    policy = make_policy(6)
    variants = {"acting": acting_policy(policy), "direct": policy, "plain": plain_copy(policy)}
    collectors, segments = {}, {}
    for seed, (name, variant) in enumerate(variants.items()):
        collectors[name] = make_collector(
            EnvConfig(game="Pong", num_envs=8),
            CollectorConfig(num_workers=0, steps_per_batch=8 * 64),
            variant,
            seed=seed,
            plan=plan_threads(ThreadsConfig(), 0),
            learner_device="cpu",
        )
        it = iter(collectors[name])
        next(it)  # the first batch holds the simulators' start
        segments[name] = collector_segment(it, 8 * 64, prime=True)
    torch.set_num_threads(1)
    try:
        rates = run_rounds(segments, rounds, seconds)
    finally:
        for c in collectors.values():
            c.shutdown()
    print_table(
        [
            "in-process Pong collector, 8 simulators",
            "acting steps/s",
            "direct steps/s",
            "plain steps/s",
            "acting/direct",
            "direct/plain",
        ],
        [
            [
                "Nature CNN policy",
                f"{median(rates['acting']):,.0f}",
                f"{median(rates['direct']):,.0f}",
                f"{median(rates['plain']):,.0f}",
                f"{median_ratio(rates['acting'], rates['direct']):.3f}",
                f"{median_ratio(rates['direct'], rates['plain']):.3f}",
            ]
        ],
    )


if __name__ == "__main__":
    main()
