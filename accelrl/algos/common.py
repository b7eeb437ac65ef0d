"""Pieces shared by the on-policy update steps (PPO, A2C): bootstrap boundaries and values."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.modules import ActorValueOperator, set_recurrent_mode
from torchrl.objectives.value import GAE

from accelrl import distributed, optim
from accelrl.batches import NEXT_OBS_AT_ENDS, ends, is_compact, next_obs_at_ends
from accelrl.distributed import average_gradients
from accelrl.errors import RunFailure
from accelrl.models import GreedyActorCritic, acting_policy, recurrent_core
from accelrl.precision import FP32, FP32_PLAN, Plan, Precision
from accelrl.recurrent import greedy_step, zero_state


def mark_boundaries(batch: TensorDictBase, life_loss: bool) -> None:
    """Write ``("next", "gae_done")`` / ``("next", "gae_terminated")`` for value estimators.

    A game over ends the episode; with ``life_loss`` a lost life also stops bootstrapping and
    advantage propagation while the simulator plays on (as DeepMind's episodic-life setting).
    A truncation (frame cap) is ``done`` but not ``terminated``: it bootstraps.
    """
    nxt = batch.get("next")
    done, terminated = nxt.get("done"), nxt.get("terminated")
    if life_loss and "life_lost" in nxt.keys():
        lost = nxt.get("life_lost")
        done, terminated = done | lost, terminated | lost
    nxt.set("gae_done", done)
    nxt.set("gae_terminated", terminated)


@torch.no_grad()
def fill_values(batch: TensorDictBase, critic: TensorDictModuleBase) -> None:
    """Write ``state_value`` and ``("next", "state_value")`` for a ``[..., T]`` batch.

    The policy used for collection computes ``state_value`` alongside the action (one trunk pass
    per step), valid when the weights that acted are the learner's current ones (synchronous
    collection). The next state's value is then the following step's value, except after an
    episode end (autoreset: the next observation is the final one) and at the last step, where
    the critic runs on those few next observations only. Without collected values the critic
    runs on every root observation.
    """
    if "state_value" not in batch.keys():
        batch.set("state_value", critic(batch.exclude("next").copy()).get("state_value"))
    values = batch.get("state_value")
    nxt = batch.get("next")
    need = ends(nxt.get("done").squeeze(-1))
    next_values = torch.roll(values, shifts=-1, dims=batch.ndim - 1).clone()
    subset = nxt[need]
    if is_compact(batch):  # the observations at ``need`` are on the side (``accelrl.batches``)
        missing = [k for k in critic.in_keys if k not in subset.keys(True)]
        if len(missing) != 1:
            raise ValueError(f"a compact batch lacks one observation key, not {missing}")
        subset.set(missing[0], next_obs_at_ends(batch, missing[0], need))
    next_values[need] = critic(subset.exclude("state_value").copy()).get("state_value")
    nxt.set("state_value", next_values)


def advantages(
    batch: TensorDictBase,
    critic: TensorDictModuleBase,
    estimator: TensorDictModuleBase,
    *,
    device: torch.device,
    life_loss: bool,
    precision: Precision = FP32,
    sequences: bool = False,
) -> TensorDictBase:
    """``advantage`` and ``value_target`` for a ``[..., T]`` batch, flattened to ``[N]``, or
    with ``sequences`` (a recurrent policy) to ``[rows, T]``: one whole sequence of each
    simulator, in time order, for the updates to run the recurrent core over.

    Trunk features stored during collection (``hidden``; a recurrent trunk's ``features`` and
    the ``logits``) are dropped: losses recompute them with gradients. The critic runs in the
    learner's ``precision`` (its values leave it in fp32); the estimator (GAE, V-trace) runs
    outside autocast, in fp32.
    """
    batch = batch.to(device)
    mark_boundaries(batch, life_loss)
    with torch.no_grad():
        with precision.autocast():
            fill_values(batch, critic)
        estimator(batch)
    if sequences:
        dropped = ["hidden", "features", "logits", NEXT_OBS_AT_ENDS]
        batch = batch.exclude(*dropped, *(("next", key) for key in dropped))
        return batch.reshape(-1, batch.shape[-1])
    return batch.exclude("hidden", ("next", "hidden"), NEXT_OBS_AT_ENDS).reshape(-1)


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var[target - pred] / Var[target]; nan when the target is constant."""
    var = target.var()
    if var == 0:
        return float("nan")
    return float(1.0 - (target - pred).var() / var)


