"""RMSprop as TensorFlow computes it, which the A2C/A3C papers' settings assume.

PyTorch's ``torch.optim.RMSprop`` adds epsilon outside the square root and starts its running
average of squared gradients at zero; TensorFlow adds it inside (``g / sqrt(v + eps)``) and
starts the average at one. With the papers' eps = 1e-5 the PyTorch form takes far larger steps
while the average is small, and A2C on CartPole collapsed with it
(docs/development-notes.md#optimisers).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class RMSpropTF(torch.optim.Optimizer):
    """RMSprop with TensorFlow's epsilon placement and a running average initialised to one."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 7e-4,
        alpha: float = 0.99,
        eps: float = 1e-5,
    ) -> None:
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 (torch.optim.Optimizer API)
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.ones_like(p)
                avg = state["square_avg"]
                avg.mul_(group["alpha"]).addcmul_(p.grad, p.grad, value=1 - group["alpha"])
                p.addcdiv_(p.grad, avg.add(group["eps"]).sqrt_(), value=-group["lr"])
        return loss


def adam(params: Iterable[torch.nn.Parameter], lr: float, eps: float) -> torch.optim.Adam:
    """PyTorch's Adam with its fused kernel (CPU and CUDA): one kernel for every parameter
    instead of a dozen small ops per tensor, the faster step on a CPU
    (docs/development-notes.md#pytorch-and-the-platform); the arithmetic is Adam's, to float
    rounding."""
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
