"""What the plain Atari and CartPole loops share: a recipe config's batch layout, the refusal of
settings a loop does not implement, seeding, learning-rate setting, orthogonal init, RMSprop in
TensorFlow's form, the replay ring with its numpy sum tree, and C51's target projection."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from accelrl.config import rows_per_batch  # config arithmetic (accelrl.config is data only)

if TYPE_CHECKING:  # the recipes' config dataclasses, for annotations only
    from accelrl.algos.dqn import DQNConfig


def batch_layout(cfg: Any) -> tuple[int, int]:
    """(simulators, steps of each) in one batch of a recipe's config: ``steps_per_batch`` agent
    steps over every env of every worker (one worker's envs with collector kind async), all in
    this process for a plain loop."""
    envs = rows_per_batch(cfg.env, cfg.collector)
    if cfg.collector.steps_per_batch % envs:
        raise ValueError(
            f"collector.steps_per_batch={cfg.collector.steps_per_batch} is not a multiple of the "
            f"{envs} simulators of a batch"
        )
    return envs, cfg.collector.steps_per_batch // envs


def require(section: str, values: Any, **implemented: Any) -> None:
    """``ValueError`` for a setting the plain loop does not implement (``section.name`` away from
    the one value it does)."""
    for name, value in implemented.items():
        if getattr(values, name) != value:
            raise ValueError(
                f"{section}.{name}={getattr(values, name)!r}: the plain loop implements only "
                f"{value!r}"
            )


def seed_all(seed: int) -> None:
    """Seeds torch (weights, actions) and numpy (the DQN loops' exploration and replay)."""
    torch.manual_seed(seed)
    np.random.seed(seed)


def anneal_lr(opt: torch.optim.Optimizer, s: Any, done: float) -> float:
    """Sets ``opt``'s learning rate to ``s.lr``, times the part of the budget left when
    ``s.anneal_lr``; returns that part, ``1 - done`` (at least 0). ``done``: the part run."""
    remaining = max(0.0, 1.0 - done)
    for group in opt.param_groups:
        group["lr"] = s.lr * (remaining if s.anneal_lr else 1.0)
    return remaining


def clipped_step(
    opt: torch.optim.Optimizer, loss: torch.Tensor, params: Iterable[nn.Parameter], max_norm: float
) -> torch.Tensor:
    """One optimizer step on ``loss`` with the gradients' global norm clipped to ``max_norm``;
    returns the norm before clipping."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    return grad_norm


def orth(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    """Orthogonal weights, zero bias: the init of OpenAI baselines and CleanRL, and the recipes'
    (``accelrl.models``). With PyTorch's default init instead, the plain Atari A2C loop (Adam)
    stayed at random play on Breakout for 1M frames while the recipe reached 5.5."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class RMSpropTF(torch.optim.Optimizer):
    """RMSprop as TensorFlow computes it: ``g / sqrt(v + eps)`` with the running average ``v``
    of squared gradients initialised to one (the maths of ``accelrl.optim.RMSpropTF``, written
    again here: the reference does not run accelrl's code). OpenAI baselines' A2C uses it;
    PyTorch's form (eps outside the root, average from zero) takes far larger early steps."""

    def __init__(
        self, params: Iterable[nn.Parameter], lr: float, alpha: float = 0.99, eps: float = 1e-5
    ) -> None:
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102
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


# --- replay -----------------------------------------------------------------------------------


class SumTree:
    """Sums of priorities over a power-of-two leaf array; vectorised updates and lookups."""

    def __init__(self, size: int) -> None:
        self.leaves = 1 << max(0, (size - 1).bit_length())
        self.tree = np.zeros(2 * self.leaves)

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        pos = np.asarray(idx) + self.leaves
        self.tree[pos] = values
        pos = np.unique(pos // 2)
        while pos[0] >= 1:
            self.tree[pos] = self.tree[2 * pos] + self.tree[2 * pos + 1]
            if pos[0] == 1:
                break
            pos = np.unique(pos // 2)

    def get(self, idx: np.ndarray) -> np.ndarray:
        return self.tree[idx + self.leaves]

    def total(self) -> float:
        return float(self.tree[1])

    def find(self, mass: np.ndarray) -> np.ndarray:
        pos = np.ones(len(mass), dtype=np.int64)
        while pos[0] < self.leaves:
            left = 2 * pos
            right = mass > self.tree[left]
            mass = mass - right * self.tree[left]
            pos = left + right
        return pos - self.leaves


class Ring:
    """The positions of a replay that keeps ``replay_capacity / N`` vector steps per simulator in
    a ring (the arrays are the loop's own): step ``p`` of simulator ``e`` is flat index
    ``(p % L) * N + e``. A step is sampled only once its n - 1 successors are stored; with
    ``prioritized`` its leaf stays 0 until then and gets the largest priority seen so far.
    ``d``: the recipe's ``cfg.dqn``."""

    def __init__(self, d: DQNConfig, num_envs: int) -> None:
        self.s, self.n = d, num_envs
        self.len = max(d.n_step + 1, d.replay_capacity // num_envs)
        self.written = 0  # vector steps stored so far
        self.tree = SumTree(self.len * num_envs) if d.prioritized else None
        self.max_priority = 1.0

    def next_slot(self) -> int:
        """The ring position for the vector step being stored, which then counts as written."""
        p = self.written % self.len
        self.written += 1
        if self.tree is not None:
            envs = np.arange(self.n)
            self.tree.set(p * self.n + envs, np.zeros(self.n))  # not sampleable until n-step
            ready = self.written - self.s.n_step
            if ready >= 0:
                q = ready % self.len
                value = self.max_priority**self.s.priority_alpha
                self.tree.set(q * self.n + envs, np.full(self.n, value))
        return p

    def uniform(self, batch: int) -> np.ndarray:
        """``batch`` flat indices drawn uniformly (numpy's global RNG) from the sampleable
        steps."""
        lo, hi = max(0, self.written - self.len), self.written - self.s.n_step
        steps = np.random.randint(lo, hi + 1, size=batch)
        return (steps % self.len) * self.n + np.random.randint(0, self.n, size=batch)


def c51_target(
    p_next: torch.Tensor,
    ret: torch.Tensor,
    discount: torch.Tensor,
    support: torch.Tensor,
    d: DQNConfig,
) -> torch.Tensor:
    """C51's target distribution ``[B, atoms]``: each atom z of ``support`` moved to
    ``ret + discount * z``, clamped to [v_min, v_max] and its probability in ``p_next`` split
    between the two atoms around it. ``d``: the recipe's ``cfg.dqn``."""
    dz = (d.v_max - d.v_min) / (d.atoms - 1)
    tz = (ret[:, None] + discount[:, None] * support).clamp(d.v_min, d.v_max)
    b = ((tz - d.v_min) / dz).clamp(0, d.atoms - 1)
    lo, hi = b.floor().long(), b.ceil().long()
    m = torch.zeros_like(p_next)
    # b on an atom (lo == hi): all of its mass goes to that atom.
    m.scatter_add_(1, lo, p_next * (hi.float() - b + (lo == hi).float()))
    m.scatter_add_(1, hi, p_next * (b - lo.float()))
    return m


def q_values(
    net: nn.Module, obs: torch.Tensor, support: torch.Tensor, d: DQNConfig
) -> torch.Tensor:
    """Q-values ``[B, A]`` of a DQN-family network: its output, or with ``d.distributional`` the
    expected value of its C51 distributions over ``support``."""
    out = net(obs)
    return (out.softmax(-1) * support).sum(-1) if d.distributional else out


def dqn_losses(
    online: nn.Module,
    target: nn.Module,
    batch: tuple[torch.Tensor, ...],
    support: torch.Tensor,
    d: DQNConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample losses and new priorities of a DQN-family update on ``batch`` = (obs, action,
    n-step return, bootstrap obs, bootstrap discount). With ``d.distributional``, C51's
    cross-entropy against ``c51_target``: as TorchRL's ``DistributionalDQNLoss`` (the recipe's),
    the online network picks the bootstrap action whatever ``d.double`` says, the target scores
    it. Otherwise the Huber loss against ``return + discount * Q_target(next obs, a)``, ``a`` the
    online network's choice with ``d.double``, the target's own best otherwise."""
    obs, action, ret, next_obs, discount = batch
    rows = torch.arange(len(action), device=action.device)
    if d.distributional:
        with torch.no_grad():
            best = q_values(online, next_obs, support, d).argmax(-1)
            p_next = target(next_obs).softmax(-1)[rows, best]  # [B, atoms]
            m = c51_target(p_next, ret, discount, support, d)
        log_p = online(obs)[rows, action].log_softmax(-1)
        per_sample = -(m * log_p).sum(-1)
        return per_sample, per_sample.detach()
    with torch.no_grad():
        next_q = target(next_obs)
        if d.double:
            bootstrap = next_q[rows, online(next_obs).argmax(-1)]
        else:
            bootstrap = next_q.max(-1).values
        y = ret + discount * bootstrap
    q = online(obs)[rows, action]
    return F.smooth_l1_loss(q, y, reduction="none"), (q - y).detach().abs()
