"""PPO update step: TorchRL's ``GAE`` and ``ClipPPOLoss`` with Adam, epochs x minibatches.

A lost life is a bootstrap boundary (no value is bootstrapped across it and advantages do not
flow through it) while the simulator plays on; a game over ends the episode; a truncation at the
frame cap bootstraps from the value of the final observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from torchrl.modules import ActorValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from accelrl.algos.common import fill_values, mark_boundaries
from accelrl.config import ConfigError, check_positive


@dataclass
class PPOConfig:
    """PPO hyperparameters; defaults are the standard Atari settings (Schulman et al. 2017)."""

    lr: float = 2.5e-4
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over total_frames."""
    clip_epsilon: float = 0.1
    anneal_clip: bool = True
    """Decay the clip range linearly to 0 over total_frames."""
    epochs: int = 4
    minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    clip_value: bool = True
    """Clip the value update to clip_epsilon around the old value."""
    normalize_advantage: bool = True
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    life_loss_boundary: bool = True
    """Treat a lost life as the end of a bootstrap segment (the game goes on)."""


def validate_ppo(cfg: PPOConfig, frames_per_batch: int, prefix: str = "ppo") -> None:
    check_positive(f"{prefix}.lr", cfg.lr)
    check_positive(f"{prefix}.clip_epsilon", cfg.clip_epsilon)
    check_positive(f"{prefix}.epochs", cfg.epochs)
    check_positive(f"{prefix}.minibatches", cfg.minibatches)
    check_positive(f"{prefix}.max_grad_norm", cfg.max_grad_norm)
    check_positive(f"{prefix}.entropy_coef", cfg.entropy_coef, zero_ok=True)
    check_positive(f"{prefix}.value_coef", cfg.value_coef, zero_ok=True)
    for name in ("gamma", "gae_lambda"):
        value = getattr(cfg, name)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{prefix}.{name}", value, "must be in [0, 1]")
    if frames_per_batch % cfg.minibatches:
        raise ConfigError(
            f"{prefix}.minibatches",
            cfg.minibatches,
            f"must divide collector.frames_per_batch={frames_per_batch}",
        )


class PPO:
    """Owns the loss, the advantage estimator and the optimizer; ``update`` runs one PPO phase.

    Collect with ``self.policy`` (the full actor-critic: action, log-prob and state value in one
    trunk pass); ``self.actor`` is the policy alone (evaluation).
    """

    def __init__(self, model: ActorValueOperator, cfg: PPOConfig, device: torch.device) -> None:
        self.cfg = cfg
        self.device = device
        self.policy = model
        self.actor = model.get_policy_operator()
        self.critic = model.get_value_operator()
        # The loss gets the value *head* only: its actor pass writes the trunk's ``hidden``
        # features into the minibatch and the head reads them, so the trunk runs once per
        # minibatch instead of twice (the full critic would recompute it). Gradients of the
        # value loss still reach the trunk through ``hidden``.
        self.loss = ClipPPOLoss(
            self.actor,
            model.get_value_head(),
            clip_epsilon=cfg.clip_epsilon,
            entropy_coeff=cfg.entropy_coef,
            critic_coeff=cfg.value_coef,
            loss_critic_type="l2",
            normalize_advantage=cfg.normalize_advantage,
            clip_value=cfg.clip_value,
        )
        # Values come from collection (see ``fill_values``), so GAE runs no network itself.
        self.gae = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=None, average_gae=False)
        self.gae.set_keys(done="gae_done", terminated="gae_terminated")
        self.optimizer = torch.optim.Adam(self.loss.parameters(), lr=cfg.lr, eps=cfg.adam_eps)

    def schedule(self, progress: float) -> tuple[float, float]:
        """(learning rate, clip range) at ``progress`` in [0, 1] of the run's frames."""
        remaining = max(0.0, 1.0 - progress)
        lr = self.cfg.lr * (remaining if self.cfg.anneal_lr else 1.0)
        clip = self.cfg.clip_epsilon * (remaining if self.cfg.anneal_clip else 1.0)
        return lr, max(clip, 1e-8)

    def update(self, batch: TensorDictBase, progress: float) -> dict[str, float]:
        """One PPO phase on ``batch`` ([..., T]); returns mean metrics over all minibatches."""
        lr, clip = self.schedule(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.loss.clip_epsilon.fill_(clip)
        batch = batch.to(self.device)
        mark_boundaries(batch, self.cfg.life_loss_boundary)
        with torch.no_grad():
            fill_values(batch, self.critic)
            self.gae(batch)
        # Stale trunk features from collection and GAE: the loss recomputes them with grads.
        flat = batch.exclude("hidden", ("next", "hidden")).reshape(-1)
        n = flat.numel()
        size = n // self.cfg.minibatches
        sums: dict[str, torch.Tensor] = {}
        steps = 0
        for _ in range(self.cfg.epochs):
            order = torch.randperm(n, device=self.device)
            for start in range(0, n, size):
                mb = flat[order[start : start + size]]
                out = self.loss(mb)
                total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                self.optimizer.zero_grad(set_to_none=True)
                total.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.loss.parameters(), self.cfg.max_grad_norm
                )
                self.optimizer.step()
                row = {
                    "loss/policy": out["loss_objective"],
                    "loss/value": out["loss_critic"],
                    "loss/entropy": out["loss_entropy"],
                    "loss/total": total,
                    "train/entropy": out["entropy"],
                    "train/kl_approx": out["kl_approx"],
                    "train/clip_fraction": out["clip_fraction"],
                    "train/grad_norm": grad_norm,
                }
                for key, value in row.items():
                    sums[key] = sums.get(key, 0.0) + value.detach()
                steps += 1
        metrics = {k: float(v) / steps for k, v in sums.items()}
        metrics["train/explained_variance"] = explained_variance(
            flat.get("state_value"), flat.get("value_target")
        )
        metrics["train/lr"] = lr
        metrics["train/clip_epsilon"] = clip
        return metrics

    def state_dict(self) -> dict:
        return {"loss": self.loss.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.loss.load_state_dict(state["loss"])
        self.optimizer.load_state_dict(state["optimizer"])


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var[target - pred] / Var[target]; nan when the target is constant."""
    var = target.var()
    if var == 0:
        return float("nan")
    return float(1.0 - (target - pred).var() / var)
