"""PQN (Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning"): Q-learning
without a replay buffer or a target network.

Many simulators act epsilon-greedily with one LayerNorm Q-network; each short rollout
``[envs, T]`` gets Q(lambda) targets, bootstrapped from ``max_a Q(s', a)`` of the same network,
then epochs x minibatches of MSE steps, as PPO's phase. The LayerNorm is what keeps these TD
updates stable without a target network (the paper's analysis). A lost life ends the lambda
trace and does not bootstrap (``life_loss_boundary``), a game over does not bootstrap, and a
truncation bootstraps from the value of its final observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torchrl.data import Categorical
from torchrl.modules import EGreedyModule
from torchrl.objectives.value.functional import td_lambda_return_estimate

from accelrl.algos.common import NonFiniteGuard, gradient_step, mark_boundaries, set_lr
from accelrl.algos.dqn import GreedyQValueActor
from accelrl.batches import ends, next_obs_at_ends
from accelrl.errors import ConfigError, check_positive, check_probability
from accelrl.models import DirectTensorDictModule, GreedyQ, QNetwork
from accelrl.precision import FP32_PLAN, Plan


@dataclass
class PQNConfig:
    """PQN hyperparameters; defaults are CleanRL's Atari settings (``pqn_atari_envpool.py``)."""

    lr: float = 2.5e-4
    """RAdam's learning rate (scaled by --dist.lr-scaling with several ranks)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over total_frames."""
    eps: float = 1e-8
    """RAdam's epsilon."""
    gamma: float = 0.99
    """Discount factor, in [0, 1]."""
    q_lambda: float = 0.65
    """Lambda of the Q(lambda) targets, in [0, 1] (0: one-step Q-learning targets, 1: the
    rollout's discounted returns bootstrapped at its end)."""
    epochs: int = 4
    """Passes over each batch."""
    minibatches: int = 4
    """Minibatches each pass splits the batch into (one gradient step each)."""
    max_grad_norm: float = 10.0
    """Clip the gradient's global norm to this before each step."""
    eps_start: float = 1.0
    """Exploration: epsilon of epsilon-greedy acting at the start, in [0, 1]."""
    eps_end: float = 0.01
    """Exploration: epsilon after eps_decay_fraction of the run, in [0, eps_start]."""
    eps_decay_fraction: float = 0.1
    """Exploration: the part of total_frames over which epsilon decays linearly from eps_start
    to eps_end, in (0, 1]. Epsilon changes once per batch (each rollout acts with one)."""
    eval_eps: float = 0.001
    """Epsilon of sampled evaluation episodes, in [0, 1] (greedy ones ignore it)."""
    life_loss_boundary: bool = True
    """Treat a lost life as terminal in the targets (the game goes on), as CleanRL's episodic
    life."""


def validate_pqn(
    cfg: PQNConfig, steps_per_batch: int, simulators: int, prefix: str = "pqn"
) -> None:
    """Every check of the section, for batches of ``steps_per_batch`` agent steps from
    ``simulators`` simulators; raises ``ConfigError``."""
    for name in ("lr", "eps", "epochs", "minibatches", "max_grad_norm", "eps_decay_fraction"):
        check_positive(f"{prefix}.{name}", getattr(cfg, name))
    for name in ("gamma", "q_lambda", "eps_start", "eps_end", "eps_decay_fraction", "eval_eps"):
        check_probability(f"{prefix}.{name}", getattr(cfg, name))
    if cfg.eps_end > cfg.eps_start:
        raise ConfigError(
            f"{prefix}.eps_end", cfg.eps_end, f"must be <= eps_start={cfg.eps_start} (it decays)"
        )
    if steps_per_batch % cfg.minibatches:
        raise ConfigError(
            f"{prefix}.minibatches",
            cfg.minibatches,
            f"must divide collector.steps_per_batch={steps_per_batch}",
        )
    if simulators < 2:
        raise ConfigError(
            "env.num_envs",
            simulators,
            "PQN learns from many simulators at once in place of a replay: use at least 2",
        )