class NonFiniteError(RunFailure, FloatingPointError):
    """A loss or gradient with NaN/Inf; raised before the optimizer step, so the weights (and
    every checkpoint) stay finite."""


class NonFiniteGuard:
    """What ``gradient_step`` does with a non-finite loss or gradient: ``stop`` raises
    ``NonFiniteError``; ``skip`` drops that step and counts it in ``skipped``. Each learner
    holds one, with the policy from ``--on-nonfinite``."""

    def __init__(self, policy: str = "stop") -> None:
        if policy not in ("stop", "skip"):
            raise ValueError(f"on_nonfinite must be stop or skip, not {policy!r}")
        self.policy = policy
        self.skipped = 0


def gradient_step(
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    parameters: list[torch.nn.Parameter],
    max_grad_norm: float,
    guard: NonFiniteGuard,
    scaler: torch.amp.GradScaler | None = None,
    backward: Callable[[], None] | None = None,
) -> torch.Tensor:
    """Backward, clip the global grad norm to ``max_grad_norm``, step; returns the norm before.

    ``backward``, when given, writes the parameters' gradients in place of ``loss.backward()``
    (a learner that computes them without autograd: ``accelrl.algos.direct_grad``; fp32, no
    ``scaler``).

    A NaN/Inf loss or gradient norm is caught here, at the step where it appears, before the
    optimizer touches the weights (see ``NonFiniteGuard``). With fp16's ``scaler``
    (``accelrl.precision``) the loss is scaled for backward and the gradients unscaled before
    clipping; a step whose gradients overflow the scale is the scaler's to skip (it lowers the
    scale), and only a non-finite loss goes to the guard.
    """
    optim.zero_grad(optimizer)
    if scaler is not None:
        if backward is not None:
            raise ValueError("a gradient written without autograd cannot be loss-scaled")
        return _scaled_step(optimizer, loss, parameters, max_grad_norm, guard, scaler)
    backward = backward or loss.backward
    if distributed.active():
        finite = bool(torch.isfinite(loss.detach()).all())
        if finite:
            backward()
        # Data-parallel runs: every rank steps with the gradient of the global batch, and a
        # non-finite loss on any rank makes every rank skip (or stop at) this same step.
        if average_gradients(parameters, local_nonfinite=not finite):
            if finite:
                return _nonfinite(guard, optimizer, "the loss of another rank is non-finite")
            return _nonfinite(guard, optimizer, _nonfinite_loss(loss))
    else:
        # One process: loss and gradient norm are checked together below, one wait for the
        # device per step instead of two (backward of a NaN loss only fills the gradients).
        backward()
    # PyTorch's clipping and optimizer step, as their kernel calls (``accelrl.optim``)
    norm = optim.clip_grad_norm(parameters, max_grad_norm)
    # One operation and one read: the sum is non-finite when either is (or when both are
    # finite but overflow together: told apart below). Cheaper than the elementwise isfinite
    # / & / all / bool chain on a CPU (docs/development-notes.md#pytorch-and-the-platform).
    total = loss.detach()
    if total.dim():
        total = total.sum()
    if not math.isfinite((norm + total).item()):
        if not bool(torch.isfinite(loss.detach()).all()):
            return _nonfinite(guard, optimizer, _nonfinite_loss(loss))
        if not math.isfinite(float(norm)):
            return _nonfinite(guard, optimizer, f"gradient norm is {float(norm)} (non-finite)")
    optim.step(optimizer)
    return norm


