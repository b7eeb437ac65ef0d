"""A2C update step: TorchRL's ``A2CLoss`` on n-step returns (or GAE), one gradient step a batch.

With ``gae_lambda=1`` the advantages are the n-step returns of each ``T``-step rollout segment
bootstrapped from the value of its last next state, as in Mnih et al. (2016); ``gae_lambda<1``
gives GAE. Life loss is a bootstrap boundary as in PPO (``accelrl.algos.common``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDictBase
from torchrl.modules import ActorValueOperator
from torchrl.objectives import A2CLoss

from accelrl.algos.common import (
    ActorCriticLearner,
    explained_variance,
    loss_metrics,
    set_lr,
    total_loss,
)
from accelrl.errors import ConfigError, check_positive, check_probability
from accelrl.optim import RMSpropTF, adam


@dataclass
class A2CConfig:
    """A2C hyperparameters; defaults are the paper's Atari settings (lr 7e-4, eps 1e-5, 16 envs x
    5 steps) with Adam in place of RMSprop (see ``optimizer``)."""

    optimizer: Literal["rmsprop", "adam"] = "adam"
    """adam: PyTorch's Adam. rmsprop: TensorFlow's form (``accelrl.optim.RMSpropTF``), as OpenAI
    baselines' A2C. Adam is the default because with baselines' eps 1e-5 inside the square
    root, A2C's per-parameter gradients on Atari sit far below sqrt(eps), so RMSprop's steps
    are SGD-like and much smaller than lr, and Breakout does not learn
    (docs/results/learning.md#a2c)."""
    lr: float = 7e-4
    """Learning rate of the optimizer (scaled by --dist.lr-scaling with several ranks)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over total_frames (as OpenAI baselines' A2C)."""
    rms_alpha: float = 0.99
    """RMSprop smoothing constant."""
    eps: float = 1e-5
    """RMSprop / Adam epsilon."""
    gamma: float = 0.99
    """Discount factor, in [0, 1]."""
    gae_lambda: float = 1.0
    """1.0: n-step returns over each rollout segment; < 1: GAE."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus in the loss (>= 0)."""
    value_coef: float = 0.5
    """Weight of the value loss (V - R)^2."""
    max_grad_norm: float = 0.5
    """Clip the gradient's global norm to this before each step."""
    normalize_advantage: bool = False
    """Normalize advantages to mean 0 and std 1 within each batch."""
    life_loss_boundary: bool = True
    """Treat a lost life as the end of a bootstrap segment (the game goes on)."""


def validate_a2c(cfg: A2CConfig, prefix: str = "a2c") -> None:
    if cfg.optimizer not in ("rmsprop", "adam"):
        raise ConfigError(f"{prefix}.optimizer", cfg.optimizer, "must be rmsprop or adam")
    check_positive(f"{prefix}.lr", cfg.lr)
    check_positive(f"{prefix}.eps", cfg.eps)
    check_positive(f"{prefix}.max_grad_norm", cfg.max_grad_norm)
    check_positive(f"{prefix}.entropy_coef", cfg.entropy_coef, zero_ok=True)
    check_positive(f"{prefix}.value_coef", cfg.value_coef, zero_ok=True)
    for name in ("gamma", "gae_lambda", "rms_alpha"):
        check_probability(f"{prefix}.{name}", getattr(cfg, name))


class A2C(ActorCriticLearner):
    """A2C's loss and RMSprop (or Adam) over the actor-critic; one gradient step a batch."""

    def make_loss(self, model: ActorValueOperator, cfg: A2CConfig) -> A2CLoss:
        return A2CLoss(
            model.get_policy_head(),
            model.get_value_head(),
            entropy_coeff=cfg.entropy_coef,
            critic_coeff=cfg.value_coef,
            loss_critic_type="l2",
        )

    def make_optimizer(self, cfg: A2CConfig) -> torch.optim.Optimizer:
        if cfg.optimizer == "rmsprop":
            return RMSpropTF(self.params, lr=cfg.lr, alpha=cfg.rms_alpha, eps=cfg.eps)
        return adam(self.params, lr=cfg.lr, eps=cfg.eps)

    def lr_at(self, progress: float) -> float:
        """Learning rate at ``progress`` in [0, 1] of the run's frames."""
        return self.cfg.lr * (max(0.0, 1.0 - progress) if self.cfg.anneal_lr else 1.0)

    def update(self, batch: TensorDictBase, progress: float) -> dict[str, float]:
        """One gradient step on the whole ``[..., T]`` batch; returns its metrics."""
        lr = self.lr_at(progress)
        set_lr(self.optimizer, lr)
        flat = self.flat_advantages(batch)
        if self.cfg.normalize_advantage:
            adv = flat.get("advantage")
            flat.set("advantage", (adv - adv.mean()) / (adv.std() + 1e-8))
        out = self.objective(flat)
        total = total_loss(out)
        grad_norm = self.gradient_step(total)
        return {
            **{key: float(value.detach()) for key, value in loss_metrics(out, total).items()},
            "train/grad_norm": float(grad_norm),
            "train/explained_variance": explained_variance(
                flat.get("state_value"), flat.get("value_target")
            ),
            "train/lr": lr,
            "train/skipped_steps": self.guard.skipped,
        }
