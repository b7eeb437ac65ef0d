"""DQN update speed: the recipe's gradient step next to the plain loop's, as updates/s and as
time per phase.

On a small network most of a DQN gradient step is work around the arithmetic (replay sampling,
loss bookkeeping, optimizer calls, priority writes), so this measures the update alone: no
simulators, the same random transitions (8 simulators x 1,250 steps) written to both sides'
replays, then one update = one replay sample, the loss, backward, the clipped Adam step, the
target update when due and the priority write-back, exactly as each loop runs it:

- recipe: ``accelrl.replay.memory.FrameReplay.sample`` -> ``accelrl.algos.dqn.DQN.update`` ->
  ``FrameReplay.update_priority`` (the recipe's loop in ``recipes/dqn_atari.py``);
- plain: ``reference.classic.DQNUpdate`` (numpy ring, ``dqn_losses``, ``torch.optim.Adam``).

Networks: ``cartpole``, RL-zoo's CartPole DQN (256x256 ReLU MLP, batch 64; the plain loop's
own ``QNet``), and ``minatar``, MinAtar's DQN (the MinAtar CNN of ``accelrl.models.QNetwork``
on 4x10x10 grids, batch 32, 3 actions; the same ``nn.Module`` on both sides, since the
reference has no MinAtar loop). Variants: ``dqn`` (uniform replay, 1-step, expected value)
and ``rainbow`` (double, dueling, 3-step, prioritized, C51).

Each side runs at 1 thread and at every core; the plain side also with subnormals flushed
(``+ftz``, which the recipe always does) and with the fused Adam kernel (``+fused``, the
recipe's). Rounds alternate all configurations in one process; the ratio is, per round, the
recipe's best configuration over the plain loop's best, and the median over rounds is quoted.
``--split N`` then times N updates of both sides' best configurations phase by phase.
``--autograd`` adds the recipe's update as it ran before 2026-12-07 (the gradient through
autograd, PyTorch's own clipping and optimizer step; the same results) in the same rounds, and
the recipe's rate over it.

    python -m benchmarks.dqn_update [--nets cartpole minatar] [--variants dqn rainbow] \
        [--rounds 5] [--seconds 8] [--split 500] [--threads 1 2] [--autograd] [--json PATH]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from accelrl import optim
from accelrl.algos.dqn import DQN, PRESETS, DQNConfig
from accelrl.models import QNetwork
from accelrl.replay.memory import FrameReplay
from benchmarks.common import cores, machine_info, median, paired_rates, print_table, write_json
from reference.cartpole_presets import DQN_CARTPOLE, DQN_VARIANTS
from reference.classic import DQNUpdate, QNet, Replay

NUM_ENVS, STEPS = 8, 1250
BETA = 0.4
TARGETS = {"cartpole": 1.5, "minatar": 1.2}
"""The recipe's updates/s over the plain loop's, each at its best setting."""


@dataclass(frozen=True)
class Net:
    obs_shape: tuple[int, ...]
    obs_dtype: torch.dtype
    num_actions: int
    settings: dict[str, Any]


NETS = {
    "cartpole": Net((4,), torch.float32, 2, DQN_CARTPOLE),
    "minatar": Net((4, 10, 10), torch.uint8, 3, {**PRESETS["minatar"], "batch_size": 32}),
}
VARIANTS = ("dqn", "rainbow")


def settings(net: str, variant: str) -> DQNConfig:
    """``net``'s DQN settings with ``variant``'s flags (MinAtar keeps C51's default support)."""
    flags = dict(DQN_VARIANTS[variant])
    if net != "cartpole":
        flags = {k: v for k, v in flags.items() if k not in ("v_min", "v_max")}
    return DQNConfig(**{**NETS[net].settings, **flags})


def transitions(net: Net, seed: int = 0) -> TensorDict:
    """Random transitions ``[NUM_ENVS, STEPS]``: observations of the net's shape, uniform
    actions and rewards, episode ends (terminal or truncated) about every 100 steps."""
    g = torch.Generator().manual_seed(seed)
    shape = (NUM_ENVS, STEPS)

    def obs() -> torch.Tensor:
        if net.obs_dtype == torch.uint8:
            return torch.randint(0, 2, (*shape, *net.obs_shape), generator=g, dtype=torch.uint8)
        return torch.randn(*shape, *net.obs_shape, generator=g)

    ended = torch.rand(*shape, 1, generator=g) < 0.01
    terminated = ended & (torch.rand(*shape, 1, generator=g) < 0.5)
    return TensorDict(
        {
            "observation": obs(),
            "action": torch.randint(net.num_actions, shape, generator=g),
            "next": {
                "observation": obs(),
                "reward": torch.rand(*shape, 1, generator=g),
                "done": ended,
                "terminated": terminated,
                "truncated": ended & ~terminated,
            },
        },
        shape,
    )


class ActionsFirst(torch.nn.Module):
    """A ``QNetwork`` with C51 logits laid out ``[B, actions, atoms]``, as the plain loop's
    networks give them (TorchRL's modules, and so ``QNetwork``, put the atoms first)."""

    def __init__(self, net: QNetwork) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(obs)
        return out.transpose(-1, -2) if self.net.atoms > 1 else out


def network(net: str, d: DQNConfig) -> torch.nn.Module:
    """The plain side's network: the plain loop's MLP, or the MinAtar CNN module."""
    atoms = d.atoms if d.distributional else 1
    spec = NETS[net]
    if net == "cartpole":
        return QNet(spec.obs_shape[0], spec.num_actions, (256, 256), d.dueling, atoms)
    return ActionsFirst(QNetwork(spec.obs_shape, spec.num_actions, dueling=d.dueling, atoms=atoms))


def plain_side(net: str, d: DQNConfig, td: TensorDict, fused: bool) -> DQNUpdate:
    """The plain loop's update over its numpy ring, filled with ``td`` step by step."""
    spec = NETS[net]
    flat = int(np.prod(spec.obs_shape))
    replay = Replay(d, NUM_ENVS, flat)
    nxt = td["next"]
    obs = td["observation"].reshape(NUM_ENVS, STEPS, flat).float().numpy()
    next_obs = nxt["observation"].reshape(NUM_ENVS, STEPS, flat).float().numpy()
    action, reward = td["action"].numpy(), nxt["reward"].squeeze(-1).numpy()
    term, done = nxt["terminated"].squeeze(-1).numpy(), nxt["done"].squeeze(-1).numpy()
    for t in range(STEPS):
        replay.add(obs[:, t], action[:, t], reward[:, t], next_obs[:, t], term[:, t], done[:, t])
    torch.manual_seed(0)
    return DQNUpdate(network(net, d), replay, d, spec.obs_shape, fused_adam=fused)


PYTORCHS_CALLS = (
    lambda opt: opt.step(),
    torch.nn.utils.clip_grad_norm_,
    lambda opt: opt.zero_grad(set_to_none=True),
)
"""``accelrl.optim``'s ``step``, ``clip_grad_norm`` and ``zero_grad`` as PyTorch's own calls."""


class RecipeSide:
    """The recipe's replay and learner, updated as ``recipes/dqn_atari.py`` does; with
    ``autograd``, as it was before 2026-12-07: the gradient through autograd, and PyTorch's own
    clipping, optimizer step and gradient reset (the same results, bit for bit)."""

    def __init__(self, net: str, d: DQNConfig, td: TensorDict, autograd: bool = False) -> None:
        spec = NETS[net]
        self.replay = FrameReplay(
            capacity=d.replay_capacity,
            n_step=d.n_step,
            prioritized=d.prioritized,
            alpha=d.priority_alpha,
            beta=d.priority_beta,
            num_envs=NUM_ENVS,
            obs_key="observation",
            obs_shape=spec.obs_shape,
            stack=1,
            gamma=d.gamma,
        )
        for t0 in range(0, STEPS, 50):
            self.replay.extend(td[:, t0 : t0 + 50])
        torch.manual_seed(0)
        self.dqn = DQN(
            d,
            obs_key="observation",
            obs_shape=spec.obs_shape,
            num_actions=spec.num_actions,
            device=torch.device("cpu"),
            mlp_hidden=(256, 256),
        )
        self.batch = d.batch_size
        self.autograd = autograd
        if autograd:
            self.dqn._chain = None

    def __call__(self, lap: Callable[[str], None] | None = None) -> None:
        """One update; with ``lap``, the same steps as ``DQN.update`` taken one at a time
        (``tests/test_benchmarks.py`` holds the two to the same weights) and timed."""
        if not self.autograd:
            return self._update(lap)
        mine = (optim.step, optim.clip_grad_norm, optim.zero_grad)
        optim.step, optim.clip_grad_norm, optim.zero_grad = PYTORCHS_CALLS
        try:
            return self._update(lap)
        finally:
            optim.step, optim.clip_grad_norm, optim.zero_grad = mine

    def _update(self, lap: Callable[[str], None] | None) -> None:
        sample = self.replay.sample(self.batch, beta=BETA)
        if lap is None:
            priority = self.dqn.update(sample)
        else:
            priority = self._update_in_phases(sample, lap)
        if priority is not None:
            self.replay.update_priority(sample.get("index"), priority)
        if lap is not None:
            lap("priority update")

    def _update_in_phases(self, sample: TensorDictBase, lap: Callable[[str], None]) -> torch.Tensor:
        dqn = self.dqn
        lap("sample")
        loss, priority, backward = dqn.terms(sample)  # backward None: autograd's
        lap("forward and loss")
        optim.zero_grad(dqn.optimizer)
        (backward or loss.backward)()
        lap("backward")
        norm = optim.clip_grad_norm(dqn.params, dqn.cfg.max_grad_norm)
        if not np.isfinite((norm + loss.detach()).item()):
            raise FloatingPointError("non-finite loss or gradient in the benchmark")
        optim.step(dqn.optimizer)
        lap("clip and optimizer step")
        dqn.target.step()
        lap("target update")
        return priority


class Laps:
    """Seconds spent in each named phase, summed over calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = 0.0

    def start(self) -> None:
        self._last = time.perf_counter()

    def __call__(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._last
        self._last = now


def with_threads(step: Callable[[], None], threads: int, ftz: bool) -> Callable[[], None]:
    """``step`` run at ``threads`` torch threads, with subnormals flushed or not."""

    def run() -> None:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_flush_denormal(ftz)
        step()

    return run


def bench(
    net: str,
    variant: str,
    rounds: int,
    seconds: float,
    split: int,
    verbose: bool,
    thread_counts: list[int],
    autograd: bool = False,
) -> dict[str, Any]:
    """Updates/s of every configuration at each of ``thread_counts``, the paired
    best-over-best ratio and (``split`` > 0) ``split`` updates of each side's best timed phase
    by phase; with ``autograd``, also the recipe's update as before 2026-12-07
    (``RecipeSide(autograd=True)``) and the recipe's rate over it, per round."""
    d = settings(net, variant)
    td = transitions(NETS[net])
    recipe = RecipeSide(net, d, td)
    before = RecipeSide(net, d, td, autograd=True) if autograd else None
    plains = {fused: plain_side(net, d, td, fused) for fused in (False, True)}
    steppers: dict[str, Callable[[], None]] = {}
    for n in thread_counts:
        steppers[f"recipe@{n}"] = with_threads(recipe, n, ftz=True)
        if before is not None:
            steppers[f"autograd@{n}"] = with_threads(before, n, ftz=True)
        for fused, plain in plains.items():
            for ftz in (False, True):
                name = f"plain@{n}" + ("+ftz" if ftz else "") + ("+fused" if fused else "")
                steppers[name] = with_threads(lambda p=plain: p(BETA), n, ftz)
    rates = paired_rates(steppers, 1, rounds, seconds, verbose=verbose)
    mine = [k for k in rates if k.startswith("recipe")]
    theirs = [k for k in rates if k.startswith("plain")]
    per_round = [
        max(rates[k][r] for k in mine) / max(rates[k][r] for k in theirs) for r in range(rounds)
    ]
    best_recipe = max(mine, key=lambda k: median(rates[k]))
    best_plain = max(theirs, key=lambda k: median(rates[k]))
    result: dict[str, Any] = {
        "settings": {"batch_size": d.batch_size, "variant": variant, **DQN_VARIANTS[variant]},
        "updates_per_s": {k: median(v) for k, v in rates.items()},
        "rounds": rates,
        "best_recipe": best_recipe,
        "best_plain": best_plain,
        "ratio_per_round": per_round,
        "ratio": median(per_round),
        "target": TARGETS[net],
    }
    if before is not None:
        olds = [k for k in rates if k.startswith("autograd")]
        gains = [
            max(rates[k][r] for k in mine) / max(rates[k][r] for k in olds) for r in range(rounds)
        ]
        result["over_autograd_per_round"] = gains
        result["over_autograd"] = median(gains)
    if split:
        result["split_us"] = {
            "recipe": time_phases(recipe, best_recipe, split),
            "plain": time_phases(
                (lambda lap, p=plains["+fused" in best_plain]: p(BETA, lap)), best_plain, split
            ),
        }
    return result


def time_phases(update: Callable[..., None], config: str, calls: int) -> dict[str, float]:
    """Microseconds per update in each phase, at ``config``'s threads and flushing."""
    torch.set_num_threads(int(config.split("@")[1].split("+")[0]))
    torch.set_flush_denormal(config.startswith("recipe") or "+ftz" in config)
    laps = Laps()
    for _ in range(calls):
        laps.start()
        update(laps)
    out = {k: 1e6 * v / calls for k, v in laps.seconds.items()}
    return {**out, "total": sum(out.values())}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nets", nargs="+", default=list(NETS), choices=list(NETS))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(DQN_VARIANTS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--seconds", type=float, default=8.0, help="timed seconds per configuration in all"
    )
    p.add_argument("--split", type=int, default=500, help="updates timed phase by phase (0: none)")
    p.add_argument(
        "--threads", type=int, nargs="+", default=None, help="torch threads (default 1 and all)"
    )
    p.add_argument(
        "--autograd",
        action="store_true",
        help="also time the update as before 2026-12-07 (autograd, PyTorch's optimizer calls)",
    )
    p.add_argument("--json", default=None)
    p.add_argument("-v", "--verbose", action="store_true", help="print every round")
    args = p.parse_args(argv)
    np.random.seed(0)
    threads = sorted(set(args.threads or [1, cores()]))
    results: dict[str, Any] = {}
    rows = []
    for net in args.nets:
        for variant in args.variants:
            key = f"{net} {variant}"
            print(f"{key}: {args.rounds} rounds ...", flush=True)
            r = results[key] = bench(
                net, variant, args.rounds, args.seconds, args.split, args.verbose, threads,
                args.autograd,
            )  # fmt: skip
            ups = r["updates_per_s"]
            rows.append(
                [
                    key,
                    f"{r['best_recipe']}",
                    ups[r["best_recipe"]],
                    f"{r['best_plain']}",
                    ups[r["best_plain"]],
                    r["ratio"],
                    _spread(r["ratio_per_round"]),
                    r["target"],
                ]
            )
    print()
    print_table(
        ["net variant", "recipe", "updates/s", "plain", "updates/s", "ratio", "rounds", "target"],
        rows,
    )
    if args.autograd:
        print("\nthe recipe's update over the same update through autograd (before 2026-12-07)")
        print_table(
            ["net variant", "ratio", "rounds"],
            [
                [key, r["over_autograd"], _spread(r["over_autograd_per_round"])]
                for key, r in results.items()
            ],
        )
    if args.split:
        for key, r in results.items():
            print(f"\n{key}: microseconds per update by phase")
            split = r["split_us"]
            phases = list(dict.fromkeys([*split["recipe"], *split["plain"]]))
            print_table(
                ["phase", r["best_recipe"], r["best_plain"]],
                [[ph, split["recipe"].get(ph, 0.0), split["plain"].get(ph, 0.0)] for ph in phases],
            )
    if args.json:
        write_json(args.json, {"machine": machine_info(), "argv": argv, "results": results})
    return results


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def quick_args() -> list[str]:
    """The suite's ``--quick`` sizes: one round of each configuration at one thread, a few
    updates split."""
    return ["--rounds", "1", "--seconds", "0.3", "--split", "20", "--threads", "1"]


if __name__ == "__main__":
    main()
