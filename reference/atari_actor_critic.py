"""The plain Atari PPO and A2C loops (``reference.atari`` describes them and what they share):
T steps of every simulator with one actor-critic, GAE (or n-step returns) with lost lives as
bootstrap boundaries, then PPO's epochs x minibatches or A2C's one step on the batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from reference.actor_critic_parts import Rollout, a2c_objective, ppo_minibatch
from reference.atari import ActorCritic, BatchLog, Checkpoint, Record, VecAtari, setup
from reference.common import RMSpropTF, anneal_lr, clipped_step, require
from reference.recurrent import plain_a2c_lstm, plain_ppo_lstm

if TYPE_CHECKING:  # the recipes' config dataclasses, for annotations only
    from recipes.a2c_atari import Config as A2CRecipeConfig
    from recipes.appo_atari import Config as APPORecipeConfig
    from recipes.ppo_atari import Config as PPORecipeConfig


def ppo_phase(
    model: ActorCritic,
    opt: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, ...],
    p: Any,
    clip: float,
) -> torch.Tensor:
    """PPO's epochs x minibatches on ``batch`` = (obs, actions, log-probs, advantages, returns,
    values) of ``[N]`` steps: clipped policy loss, (clipped) value loss, entropy bonus, grad-norm
    clipping, one optimizer step per minibatch. ``p``: the recipe's ``cfg.ppo`` (or ``cfg.appo``).
    Returns the summed (approximate KL, clip fraction, grad norm) over the minibatches."""
    b_obs, b_act, b_logp, b_adv, b_ret, b_val = batch
    n = b_act.shape[0]
    mb = n // p.minibatches
    stats = torch.zeros(3, dtype=b_adv.dtype, device=b_adv.device)
    for _ in range(p.epochs):
        order = torch.randperm(n, device=b_adv.device)
        for i in range(0, n, mb):
            idx = order[i : i + mb]
            logits, value = model(b_obs[idx])
            collected = (b_act[idx], b_logp[idx], b_adv[idx], b_ret[idx], b_val[idx])
            loss, kl, clipped = ppo_minibatch(logits, value, collected, p, clip)
            grad_norm = clipped_step(opt, loss, model.parameters(), p.max_grad_norm)
            stats += torch.stack([kl, clipped, grad_norm.detach()])
    return stats


def plain_ppo(
    cfg: PPORecipeConfig | APPORecipeConfig,
    iterations: int | None = None,
    *,
    section: str = "ppo",
    device: str = "cpu",
    threads: int = 1,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> list[Record]:
    """PPO with ``cfg``'s settings (``cfg.<section>``: ``ppo``, or ``appo`` for APPO's PPO
    objective) for ``iterations`` batches (default: until ``cfg.total_frames``; a resumed
    ``checkpoint`` counts the batches it has done)."""
    if cfg.model.recurrent != "none":
        if section != "ppo":
            raise ValueError(f"model.recurrent={cfg.model.recurrent!r}: the plain loop "
                             "implements PPO's LSTM, not APPO's")  # fmt: skip
        return plain_ppo_lstm(cfg, iterations, device=device, threads=threads,
                              on_iteration=on_iteration, checkpoint=checkpoint)  # fmt: skip
    p = getattr(cfg, section)
    require(section, p, life_loss_boundary=True)
    if section == "appo":
        require(section, p, vtrace=False)
    env, dev, steps, frames, batches = setup(cfg, iterations, checkpoint, threads, device)
    model = ActorCritic(env.num_actions, cfg.env.frame_stack, cfg.env.screen_size).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=p.lr, eps=p.adam_eps)
    log = BatchLog(env, model, opt, on_iteration, checkpoint)  # restores a resumed checkpoint
    rollout = Rollout(env, model, steps, dev)
    n = env.num_envs * steps
    try:
        for _ in batches:
            remaining = anneal_lr(opt, p, frames / cfg.total_frames)
            clip = max(p.clip_epsilon * (remaining if p.anneal_clip else 1.0), 1e-8)
            last_value = rollout.collect()
            adv = rollout.advantages(last_value, p.gamma, p.gae_lambda)
            returns = adv + rollout.values
            batch = (rollout.obs.reshape(n, *env.obs.shape[1:]), rollout.actions.reshape(n),
                     rollout.logp.reshape(n), adv.reshape(n), returns.reshape(n),
                     rollout.values.reshape(n))  # fmt: skip
            # The metrics reach the host once per update, as the recipe's.
            ppo_phase(model, opt, batch, p, clip).tolist()
            frames += n * cfg.env.frameskip
            log.done(frames)
    finally:
        env.close()
    return log.records


def a2c_loss(
    model: ActorCritic, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, a: Any
) -> torch.Tensor:
    """A2C's loss on ``[N]`` steps: policy gradient with advantage ``returns - V`` (V from this
    forward pass, detached), ``a.value_coef`` x squared value error, ``a.entropy_coef`` x
    entropy bonus. ``a``: the recipe's ``cfg.a2c``."""
    return a2c_objective(*model(obs), actions, returns, a)


def plain_a2c(
    cfg: A2CRecipeConfig,
    iterations: int | None = None,
    *,
    device: str = "cpu",
    threads: int = 1,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> list[Record]:
    """A2C with ``cfg``'s settings (``cfg.a2c``) for ``iterations`` batches (default: until
    ``cfg.total_frames``; a resumed ``checkpoint`` counts the batches it has done)."""
    if cfg.model.recurrent != "none":
        return plain_a2c_lstm(cfg, iterations, device=device, threads=threads,
                              on_iteration=on_iteration, checkpoint=checkpoint)  # fmt: skip
    a = cfg.a2c
    require("a2c", a, life_loss_boundary=True)
    env, dev, steps, frames, batches = setup(cfg, iterations, checkpoint, threads, device)
    model = ActorCritic(env.num_actions, cfg.env.frame_stack, cfg.env.screen_size).to(dev)
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=a.eps)
    else:
        # TensorFlow's RMSprop (eps inside the square root, average from one), as OpenAI
        # baselines' A2C uses; PyTorch's form takes far larger early steps.
        opt = RMSpropTF(model.parameters(), lr=a.lr, alpha=a.rms_alpha, eps=a.eps)
    log = BatchLog(env, model, opt, on_iteration, checkpoint)  # restores a resumed checkpoint
    rollout = Rollout(env, model, steps, dev)
    n = env.num_envs * steps
    try:
        for _ in batches:
            anneal_lr(opt, a, frames / cfg.total_frames)
            last_value = rollout.collect()
            adv = rollout.advantages(last_value, a.gamma, a.gae_lambda)
            returns = (adv + rollout.values).reshape(n)
            obs = rollout.obs.reshape(n, *env.obs.shape[1:])
            loss = a2c_loss(model, obs, rollout.actions.reshape(n), returns, a)
            grad_norm = clipped_step(opt, loss, model.parameters(), a.max_grad_norm)
            float(loss.detach()), float(grad_norm)  # logged per update by the recipe too
            frames += n * cfg.env.frameskip
            log.done(frames)
    finally:
        env.close()
    return log.records
