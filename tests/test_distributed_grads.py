"""Gradient averaging over ranks, checked against one process on the whole batch: two gloo
ranks (spawned here, free port) each take half of a batch; after ``gradient_step`` both hold
the weights a single process reaches with the full batch (a sum instead of a mean would double
the step)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.helpers import free_port
from tests.numerics import TIGHT


def model_and_batch() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A small float64 network and batch: the two sides sum the batch's gradients in different
    orders (two halves, then an all-reduce), equal to ~1e-15 in float64 on any host."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1))
    x, y = torch.randn(16, 5), torch.randn(16, 1)
    return model.double(), x.double(), y.double()


def step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    from accelrl.algos.common import NonFiniteGuard, gradient_step

    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = torch.nn.functional.mse_loss(model(x), y)
    # A large max norm: clipping would hide a factor of two.
    gradient_step(opt, loss, list(model.parameters()), 1e6, NonFiniteGuard())


def join(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=30))


def leave(result: object, path: str) -> None:
    """Write this rank's result, then leave together and skip interpreter teardown.

    The result file is what the test checks; the exit code must not depend on teardown: in
    about one spawn in a hundred (CI, loaded machine) a gloo rank that had already destroyed its
    process group still aborted during interpreter finalization ("terminate called without an
    active exception", SIGABRT, no Python frame). A barrier first makes both ranks finish their
    collectives before either tears down; ``os._exit`` then skips the C++ static destructors.
    """
    torch.save(result, path)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def rank_main(rank: int, port: int, out: str) -> None:
    join(rank, port)
    model, x, y = model_and_batch()
    half = slice(8 * rank, 8 * (rank + 1))
    step(model, x[half], y[half])
    leave(model.state_dict(), f"{out}/rank{rank}.pt")


@pytest.mark.numerics
def test_two_ranks_step_like_one_process_on_the_whole_batch(tmp_path):
    mp.spawn(rank_main, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    single, x, y = model_and_batch()
    step(single, x, y)
    for rank in (0, 1):
        state = torch.load(tmp_path / f"rank{rank}.pt")
        for name, value in single.state_dict().items():
            torch.testing.assert_close(state[name], value, **TIGHT)


def nan_rank_main(rank: int, port: int, out: str, policy: str) -> None:
    """Three steps; rank 1's loss is NaN in the second. Records what each rank saw."""
    from accelrl.algos import common

    join(rank, port)
    guard = common.NonFiniteGuard(policy)
    record = {"error": None}
    try:
        model, x, y = model_and_batch()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        half = slice(8 * rank, 8 * (rank + 1))
        for i in range(3):
            loss = torch.nn.functional.mse_loss(model(x[half]), y[half])
            if rank == 1 and i == 1:
                loss = loss * float("nan")
            common.gradient_step(opt, loss, list(model.parameters()), 1e6, guard)
    except common.NonFiniteError as err:
        record["error"] = str(err)
    record["skipped"] = guard.skipped
    record["state"] = model.state_dict()
    leave(record, f"{out}/rank{rank}.pt")


def test_nan_on_one_rank_is_skipped_by_all_ranks_together(tmp_path):
    mp.spawn(nan_rank_main, args=(free_port(), str(tmp_path), "skip"), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert r0["skipped"] == r1["skipped"] == 1, (r0["skipped"], r1["skipped"])
    # Still in step: the same weights on both ranks (a rank that skipped the all-reduce alone
    # would pair its next all-reduce with the other's previous one).
    for name, value in r0["state"].items():
        assert torch.equal(value, r1["state"][name]), name


def test_nan_on_one_rank_stops_every_rank(tmp_path):
    mp.spawn(nan_rank_main, args=(free_port(), str(tmp_path), "stop"), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert r1["error"].startswith("loss is nan (non-finite)"), r1["error"]
    assert "another rank" in r0["error"], r0["error"]


@pytest.mark.parametrize("rule,factor", [("none", 1.0), ("linear", 4.0), ("sqrt", 2.0)])
def test_learning_rate_scaling_rules(rule, factor):
    """The factor for 4 ranks reaches the optimizer each recipe builds; the config is left as
    given (config.json records the flags, the factor is under ``resolved``)."""
    import importlib

    from accelrl.process import lr_scale

    assert lr_scale(4, rule) == pytest.approx(factor)
    assert lr_scale(1, rule) == 1.0  # one rank: unchanged
    spec = {"obs_key": "observation", "obs_shape": (4,), "num_actions": 2}
    for name, section in [("ppo_atari", "ppo"), ("a2c_atari", "a2c"), ("dqn_atari", "dqn")]:
        recipe = importlib.import_module(f"recipes.{name}")
        cfg = recipe.Config()
        agent = recipe.ALGORITHM.make_agent(
            cfg, spec, torch.device("cpu"), lr_scale=lr_scale(4, rule)
        )
        base = getattr(recipe.Config(), section).lr
        assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(base * factor), name
        assert getattr(cfg, section).lr == base
