"""``accelrl.optim``'s optimizer step and gradient clipping as direct kernel calls: the same
results as PyTorch's own ``Adam.step`` and ``clip_grad_norm_``, bit for bit, and PyTorch's
own call wherever the direct one does not apply."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from accelrl import optim


def pair(**adam) -> tuple[list[nn.Module], list[torch.optim.Adam]]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))
    nets = [net, copy.deepcopy(net)]
    return nets, [torch.optim.Adam(n.parameters(), fused=True, **adam) for n in nets]


def set_grads(net: nn.Module, seed: int, scale: float = 1.0) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p in net.parameters():
        p.grad = torch.randn(p.shape, generator=gen) * scale


def counted(opt: torch.optim.Optimizer) -> list[int]:
    """Count PyTorch's own ``opt.step()`` calls."""
    calls = [0]
    own = opt.step

    def step(*args, **kwargs):
        calls[0] += 1
        return own(*args, **kwargs)

    opt.step = step
    return calls


@pytest.mark.parametrize("adam", [dict(lr=1e-2), dict(lr=3e-3, eps=1e-5, weight_decay=0.1)])
def test_adam_step_equals_pytorchs_bit_for_bit(adam):
    """Four steps, the learning rate changed between them (as PPO's annealing does): the same
    weights and moments; PyTorch's own step runs only for the first, which creates the state."""
    (mine, theirs), (opt_mine, opt_theirs) = pair(**adam)
    calls = counted(opt_mine)
    for step in range(4):
        for net in (mine, theirs):
            set_grads(net, step)
        if step == 2:
            for opt in (opt_mine, opt_theirs):
                opt.param_groups[0]["lr"] *= 0.5
        optim.step(opt_mine)
        opt_theirs.step()
    assert calls == [1]
    for a, b in zip(mine.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
    for p, q in zip(mine.parameters(), theirs.parameters(), strict=True):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt_mine.state[p][key], opt_theirs.state[q][key])


def test_adam_step_takes_pytorchs_call_where_the_direct_one_does_not_apply():
    """Two parameter groups, a parameter without a gradient, a step hook, amsgrad: PyTorch's
    own step, with its results."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 16), nn.Linear(16, 3))
    groups = [{"params": net[0].parameters()}, {"params": net[1].parameters(), "lr": 1e-3}]
    cases = [
        torch.optim.Adam(groups, lr=1e-2, fused=True),
        torch.optim.Adam(net.parameters(), lr=1e-2, fused=True, amsgrad=True),
        torch.optim.Adam(net.parameters(), lr=1e-2),  # foreach, not fused
    ]
    hooked = torch.optim.Adam(net.parameters(), lr=1e-2, fused=True)
    hooked.register_step_post_hook(lambda *args: None)
    cases.append(hooked)
    for opt in cases:
        calls = counted(opt)
        for step in range(2):
            set_grads(net, step)
            optim.step(opt)
        assert calls == [2]
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, fused=True)
    calls = counted(opt)
    for step in range(2):
        set_grads(net, step)
        net[0].bias.grad = None
        optim.step(opt)
    assert calls == [2]


@pytest.mark.parametrize("scale", [10.0, 1e-3], ids=["clipped", "under-the-limit"])
def test_clip_grad_norm_equals_pytorchs_bit_for_bit(scale):
    """The norm before clipping and the clipped gradients, above and below the limit."""
    (mine, theirs), _ = pair()
    for net in (mine, theirs):
        set_grads(net, 7, scale)
    norm = optim.clip_grad_norm(list(mine.parameters()), 0.5)
    want = torch.nn.utils.clip_grad_norm_(list(theirs.parameters()), 0.5)
    assert torch.equal(norm, want)
    for a, b in zip(mine.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert (norm > 0.5) == (scale == 10.0)


def test_zero_grad_sets_every_gradient_to_none():
    (net, _), (opt, _) = pair()
    set_grads(net, 0)
    optim.zero_grad(opt)
    assert all(p.grad is None for p in net.parameters())