def _scaled_step(
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    parameters: list[torch.nn.Parameter],
    max_grad_norm: float,
    guard: NonFiniteGuard,
    scaler: torch.amp.GradScaler,
) -> torch.Tensor:
    """``gradient_step`` with fp16's loss scaling (data-parallel runs average the scaled
    gradients; every rank then finds the same overflow and skips the same step)."""
    finite = bool(torch.isfinite(loss.detach()).all())
    if finite:
        scaler.scale(loss).backward()
    if distributed.active():
        if average_gradients(parameters, local_nonfinite=not finite) and finite:
            return _nonfinite(guard, optimizer, "the loss of another rank is non-finite")
    if not finite:
        return _nonfinite(guard, optimizer, _nonfinite_loss(loss))
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    scaler.step(optimizer)  # skipped when the unscaled gradients hold an Inf/NaN
    scaler.update()
    return norm


def _nonfinite_loss(loss: torch.Tensor) -> str:
    return f"loss is {float(loss.detach().reshape(-1)[0])} (non-finite)"


def _nonfinite(guard: NonFiniteGuard, optimizer: torch.optim.Optimizer, what: str) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    if guard.policy == "skip":
        guard.skipped += 1
        return torch.zeros(())
    raise NonFiniteError(f"{what}; the step was not applied")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def total_loss(out: TensorDictBase) -> torch.Tensor:
    """Sum of a TorchRL loss module's ``loss_*`` terms (absent terms, e.g. a zero entropy
    coefficient, simply do not count)."""
    return sum(value for key, value in out.items() if key.startswith("loss_"))


def loss_metrics(out: TensorDictBase, total: torch.Tensor) -> dict[str, torch.Tensor]:
    """The standard on-policy loss metrics of a TorchRL loss output, missing ones as zeros."""
    zero = torch.zeros((), device=total.device)
    return {
        "loss/policy": out.get("loss_objective", zero),
        "loss/value": out.get("loss_critic", zero),
        "loss/entropy": out.get("loss_entropy", zero),
        "loss/total": total,
        "train/entropy": out.get("entropy", zero),
    }


class ActorCriticLearner:
    """What PPO and A2C share: the actor-critic's parts, the return estimator, checkpoint state.

    The agent contract (``accelrl.agent``): collect with ``self.collect_policy`` (action,
    log-prob and state value in one trunk pass); ``self.eval_policy`` is the actor alone
    (evaluation, play); ``self.model`` the whole actor-critic. Subclasses build ``self.loss``
    over the policy and value *heads* (``make_loss``) and ``self.optimizer`` over ``self.params``
    (``make_optimizer``).
    """

    loss: torch.nn.Module
    optimizer: torch.optim.Optimizer

    def __init__(
        self,
        model: ActorValueOperator,
        cfg: Any,
        device: torch.device,
        on_nonfinite: str = "stop",
        compile_loss: bool = False,
        precision: Plan = FP32_PLAN,
    ) -> None:
        self.cfg = cfg  # the algorithm's config section: gamma, gae_lambda, lr, ...
        self.device = device
        self.guard = NonFiniteGuard(on_nonfinite)
        # --precision.*: the updates' autocast and fp16's loss scaler (``accelrl.precision``);
        # the weights stay fp32 (channels_last only changes the conv weights' layout).
        self.precision = precision.learner
        self.scaler = precision.learner.grad_scaler()
        precision.prepare(model)
        # --compile.loss: the forward pass of a (mini)batch through the trunk, both heads and
        # the loss module as one torch.compile graph; backward and optimizer step stay eager.
        self.objective = torch.compile(self._objective) if compile_loss else self._objective
        self.model = model
        # A recurrent actor-critic's core module (``accelrl.recurrent``: an LSTM), or
        # None. Recurrent: collectors act with the ``ActorValueOperator`` itself, which reads
        # and writes the state; updates run it over whole sequences (``sequences``).
        self.core = recurrent_core(model)
        # Collectors act with this: the same parameters and draws in one module (see
        # ``acting_policy``); the ``ActorValueOperator`` itself evaluates and exports.
        self.collect_policy = precision.acting(model if self.core else acting_policy(model))
        self.actor = model.get_policy_operator()
        self.eval_policy = self.actor
        self.critic = model.get_value_operator()
        # Losses get the heads; updates run the shared trunk once per minibatch (writing
        # ``hidden`` with gradients) instead of once in each of the actor and the critic. Both
        # losses' gradients reach the trunk through ``hidden``.
        self.trunk = model[0]  # the common operator (public TensorDictSequential indexing)
        self.params = list(model.parameters())
        # Values come from collection (see ``fill_values``), so GAE runs no network itself.
        self.estimator = GAE(
            gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=None, average_gae=False
        )
        self.estimator.set_keys(done="gae_done", terminated="gae_terminated")
        self.loss = self.make_loss(model, cfg)
        self.optimizer = self.make_optimizer(cfg)

    def make_loss(self, model: ActorValueOperator, cfg: Any) -> torch.nn.Module:
        """The TorchRL loss module over ``model``'s policy and value heads."""
        raise NotImplementedError

    def make_optimizer(self, cfg: Any) -> torch.optim.Optimizer:
        """The optimizer over ``self.params``."""
        raise NotImplementedError

    def flat_advantages(self, batch: TensorDictBase) -> TensorDictBase:
        """``batch`` on the learner's device with ``advantage`` and ``value_target``, flattened
        as ``advantages`` does (``[N]`` steps, or ``[rows, T]`` sequences when recurrent)."""
        return advantages(
            batch,
            self.critic,
            self.estimator,
            device=self.device,
            life_loss=self.cfg.life_loss_boundary,
            precision=self.precision,
            sequences=self.sequences,
        )

    def gradient_step(self, total: torch.Tensor) -> torch.Tensor:
        """``gradient_step`` on ``total`` over ``self.params``; returns the grad norm before
        clipping to ``cfg.max_grad_norm``."""
        return gradient_step(
            self.optimizer, total, self.params, self.cfg.max_grad_norm, self.guard, self.scaler
        )

    def _objective(self, batch: TensorDictBase) -> TensorDictBase:
        """The loss module's output on ``batch``; the trunk runs once for both heads. Under
        bf16/fp16 the networks compute in it and write fp32 logits and values, so the loss
        terms (log-probs, ratio, entropy, value error, their means) are fp32: the loss modules
        hold no matrix product that autocast would lower (``accelrl.precision``)."""
        with self.precision.autocast():
            if self.core is None:
                return self.loss(self.trunk(batch))
            # ``[B, T]`` sequences: the core runs over time from each sequence's stored first
            # state, restarting from zeros at every ``is_init`` (an episode's first step).
            with set_recurrent_mode(True):
                return self.loss(self.trunk(batch))

    @property
    def sequences(self) -> bool:
        """True for a recurrent actor-critic: batches stay ``[rows, T]`` sequences."""
        return self.core is not None

    def export_module(self) -> torch.nn.Module:
        """The greedy actor as a plain module: the trunk's and the policy head's networks
        without TensorDicts (the first module of each ``TensorDictSequential``, by its public
        indexing); observation in, ``argmax`` of the logits out. A recurrent actor-critic's
        also takes and returns its state: ``(obs, *state) -> (action, *state)``, the core's
        step (``accelrl.recurrent.greedy_step``; the caller zeros the state at an episode's
        start)."""
        trunk = self.model.get_policy_operator()[0].module
        head = self.model.get_policy_head()[0].module
        if self.core is not None:
            # The common module is TensorDictSequential(trunk, the core's module).
            return greedy_step(trunk[0].module, self.core, head).eval()
        return GreedyActorCritic(trunk, head).eval()

    def networks(self) -> list[torch.nn.Module]:
        # The loss holds the heads' parameters (the same tensors) and nothing of its own.
        return [self.model, self.loss]

    def initial_state(self, num_envs: int) -> TensorDictBase | None:
        """Zeros of the core's state keys for ``num_envs`` simulators
        (``accelrl.recurrent.zero_state``), or None for a feed-forward actor-critic."""
        return None if self.core is None else zero_state(self.core, num_envs)

    def state_dict(self) -> dict:
        # The whole actor-critic: the loss holds only the heads, not the shared trunk (the
        # Nature CNN on frames).
        return {
            "model": self.model.state_dict(),
            "loss": self.loss.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.loss.load_state_dict(state["loss"])
        self.optimizer.load_state_dict(state["optimizer"])