def q_lambda_targets(
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
    q_lambda: float,
) -> torch.Tensor:
    """Q(lambda) targets ``[..., T, 1]`` of a rollout (time in dim -2), by TorchRL's
    ``td_lambda_return_estimate`` with ``next_value`` = max_a Q(s'_t, a) (s'_t: the final
    observation where an episode ended). Its recursion is PQN's (CleanRL's ``pqn.py``, with
    the truncation bootstrap CleanRL leaves out)::

        G_t = r_t + gamma (1 - terminated_t) ((1 - lambda) V'_t + lambda G'_{t+1})
        G'_{t+1} = V'_t where done_t or t = T - 1, else G_{t+1}

    so a terminal step's target is r_t, a truncated one's r_t + gamma V'_t, and the trace never
    crosses an episode end."""
    return td_lambda_return_estimate(
        gamma, q_lambda, next_value, reward.to(next_value.dtype), done, terminated
    )


class PQN:
    """The LayerNorm Q-network, epsilon-greedy acting and RAdam; ``update`` runs one PQN phase.

    The agent contract (``accelrl.agent``): ``self.collect_policy`` acts epsilon-greedily with
    the epsilon of the current batch; ``self.eval_policy`` is greedy (eps-greedy at
    ``eval_eps`` for sampled episodes); ``export_module()`` the Q-network and its argmax.
    """

    def __init__(
        self,
        cfg: PQNConfig,
        *,
        obs_key: str,
        obs_shape: tuple[int, ...],
        num_actions: int,
        device: torch.device,
        mlp_hidden: tuple[int, ...] = (64, 64),
        on_nonfinite: str = "stop",
        compile_loss: bool = False,
        precision: Plan = FP32_PLAN,
    ) -> None:
        self.cfg = cfg
        self.device = device
        self.obs_key = obs_key
        self.guard = NonFiniteGuard(on_nonfinite)
        # --precision.*: the update's autocast and fp16's loss scaler; weights and targets fp32.
        self.precision = precision.learner
        self.scaler = precision.learner.grad_scaler()
        spec = Categorical(num_actions)
        net = QNetwork(obs_shape, num_actions, mlp_hidden=mlp_hidden, layer_norm=True).to(device)
        precision.prepare(net)
        self.q_network = net  # a plain module: observations in, Q-values out
        q_module = DirectTensorDictModule(net, in_keys=[obs_key], out_keys=["action_value"])
        self.greedy = GreedyQValueActor(q_module, spec=spec)
        # Epsilon is a buffer: collectors' workers receive it with the weights
        # (``update_policy_weights_``), and checkpoints hold it. ``update`` sets it for the
        # next rollout; TorchRL's own annealing (``step()``) is not used.
        self.explore = EGreedyModule(spec, eps_init=cfg.eps_start, eps_end=cfg.eps_end).to(device)
        self.collect_policy = precision.acting(TensorDictSequential(self.greedy, self.explore))
        self.eval_policy = TensorDictSequential(
            self.greedy, EGreedyModule(spec, eps_init=cfg.eval_eps, eps_end=cfg.eval_eps)
        )
        self.params = list(net.parameters())
        self.optimizer = torch.optim.RAdam(self.params, lr=cfg.lr, eps=cfg.eps)
        self._loss = torch.compile(self._minibatch_loss) if compile_loss else self._minibatch_loss

    # --- schedules ----------------------------------------------------------------------------

    def lr_at(self, progress: float) -> float:
        """Learning rate at ``progress`` in [0, 1] of the run's frames."""
        return self.cfg.lr * (max(0.0, 1.0 - progress) if self.cfg.anneal_lr else 1.0)

    def epsilon_at(self, progress: float) -> float:
        """Exploration rate at ``progress`` in [0, 1] of the run's frames: linear from eps_start
        to eps_end over eps_decay_fraction, then constant."""
        c = self.cfg
        return c.eps_start + min(progress / c.eps_decay_fraction, 1.0) * (c.eps_end - c.eps_start)

    @property
    def epsilon(self) -> float:
        """The epsilon the collectors act with now."""
        return float(self.explore.eps)

    # --- the update ---------------------------------------------------------------------------

    @torch.no_grad()
    def targets(self, batch: TensorDictBase) -> torch.Tensor:
        """Q(lambda) targets ``[envs, T]`` of a ``[envs, T]`` batch (``q_lambda_targets``).

        max_a Q(s'_t, a) is the next root step's max over its Q-values, except after an
        episode end (the next observation is the final one, before the autoreset) and at the
        last step, where the network runs on those next observations only."""
        nxt = batch.get("next")
        with self.precision.autocast():
            value = self.q_network(batch.get(self.obs_key)).max(-1).values
            next_value = torch.roll(value, shifts=-1, dims=-1).clone()
            need = ends(nxt.get("done").squeeze(-1))
            next_obs = next_obs_at_ends(batch, self.obs_key, need)  # either layout
            next_value[need] = self.q_network(next_obs).max(-1).values
        return q_lambda_targets(
            next_value.unsqueeze(-1),
            nxt.get("reward"),
            nxt.get("gae_done"),
            nxt.get("gae_terminated"),
            self.cfg.gamma,
            self.cfg.q_lambda,
        ).squeeze(-1)

    def _minibatch_loss(
        self, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(MSE between Q(s, a) and the targets, mean Q(s, a)); computed under the learner's
        autocast, Q-values and loss in fp32."""
        with self.precision.autocast():
            q = self.q_network(obs).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return F.mse_loss(q, target), q.detach().mean()

    def update(self, batch: TensorDictBase, progress: float) -> dict[str, float]:
        """One PQN phase on a ``[envs, T]`` batch: Q(lambda) targets, then epochs x minibatches
        of MSE steps (random minibatches of steps, drawn with ``torch.randperm`` each epoch).
        Then epsilon for the next rollout is set from ``progress`` (the part of the run's
        frames collected), so the schedule advances once per batch, not per agent step.
        Returns the mean metrics over the minibatch steps and the epsilon this batch was
        acted with."""
        lr = self.lr_at(progress)
        set_lr(self.optimizer, lr)
        batch = batch.to(self.device)
        mark_boundaries(batch, self.cfg.life_loss_boundary)
        target = self.targets(batch).reshape(-1)
        obs = batch.get(self.obs_key)
        obs = obs.reshape(-1, *obs.shape[batch.ndim :])
        action = batch.get("action").reshape(-1)
        n = target.shape[0]
        size = n // self.cfg.minibatches
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        steps = 0
        for _ in range(self.cfg.epochs):
            order = torch.randperm(n, device=self.device)
            for start in range(0, n, size):
                idx = order[start : start + size]
                loss, q_mean = self._loss(obs[idx], action[idx], target[idx])
                grad_norm = gradient_step(
                    self.optimizer,
                    loss,
                    self.params,
                    self.cfg.max_grad_norm,
                    self.guard,
                    self.scaler,
                )
                sums += torch.stack([loss.detach(), q_mean, grad_norm.to(loss.device)]).to(sums)
                steps += 1
        acted = self.epsilon
        self.explore.eps.fill_(self.epsilon_at(progress))
        loss, q_mean, grad_norm = (sums / steps).tolist()
        return {
            "loss/q": loss,
            "train/q_values": q_mean,
            "train/q_target": float(target.mean()),
            "train/grad_norm": grad_norm,
            "train/lr": lr,
            "train/epsilon": acted,
            "train/skipped_steps": self.guard.skipped,
        }

    # --- the agent contract -------------------------------------------------------------------

    def export_module(self) -> torch.nn.Module:
        """The Q-network and the argmax of its Q-values, as a plain module sharing the weights."""
        return GreedyQ(self.q_network, None).eval()

    def networks(self) -> list[torch.nn.Module]:
        # ``explore`` holds the acting epsilon (a buffer), which the workers must receive.
        return [self.q_network, self.explore]

    def initial_state(self, num_envs: int) -> None:
        return None  # feed-forward

    def state_dict(self) -> dict:
        return {
            "q_network": self.q_network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            # The acting epsilon: a resumed run collects its next batch with the epsilon the
            # schedule had reached, not eps_start.
            "explore": self.explore.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.q_network.load_state_dict(state["q_network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.explore.load_state_dict(state["explore"])
