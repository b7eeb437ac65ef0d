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
from torchrl.objectives.value import VTrace

from accelrl.algos.common import (
    ActorCriticLearner,
    explained_variance,
    loss_metrics,
    set_lr,
    total_loss,
)
from accelrl.errors import ConfigError, check_positive, check_probability
from accelrl.optim import adam


@dataclass
class PPOConfig:
    """PPO hyperparameters; defaults are the standard Atari settings (Schulman et al. 2017)."""

    lr: float = 2.5e-4
    """Adam's learning rate (scaled by --dist.lr-scaling with several ranks)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over total_frames."""
    clip_epsilon: float = 0.1
    """Clip range of the probability ratio (and of the value update with clip_value)."""
    anneal_clip: bool = True
    """Decay the clip range linearly to 0 over total_frames."""
    epochs: int = 4
    """Passes over each batch."""
    minibatches: int = 4
    """Minibatches each pass splits the batch into (one gradient step each)."""
    gamma: float = 0.99
    """Discount factor, in [0, 1]."""
    gae_lambda: float = 0.95
    """GAE's lambda, in [0, 1] (1: Monte Carlo returns within the batch, 0: one-step TD)."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus in the loss (>= 0)."""
    value_coef: float = 0.5
    """Weight of the value loss 0.5 * (V - R)^2 (as in OpenAI baselines)."""
    clip_value: bool = True
    """Clip the value update to clip_epsilon around the old value."""
    normalize_advantage: bool = True
    """Normalize advantages to mean 0 and std 1 within each minibatch."""
    max_grad_norm: float = 0.5
    """Clip the gradient's global norm to this before each step."""
    adam_eps: float = 1e-5
    """Adam's epsilon."""
    life_loss_boundary: bool = True
    """Treat a lost life as the end of a bootstrap segment (the game goes on)."""


@dataclass
class APPOConfig(PPOConfig):
    """Asynchronous PPO: PPO's clipped objective on batches that may come from weights up to
    ``collector.max_policy_lag`` updates old, optionally with V-trace targets."""

    vtrace: bool = False
    """Advantages and value targets from V-trace (Espeholt et al. 2018), which corrects for
    the lag with truncated importance weights, instead of GAE."""
    vtrace_rho_clip: float = 1.0
    """Truncation of the importance weight in V-trace's temporal differences (rho bar)."""
    vtrace_c_clip: float = 1.0
    """Truncation of the importance weights that carry corrections backwards (c bar)."""


def validate_ppo(cfg: PPOConfig, steps_per_batch: int, prefix: str = "ppo") -> None:
    check_positive(f"{prefix}.lr", cfg.lr)
    check_positive(f"{prefix}.clip_epsilon", cfg.clip_epsilon)
    check_positive(f"{prefix}.epochs", cfg.epochs)
    check_positive(f"{prefix}.minibatches", cfg.minibatches)
    check_positive(f"{prefix}.max_grad_norm", cfg.max_grad_norm)
    check_positive(f"{prefix}.adam_eps", cfg.adam_eps)
    check_positive(f"{prefix}.entropy_coef", cfg.entropy_coef, zero_ok=True)
    check_positive(f"{prefix}.value_coef", cfg.value_coef, zero_ok=True)
    for name in ("gamma", "gae_lambda"):
        check_probability(f"{prefix}.{name}", getattr(cfg, name))
    if isinstance(cfg, APPOConfig):
        check_positive(f"{prefix}.vtrace_rho_clip", cfg.vtrace_rho_clip)
        check_positive(f"{prefix}.vtrace_c_clip", cfg.vtrace_c_clip)
    if steps_per_batch % cfg.minibatches:
        raise ConfigError(
            f"{prefix}.minibatches",
            cfg.minibatches,
            f"must divide collector.steps_per_batch={steps_per_batch}",
        )


class PPO(ActorCriticLearner):
    """PPO's loss and Adam over the actor-critic; ``update`` runs one PPO phase on a batch."""

    def make_loss(self, model: ActorValueOperator, cfg: PPOConfig) -> ClipPPOLoss:
        loss = ClipPPOLoss(
            model.get_policy_head(),
            model.get_value_head(),
            clip_epsilon=cfg.clip_epsilon,
            entropy_coeff=cfg.entropy_coef,
            # TorchRL's l2 is (V - R)^2; baselines/CleanRL weigh 0.5 (V - R)^2 by value_coef.
            critic_coeff=0.5 * cfg.value_coef,
            loss_critic_type="l2",
            normalize_advantage=cfg.normalize_advantage,
            clip_value=cfg.clip_value,
        )
        if getattr(cfg, "vtrace", False):
            # Values come from ``fill_values`` (current critic); V-trace reweighs the returns
            # by pi / mu, with mu the acting policy's ``action_log_prob``.
            self.estimator = VTrace(
                gamma=cfg.gamma,
                actor_network=self.actor,
                value_network=None,
                rho_thresh=cfg.vtrace_rho_clip,
                c_thresh=cfg.vtrace_c_clip,
            )
            self.estimator.set_keys(
                done="gae_done", terminated="gae_terminated", sample_log_prob="action_log_prob"
            )
        return loss

    def make_optimizer(self, cfg: PPOConfig) -> torch.optim.Optimizer:
        return adam(self.params, lr=cfg.lr, eps=cfg.adam_eps)

    def schedule(self, progress: float) -> tuple[float, float]:
        """(learning rate, clip range) at ``progress`` in [0, 1] of the run's frames."""
        remaining = max(0.0, 1.0 - progress)
        lr = self.cfg.lr * (remaining if self.cfg.anneal_lr else 1.0)
        clip = self.cfg.clip_epsilon * (remaining if self.cfg.anneal_clip else 1.0)
        return lr, max(clip, 1e-8)

    def update(self, batch: TensorDictBase, progress: float) -> dict[str, float]:
        """One PPO phase on ``batch`` ([..., T]); returns mean metrics over all minibatches."""
        lr, clip = self.schedule(progress)
        set_lr(self.optimizer, lr)
        self.loss.clip_epsilon.fill_(clip)
        if isinstance(self.loss.clip_value, torch.Tensor):
            # TorchRL fixes the value clip at the initial clip_epsilon; baselines' PPO2 (and the
            # plain loop) clip the value with the same annealed range as the policy.
            self.loss.clip_value.fill_(clip)
        flat = self.flat_advantages(batch)
        # Minibatches gather only what the loss reads: the next observations alone (uint8 frames,
        # as large as the observations) doubled the bytes each gather copied.
        keys = self.loss.tensor_keys
        flat = flat.select(
            *self.trunk.in_keys,
            keys.action,
            keys.sample_log_prob,
            keys.advantage,
            keys.value_target,
            keys.value,
        )
        # Feed-forward: minibatches of steps. Recurrent: ``flat`` is ``[rows, T]`` and
        # minibatches hold whole simulators' sequences, in time order (validation makes
        # ``minibatches`` divide the rows).
        n = flat.shape[0]
        size = n // self.cfg.minibatches
        sums: dict[str, torch.Tensor] = {}
        steps = 0
        for _ in range(self.cfg.epochs):
            order = torch.randperm(n, device=self.device)
            for start in range(0, n, size):
                mb = flat[order[start : start + size]]
                out = self.objective(mb)
                total = total_loss(out)
                grad_norm = self.gradient_step(total)
                row = {
                    **loss_metrics(out, total),
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
        metrics["train/skipped_steps"] = self.guard.skipped
        return metrics
