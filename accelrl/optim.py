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


# ----- the step's calls without their wrappers -----------------------------------------------
# On a small network the wrappers around the kernels cost about as much as the kernels: an
# optimizer step passes through hooks, profiler scopes and per-step grouping of the tensors by
# device and dtype, the clipping groups them again (docs/results/speed.md#the-dqn-update-next-
# to-the-plain-loops). Where every tensor is on one device in one dtype, the calls below run
# the same kernels on the same tensors in the same order, so the results are the same bit for
# bit (tests/test_optim.py); anything else takes PyTorch's own call.


def zero_grad(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad(set_to_none=True)``."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None


def _one_group(tensors: list[torch.Tensor]) -> bool:
    first = tensors[0]
    return first.device.type in ("cpu", "cuda") and all(
        t.device == first.device and t.dtype == first.dtype and not t.is_sparse for t in tensors
    )


def clip_grad_norm(parameters: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_(parameters, max_norm)``: the 2-norm of all gradients
    together, returned before the gradients are scaled down to at most ``max_norm``."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads or not _one_group(grads):
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    # _get_total_norm then _clip_grads_with_norm_, foreach kernels, one device and dtype
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
    return total


def _hooked(optimizer: torch.optim.Optimizer) -> bool:
    """Step hooks to run: the optimizer's own, or every optimizer's."""
    from torch.optim import optimizer as module

    return bool(
        optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or module._global_optimizer_pre_hooks
        or module._global_optimizer_post_hooks
    )


def step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``; for a fused Adam (``adam``) with one parameter group whose
    parameters all have a gradient and a state (every step after the first), the step's own
    two kernel calls."""
    groups = optimizer.param_groups
    group = groups[0]
    params = group["params"]
    if (
        type(optimizer) is not torch.optim.Adam
        or len(groups) != 1
        or not group["fused"]
        or group["amsgrad"]
        or group["maximize"]
        or group["capturable"]
        or group["differentiable"]
        or group["decoupled_weight_decay"]
        or any(isinstance(group[k], torch.Tensor) for k in ("lr", "eps", "weight_decay"))
        or any(isinstance(beta, torch.Tensor) for beta in group["betas"])
        or _hooked(optimizer)
    ):
        optimizer.step()
        return
    state = optimizer.state
    grads = [p.grad for p in params]
    if any(g is None for g in grads) or any(p not in state for p in params):
        optimizer.step()  # the first step creates the state
        return
    states = [state[p] for p in params]
    if not _one_group([*params, *grads]) or params[0].is_complex():
        optimizer.step()
        return
    steps = [s["step"] for s in states]
    beta1, beta2 = group["betas"]
    with torch.no_grad():  # as Optimizer.step
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params,
            grads,
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            steps,
            amsgrad=False,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )
