"""The DQN family: TorchRL's ``DQNLoss`` / ``DistributionalDQNLoss`` with flags that combine.

``double`` (van Hasselt et al. 2016), ``dueling`` (Wang et al. 2016), ``n_step`` returns,
``prioritized`` replay (Schaul et al. 2016) and ``distributional`` C51 (Bellemare et al. 2017)
combine freely; the ``rainbow`` preset turns them all on without noisy nets (the paper's
eps-Rainbow). TorchRL's ``DistributionalDQNLoss`` has no double-Q switch: with
``distributional`` the online network always picks the bootstrap action (by expected value)
and the target network scores it, i.e. it is always double. The updates compute both losses
directly from the two networks, with ``DQNLoss`` / ``DistributionalDQNLoss`` holding the
parameters and target parameters (``DQN._q_terms``, ``DQN._c51_terms``: TorchRL's forward
costs as much as the update on small networks).

Presets for the paper's large batches keep the training intensity (replayed samples per
collected sample, 8 as in the Atari papers) and grow the number of simulators with the batch,
scaling Adam's learning rate with the square root of the batch size (docs/results/large-batches.md).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from tensordict.utils import expand_as_right
from torchrl.data import Categorical
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules import DistributionalQValueActor, EGreedyModule, QValueActor
from torchrl.objectives import DistributionalDQNLoss, DQNLoss, HardUpdate, SoftUpdate
from torchrl.objectives.utils import ValueEstimators

from accelrl.algos.common import NonFiniteGuard, gradient_step
from accelrl.algos.direct_grad import ChainGradient
from accelrl.compat import dqn_target_params, hard_update_now, qvalue_actor_modules
from accelrl.errors import ConfigError, check_positive
from accelrl.models import DirectTensorDictModule, GreedyQ, QNetwork
from accelrl.optim import adam
from accelrl.precision import FP32_PLAN, Plan

Preset = Literal["none", "rainbow", "dqn-512", "cat-dqn-2048", "rainbow-512", "minatar"]


@dataclass
class DQNConfig:
    """DQN-family hyperparameters; defaults are Nature DQN's with Adam (Dopamine's settings)."""

    preset: Preset = "none"
    """rainbow: double+dueling+n-step 3+prioritized+distributional. dqn-512, cat-dqn-2048,
    rainbow-512: the paper's large batches. minatar: the MinAtar paper's DQN (for MinAtar/...
    games). A preset sets every flag the command line does not give (a flag given at its
    default value keeps it); from Python, every field still at its default unless
    ``accelrl.cli.mark_given`` names the ones set."""
    double: bool = False
    """Double DQN: the online network picks the bootstrap action, the target network scores it."""
    dueling: bool = False
    """Dueling heads: separate state-value and advantage streams."""
    n_step: int = 1
    """Steps of reward summed before bootstrapping (n-step returns)."""
    prioritized: bool = False
    """Prioritized replay: sample transitions by their TD error (priority_alpha, priority_beta)."""
    distributional: bool = False
    """C51: learn a distribution of returns over atoms between v_min and v_max."""
    atoms: int = 51
    """Distributional: support points of the return distribution (>= 2)."""
    v_min: float = -10.0
    """Distributional: the lowest return the support represents."""
    v_max: float = 10.0
    """Distributional: the highest return the support represents (> v_min)."""
    batch_size: int = 32
    """Transitions per gradient step."""
    lr: float = 1e-4
    """Adam's learning rate (scaled by --dist.lr-scaling with several ranks)."""
    adam_eps: float = 1.5e-4
    """Adam's epsilon."""
    gamma: float = 0.99
    """Discount factor, in [0, 1]."""
    training_intensity: float = 8.0
    """Replayed samples per collected sample (updates per batch = intensity x batch frames /
    batch_size)."""
    learning_starts_frames: int = 80_000
    """Emulator frames collected with the initial epsilon before the first update."""
    target_update_interval: int = 2_000
    """Updates between hard target-network copies (when tau is 0)."""
    tau: float = 0.0
    """> 0: Polyak-average the target network by tau after every update instead."""
    eps_start: float = 1.0
    """Exploration: epsilon of epsilon-greedy acting at the start, in [0, 1]."""
    eps_end: float = 0.01
    """Exploration: epsilon after eps_decay_frames, in [0, eps_start]."""
    eps_decay_frames: int = 1_000_000
    """Emulator frames over which epsilon decays linearly from eps_start to eps_end."""
    eval_eps: float = 0.001
    """Epsilon of evaluation episodes, in [0, 1]."""
    max_grad_norm: float = 10.0
    """Clip the gradient's global norm to this before each step."""
    replay_capacity: int = 1_000_000
    """Transitions the replay holds (the oldest are overwritten); at least batch_size."""
    replay_dir: str | None = None
    """Folder for the memmap replay storage (None: in RAM)."""
    priority_alpha: float = 0.5
    """Prioritized: how strongly priorities skew sampling, in [0, 1] (0: uniform)."""
    priority_beta: float = 0.4
    """Importance-sampling exponent, annealed linearly to 1 over the run."""
    life_loss_boundary: bool = True
    """Treat a lost life as terminal in the targets (the game goes on)."""
    asynchronous: bool = False
    """Collect into the replay in a background thread while the learner samples from it
    (``accelrl.replay.feeder``); a throttle holds replayed / collected at training_intensity."""


def large_batch(batch_size: int, lr_at_32: float) -> dict:
    """A large-batch preset's scaled values: ``batch_size``; Adam's learning rate ``lr_at_32``
    x sqrt(batch_size / 32); the target network copied every ``2000 x 32 / batch_size``
    updates. At the same training intensity an update of ``batch_size`` comes once per
    ``batch_size / 8`` agent steps, so the copy stays every 8,000 agent steps, as at batch 32
    with the default 2000 updates: kept at batch 32's count of updates, the copy comes 16x less
    often per frame at batch 512, which scored lower (docs/results/large-batches.md)."""
    return dict(
        batch_size=batch_size,
        lr=lr_at_32 * math.sqrt(batch_size / 32),
        target_update_interval=round(2000 * 32 / batch_size),
    )


PRESETS: dict[str, dict] = {
    "rainbow": dict(
        double=True, dueling=True, n_step=3, prioritized=True, distributional=True, lr=6.25e-5
    ),
    "dqn-512": dict(double=True, **large_batch(512, 1e-4)),
    "cat-dqn-2048": dict(distributional=True, **large_batch(2048, 6.25e-5)),
    "rainbow-512": dict(
        double=True,
        dueling=True,
        n_step=3,
        prioritized=True,
        distributional=True,
        **large_batch(512, 6.25e-5),
    ),
    # Young & Tian (2019), MinAtar's DQN: batch 32, one update per agent step (intensity 32),
    # replay 100k, first update after 5k frames, target copy every 1000 updates, epsilon 1 ->
    # 0.1 over 100k frames (one frame per step: no frame skip). Their RMSprop at 2.5e-4 is Adam
    # at 2.5e-4 here.
    "minatar": dict(
        lr=2.5e-4,
        training_intensity=32.0,
        replay_capacity=100_000,
        learning_starts_frames=5_000,
        target_update_interval=1_000,
        eps_end=0.1,
        eps_decay_frames=100_000,
    ),
}
"""Preset values; the recipe also sets ``env.num_envs`` so each update meets about
``batch_size / training_intensity`` fresh agent steps (see ``preset_num_envs``)."""


def apply_preset(cfg: DQNConfig, given: Collection[str] | None = None) -> DQNConfig:
    """``cfg`` with its preset's values in every field the user did not give: ``given`` names
    the fields given (``lr``, ``double``), whatever their values, so ``--dqn.lr 1e-4`` keeps
    1e-4 even though it is the default. ``None`` (a config built in Python without naming
    them): every field still at its default takes the preset's value."""
    if cfg.preset == "none":
        return cfg
    defaults = DQNConfig()

    def free(name: str) -> bool:
        if given is None:
            return getattr(cfg, name) == getattr(defaults, name)
        return name not in given

    changes = {name: value for name, value in PRESETS[cfg.preset].items() if free(name)}
    return dataclasses.replace(cfg, **changes)


def preset_num_envs(cfg: DQNConfig) -> int:
    """Simulators for a batch size: one fresh agent step per env per update (batch_size /
    training_intensity of them: 64 for dqn-512 at intensity 8, 1 for minatar)."""
    return max(1, round(cfg.batch_size / cfg.training_intensity))


def validate_dqn(cfg: DQNConfig, prefix: str = "dqn") -> None:
    if cfg.preset not in ("none", *PRESETS):
        raise ConfigError(f"{prefix}.preset", cfg.preset, f"must be none or one of {list(PRESETS)}")
    for name in ("n_step", "batch_size", "lr", "adam_eps", "training_intensity", "max_grad_norm"):
        check_positive(f"{prefix}.{name}", getattr(cfg, name))
    for name in ("target_update_interval", "replay_capacity", "eps_decay_frames"):
        check_positive(f"{prefix}.{name}", getattr(cfg, name))
    check_positive(f"{prefix}.learning_starts_frames", cfg.learning_starts_frames, zero_ok=True)
    if cfg.atoms < 2:
        raise ConfigError(f"{prefix}.atoms", cfg.atoms, "must be >= 2")
    probabilities = ("eps_start", "eps_end", "eval_eps", "priority_alpha", "priority_beta")
    for name in ("gamma", "tau", *probabilities):
        value = getattr(cfg, name)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{prefix}.{name}", value, "must be in [0, 1]")
    if cfg.eps_end > cfg.eps_start:
        raise ConfigError(
            f"{prefix}.eps_end", cfg.eps_end, f"must be <= eps_start={cfg.eps_start} (it decays)"
        )
    if cfg.distributional and cfg.v_min >= cfg.v_max:
        raise ConfigError(f"{prefix}.v_min", cfg.v_min, f"must be < v_max={cfg.v_max}")
    if cfg.replay_capacity < cfg.batch_size:
        raise ConfigError(
            f"{prefix}.replay_capacity",
            cfg.replay_capacity,
            f"must hold at least one batch (batch_size={cfg.batch_size})",
        )


class HardTargetUpdate(HardUpdate):
    """Copies the online weights into the target network every ``interval`` updates.

    TorchRL 0.14's ``HardUpdate`` copies on every (interval + 1)-th step (its counter runs from 0
    to interval inclusive) and walks every parameter on every step; this one counts updates and
    copies after exactly ``interval`` of them (``tests/test_dqn_math.py``). The counter is in
    ``state_dict`` (TorchRL's), so resumed runs copy on the same updates.
    """

    def step(self) -> None:
        self.counter += 1
        if self.counter >= self.value_network_update_interval:
            hard_update_now(self)
            self.counter = 0


class GreedyQValueActor(QValueActor):
    """TorchRL's ``QValueActor`` for categorical actions, with its two modules' work done in
    one forward: the Q-network's action values, their argmax (the action) and the chosen
    action's value, under the keys ``QValueModule`` writes.

    TorchRL's path (a sequence of a TensorDict module and ``QValueModule``, with its key
    filtering, spec shape checks and ``TensorDict.update``) costs more than a small Q-network's
    own forward pass, at every acting step (docs/development-notes.md#torchrl-and-tensordict).
    Parameters, state dict and the loss modules' view
    of it are TorchRL's; masked actions and calls with extra arguments take TorchRL's path.
    """

    def forward(self, tensordict: TensorDictBase, *args, **kwargs) -> TensorDictBase:
        q_module = qvalue_actor_modules(self)[0]
        outputs = None if args or kwargs else self.act(tensordict.get(q_module.in_keys[0]))
        if outputs is None:
            return super().forward(tensordict, *args, **kwargs)
        for key, value in outputs.items():
            tensordict.set(key, value)
        return tensordict

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """What ``forward`` writes for the observation tensor ``obs``, by key: the action
        values, their argmax (the action) and the chosen action's value; None where it takes
        TorchRL's path (an action mask, other action spaces)."""
        q_module, head = qvalue_actor_modules(self)
        if head.action_mask_key is not None or head.action_space != "categorical":
            return None
        values = q_module.module(obs)
        action = values.argmax(-1)
        action_key, value_key, chosen_key = head.out_keys
        chosen = values.gather(-1, action.unsqueeze(-1))
        return {value_key: values, action_key: action, chosen_key: chosen}


class EGreedyQPolicy(TensorDictSequential):
    """``TensorDictSequential(greedy, explore)``: a ``GreedyQValueActor`` then a
    ``ScheduledEGreedy``, with ``lean_outputs`` for ``accelrl.collectors.LeanCollector``: both
    modules' work on the observation tensor, without the TensorDicts between them."""

    def lean_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
        """What ``forward`` writes for a TensorDict holding only the observation ``obs`` (its
        ``out_keys``' tensors, in that order), the same draws in the same order; None where
        that takes TorchRL's path (masks, distributional heads, an explorer on a GPU)."""
        greedy, explore = self.module
        if not (
            isinstance(greedy, GreedyQValueActor)
            and isinstance(explore, ScheduledEGreedy)
            and explore.direct()
        ):
            return None
        outputs = greedy.act(obs)
        if outputs is None:
            return None
        key = explore.action_key
        outputs[key] = explore.act(outputs[key])
        return tuple(outputs[key] for key in self.out_keys)


class ScheduledEGreedy(EGreedyModule):
    """Epsilon-greedy whose epsilon follows its linear schedule at every acting step.

    TorchRL's ``EGreedyModule`` changes epsilon only on ``step()``; a recipe calls it once per
    collected batch, so every step of a batch acts with the epsilon of the batch's start. This
    module keeps the emulator frames acted so far in the buffer ``frames``: each exploring
    forward pass (interaction type RANDOM, which collectors set) takes epsilon from the schedule
    at ``frames`` and then adds its batch's agent steps times ``run_frames_per_step`` (frames
    per agent step times data-parallel ranks, each rank's simulators standing for its share).
    So epsilon falls step by step, as in CleanRL and Stable-Baselines3 and ``reference.classic``.

    ``frames`` is a buffer, so collector workers share it: TorchRL puts a CPU policy's
    parameters and buffers in shared memory (``MultiSyncCollector`` workers' counts add up), and
    ``update_policy_weights_`` copies it to a collector's own copy of the policy. ``set_frames``
    puts it back on the learner's count after each batch, and a resumed run restores it with
    the checkpoint. Other forward passes (evaluation, a collector's spec probe) leave it alone.
    """

    def __init__(
        self,
        spec: Categorical,
        *,
        eps_start: float,
        eps_end: float,
        decay_frames: int,
        run_frames_per_step: int = 1,
    ) -> None:
        super().__init__(spec, eps_init=eps_start, eps_end=eps_end, annealing_num_steps=1)
        self.decay_frames = decay_frames
        self.run_frames_per_step = run_frames_per_step
        self.register_buffer("frames", torch.zeros((), dtype=torch.int64))
        self._categorical = spec if isinstance(spec, Categorical) else None  # the fast path's

    def epsilon(self, frames: int | torch.Tensor) -> torch.Tensor:
        """Epsilon after ``frames`` emulator frames (linear decay, then constant)."""
        progress = torch.as_tensor(frames, dtype=torch.float64) / self.decay_frames
        start, end = self.eps_init.double(), self.eps_end.double()
        return start + progress.clamp(max=1.0) * (end - start)

    def set_frames(self, frames: int) -> None:
        self.frames.fill_(frames)

    def direct(self) -> bool:
        """Whether ``act`` computes what ``forward`` does now (an exploring pass over
        categorical actions without a mask)."""
        return (
            exploration_type() == ExplorationType.RANDOM
            and self._categorical is not None
            and self._categorical.mask is None
            and not self.action_mask_key
            and self.eps.device.type == "cpu"
        )

    def act(self, action: torch.Tensor) -> torch.Tensor:
        """``forward``'s exploring pass on the greedy ``action`` tensor ``[rows]`` of a batch
        ``[rows]`` (``direct`` must hold): the same epsilon, draws and frame count."""
        self._set_eps_cpu()
        out = self._draw(action, action.shape)
        self.frames.add_(action.numel() * self.run_frames_per_step)
        return out

    def _set_eps_cpu(self) -> None:
        # ``epsilon`` in Python floats: the same float64 operations, fewer calls.
        progress = min(int(self.frames) / self.decay_frames, 1.0)
        start, end = float(self.eps_init), float(self.eps_end)
        self.eps.fill_(start + progress * (end - start))

    def _draw(self, action: torch.Tensor, batch_shape: torch.Size) -> torch.Tensor:
        # EGreedyModule.forward's draws, in its order (the same actions for the same seed).
        device, spec = self.eps.device, self._categorical
        explore = torch.rand(batch_shape, device=device) < self.eps
        random = torch.randint(0, spec.space.n, action.shape, device=device, dtype=spec.dtype)
        if explore.dim() < action.dim():
            explore = expand_as_right(explore, action)
        return torch.where(explore, random, action)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if exploration_type() != ExplorationType.RANDOM:
            return super().forward(tensordict)
        spec = self._categorical
        if spec is None or spec.mask is not None or self.action_mask_key:
            self.eps.copy_(self.epsilon(self.frames))
            out = super().forward(tensordict)
        else:
            # EGreedyModule.forward's draws, in its order (the same actions for the same
            # seed), without its per-call spec expansion and checks: they cost as much as the
            # CartPole Q-network's forward pass, at every acting step. Epsilon as ``epsilon``
            # computes it: on CPU in Python floats (the same float64 operations, fewer calls),
            # on a GPU on the device (reading the count would wait for the device).
            if self.eps.device.type == "cpu":
                self._set_eps_cpu()
            else:
                self.eps.copy_(self.epsilon(self.frames))
            action = self._draw(tensordict.get(self.action_key), tensordict.shape)
            tensordict.set(self.action_key, action)
            out = tensordict
        self.frames.add_(tensordict.numel() * self.run_frames_per_step)
        return out


class DQN:
    """Owns the Q-network, its target, the loss and the optimizer.

    The agent contract (``accelrl.agent``): ``self.collect_policy`` (epsilon-greedy over the
    Q-network) collects; ``self.eval_policy`` evaluates and plays (greedy, or eps-greedy at
    ``eval_eps`` for sampled episodes);
    ``update(sample)`` takes one gradient step and returns per-sample priorities.
    """

    def __init__(
        self,
        cfg: DQNConfig,
        *,
        obs_key: str,
        obs_shape: tuple[int, ...],
        num_actions: int,
        device: torch.device,
        mlp_hidden: tuple[int, ...] = (64, 64),
        on_nonfinite: str = "stop",
        compile_loss: bool = False,
        run_frames_per_step: int = 1,
        precision: Plan = FP32_PLAN,
    ) -> None:
        self.cfg = cfg
        self.device = device
        self.obs_key = obs_key
        self.guard = NonFiniteGuard(on_nonfinite)
        # --precision.*: the update's autocast and fp16's loss scaler (``accelrl.precision``);
        # weights, targets and the target network's copy stay fp32.
        self.precision = precision.learner
        self.scaler = precision.learner.grad_scaler()
        spec = Categorical(num_actions)
        net = QNetwork(
            obs_shape,
            num_actions,
            dueling=cfg.dueling,
            atoms=cfg.atoms if cfg.distributional else 1,
            mlp_hidden=mlp_hidden,
        ).to(device)
        precision.prepare(net)  # before the loss and the target network copy it
        self.q_network = net  # a plain module: frames or observations in, Q-values out
        self.support = (
            torch.linspace(cfg.v_min, cfg.v_max, cfg.atoms, device=device)
            if cfg.distributional
            else None
        )
        # TorchRL would wrap ``net`` in a TensorDictModule; ours writes its output directly.
        q_module = DirectTensorDictModule(net, in_keys=[obs_key], out_keys=["action_value"])
        if cfg.distributional:
            self.greedy = DistributionalQValueActor(
                q_module, spec=spec, support=self.support, action_space="categorical"
            )
            self.loss = DistributionalDQNLoss(
                self.greedy, gamma=cfg.gamma, delay_value=True, reduction="none"
            )
        else:
            self.greedy = GreedyQValueActor(q_module, spec=spec)
            self.loss = DQNLoss(
                self.greedy,
                loss_function="smooth_l1",
                delay_value=True,
                double_dqn=cfg.double,
                reduction="none",
            )
            self.loss.make_value_estimator(ValueEstimators.TD0, gamma=cfg.gamma)
        # reduction="none": TorchRL's mean with importance weights is (w l).sum() / w.sum(),
        # which undoes the 1 / max(w) scaling of prioritized replay (Schaul et al. 2016) and
        # makes steps larger than the paper's; ``update`` takes mean(w l) as the paper does.
        # The replay writes the n-step bootstrap distance k to "steps_to_next_obs"; both losses
        # (DQNLoss through its TD(0) estimator) then bootstrap with gamma**k.
        # Acting: epsilon falls at every agent step (``ScheduledEGreedy``);
        # ``run_frames_per_step``: the emulator frames one agent step here stands for in the
        # whole run (frames per step x data-parallel ranks).
        self.explore = ScheduledEGreedy(
            spec,
            eps_start=cfg.eps_start,
            eps_end=cfg.eps_end,
            decay_frames=cfg.eps_decay_frames,
            run_frames_per_step=run_frames_per_step,
        ).to(device)
        self.collect_policy = precision.acting(EGreedyQPolicy(self.greedy, self.explore))
        # Evaluation: greedy episodes ignore epsilon; "sampled" ones act eps-greedy at eval_eps.
        self.eval_policy = TensorDictSequential(
            self.greedy, EGreedyModule(spec, eps_init=cfg.eval_eps, eps_end=cfg.eval_eps)
        )
        if cfg.tau > 0:
            self.target = SoftUpdate(self.loss, tau=cfg.tau)
        else:
            self.target = HardTargetUpdate(
                self.loss, value_network_update_interval=cfg.target_update_interval
            )
        self.params = list(self.greedy.parameters())
        self.optimizer = adam(self.params, lr=cfg.lr, eps=cfg.adam_eps)
        # Expected-value DQN computes its loss from the two networks directly (``_q_terms``):
        # TorchRL's DQNLoss swaps parameter TensorDicts into the network for each of its two or
        # three forward passes and builds several TensorDicts a step, which cost about as much
        # as the update itself on small networks (docs/development-notes.md#torchrl-and-tensordict).
        # The loss module still owns the parameters, the target parameters (updated in place
        # by HardUpdate / SoftUpdate) and the checkpoint state; ``target_network`` is a copy
        # of the Q-network whose tensors *are* those target parameters, so it always holds the
        # current target weights (``tests/test_dqn_math.py`` checks both paths agree).
        # C51 likewise (``_c51_terms``): TorchRL's ``DistributionalDQNLoss`` runs three forward
        # passes through parameter swaps and projects on the CPU in float32, several times the
        # plain loop's time for the loss
        # (docs/results/speed.md#the-dqn-update-next-to-the-plain-loops).
        # ``_loss_terms`` (TorchRL's loss modules themselves) stays as the oracle the tests
        # compare both with.
        self.target_network = copy.deepcopy(net).requires_grad_(False)
        dqn_target_params(self.loss).to_module(self.target_network)
        terms = self._c51_terms if cfg.distributional else self._q_terms
        # --compile.loss: the loss terms (online and target networks, targets) as one
        # torch.compile graph; backward, optimizer step and target updates stay eager.
        self._loss = torch.compile(terms) if compile_loss else terms
        # An fp32 expected-value update on a CPU whose Q-network is a chain of Linear, Conv2d,
        # ReLU and Flatten layers computes its gradient layer by layer without autograd's
        # graph (``accelrl.algos.direct_grad``; the same kernels: with ``accelrl.optim``'s calls
        # 1.19-1.26x the updates a second on CartPole's MLP and the MinAtar CNN,
        # docs/results/speed.md#the-dqn-update-next-to-the-plain-loops).
        direct = not (compile_loss or cfg.distributional or self.precision.dtype is not None)
        direct = direct and device.type == "cpu"
        self._chain = ChainGradient.of(net) if direct else None
        self._last: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None

    def epsilon(self, frames: int) -> float:
        """Exploration rate after ``frames`` emulator frames (linear decay, then constant)."""
        return float(self.explore.epsilon(frames))

    def acted(self, frames: int) -> None:
        """Set the acting schedule to ``frames`` emulator frames collected (all ranks): after
        each batch (collector workers' counts race) and after a resume."""
        self.explore.set_frames(frames)

    def beta(self, progress: float) -> float:
        """Importance-sampling exponent at ``progress`` in [0, 1] of the run."""
        return self.cfg.priority_beta + progress * (1.0 - self.cfg.priority_beta)

    def objective(self, sample: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, priorities [B]) of a replay sample: the mean over the batch of the per-sample
        Huber loss (C51: cross-entropy) times its importance weight ``_weight`` when present;
        priorities are |TD error| (C51: the cross-entropy). Under bf16/fp16 the networks compute
        in it and return fp32 Q-values (C51: logits), so targets, the C51 projection, the losses
        and their mean are fp32 (``accelrl.precision``)."""
        with self.precision.autocast():
            loss, priority = self._loss(sample.to(self.device))
        return loss, priority.detach()

    def terms(
        self, sample: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None] | None]:
        """(loss, priorities [B], the call that writes the loss's gradient): ``objective``'s
        loss and priorities, with ``None`` for autograd's ``loss.backward``, or, on a Q-network
        that is a chain of plain layers (``accelrl.algos.direct_grad``), the same figures and
        gradient without autograd's graph."""
        if self._chain is None:
            return (*self.objective(sample), None)
        return self._direct_terms(sample.to(self.device))

    def _loss_terms(self, sample: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """TorchRL's loss modules themselves: (mean of the weighted per-sample losses,
        priorities). The updates use ``_q_terms`` / ``_c51_terms``, which compute the same;
        the tests hold those against this."""
        if "_weight" in sample.keys():
            sample.set("priority_weight", sample.get("_weight"))
        # Per-sample losses, already times the importance weights; the loss module writes the
        # TD error into ``sample``: the cross-entropy (C51), the squared TD error (DQNLoss).
        loss = self.loss(sample)["loss"].mean()
        td_error = sample.get("td_error").reshape(-1)
        return loss, td_error if self.cfg.distributional else td_error.sqrt()

    def _c51_terms(self, sample: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """What ``DistributionalDQNLoss`` (``reduction="none"``) computes: (mean of the weighted
        per-sample cross-entropies between the projected target distribution and the online
        one at the taken action, the cross-entropies [B] as priorities). The online network
        picks the bootstrap action by expected value, the target network scores it; the
        projection runs in the networks' dtype on their device."""
        nxt = sample.get("next")
        next_obs = nxt.get(self.obs_key)
        action = sample.get("action").reshape(-1)
        rows = torch.arange(action.shape[0], device=action.device)
        # Logits [B, atoms, actions]: the atoms' (log-)softmax is taken only where it is used
        # (the taken action, the bootstrap action), and over the last dimension (a softmax
        # over the middle one is slower on a CPU:
        # docs/development-notes.md#pytorch-and-the-platform).
        log_p = self.q_network(sample.get(self.obs_key))[rows, :, action].log_softmax(-1)
        with torch.no_grad():
            support = self.support.to(log_p.dtype)
            online_next = self.q_network(next_obs).transpose(-1, -2).softmax(-1)  # [B, A, atoms]
            best = (online_next @ support).argmax(-1)  # by expected value
            p_next = self.target_network(next_obs)[rows, :, best].softmax(-1)
            reward = nxt.get("reward").reshape(-1, 1).to(log_p.dtype)
            k = sample.get("steps_to_next_obs", None)
            gamma = self.cfg.gamma if k is None else self.cfg.gamma ** k.reshape(-1, 1).to(reward)
            alive = 1 - nxt.get("terminated").reshape(-1, 1).to(reward.dtype)
            atoms, v_min, v_max = self.cfg.atoms, self.cfg.v_min, self.cfg.v_max
            tz = (reward + alive * gamma * support).clamp_(min=v_min, max=v_max)
            b = (tz - v_min) / ((v_max - v_min) / (atoms - 1))
            # Each atom's probability split between the two atoms around b by distance; b on
            # an atom (low == up) gives that atom all of it (TorchRL moves one index of the pair
            # instead: the same sums, exactly).
            low, up = b.floor(), b.ceil()
            m = torch.zeros_like(p_next)
            m.scatter_add_(1, low.long(), p_next * (up - b + (low == up).to(b.dtype)))
            m.scatter_add_(1, up.long(), p_next * (b - low))
        per_sample = -(m * log_p).sum(1)
        weight = sample.get("_weight", None)
        loss = per_sample * weight if weight is not None else per_sample
        return loss.mean(), per_sample.detach()

    def _q_terms(self, sample: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """What ``DQNLoss`` (TD(0) on the n-step sample, smooth-L1, ``reduction="none"``)
        computes: (mean of the weighted per-sample Huber losses, |TD errors| [B])."""
        action = sample.get("action").reshape(-1, 1)
        q = self.q_network(sample.get(self.obs_key)).gather(-1, action).squeeze(-1)
        target = self._q_target(sample)
        per_sample = F.smooth_l1_loss(q, target, reduction="none")
        weight = sample.get("_weight", None)
        if weight is not None:
            per_sample = per_sample * weight
        return per_sample.mean(), (q.detach() - target).abs()

    @torch.no_grad()
    def _q_target(self, sample: TensorDictBase) -> torch.Tensor:
        """The TD targets [B]: the n-step return plus gamma ** k times the bootstrap value of
        the next observation (none past a terminal)."""
        nxt = sample.get("next")
        next_obs = nxt.get(self.obs_key)
        next_q = self.target_network(next_obs)
        if self.cfg.double:  # the online network picks, the target network scores
            best = self.q_network(next_obs).argmax(-1, keepdim=True)
            bootstrap = next_q.gather(-1, best).squeeze(-1)
        else:
            bootstrap = next_q.max(-1).values
        # gamma ** k for a k-step sample (k < n at an episode end; TorchRL's key), 0 past a
        # terminal
        k = sample.get("steps_to_next_obs", None)
        reward = nxt.get("reward").reshape(-1)
        gamma = self.cfg.gamma if k is None else self.cfg.gamma ** k.reshape(-1).to(reward)
        discount = gamma * (~nxt.get("terminated")).reshape(-1)
        return reward + discount * bootstrap

    @torch.no_grad()
    def _direct_terms(
        self, sample: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None]]:
        """``_q_terms``' loss and priorities without autograd (``accelrl.algos.direct_grad``),
        and the call that writes the loss's gradient into the Q-network's ``.grad``: each
        step of autograd's backward (mean, importance weights, smooth-L1, gather, the network)
        with the kernel it calls."""
        chain = self._chain
        action = sample.get("action").reshape(-1, 1)
        q_all, saved = chain.forward(sample.get(self.obs_key))
        q = q_all.gather(-1, action).squeeze(-1)
        target = self._q_target(sample)
        per_sample = F.smooth_l1_loss(q, target, reduction="none")
        weight = sample.get("_weight", None)
        weighted = per_sample if weight is None else per_sample * weight
        loss = weighted.mean()

        @torch.no_grad()
        def backward() -> None:
            grad = torch.ones_like(weighted).div_(weighted.numel())  # MeanBackward0
            if weight is not None:
                grad = grad * weight  # MulBackward0
            grad = torch.ops.aten.smooth_l1_loss_backward(grad, q, target, 0, 1.0)
            grad_all = torch.zeros_like(q_all).scatter_add_(-1, action, grad.unsqueeze(-1))
            chain.backward(grad_all, saved)

        return loss, (q - target).abs(), backward

    def update(self, sample: TensorDictBase) -> torch.Tensor | None:
        """One gradient step on a replay sample; returns the per-sample priorities [B].

        None when the step was not applied (non-finite loss or gradient under
        ``--on-nonfinite skip``): a NaN priority would poison the sampler's sum tree.
        ``metrics()`` reads the step's figures.
        """
        loss, priority, backward = self.terms(sample)
        skipped = self.guard.skipped
        step = (self.optimizer, loss, self.params, self.cfg.max_grad_norm, self.guard)
        grad_norm = gradient_step(*step, self.scaler, backward=backward)
        applied = self.guard.skipped == skipped
        self.target.step()
        # Kept as tensors: the recipe logs one row per batch of (CartPole: 128) steps, so the
        # figures are read from the device once per row, not at every step.
        self._last = (loss.detach(), grad_norm, priority if applied else None)
        return priority if applied else None

    def metrics(self) -> dict[str, float]:
        """The last ``update``'s loss, gradient norm (before clipping), mean |TD error| (NaN
        for a skipped step) and the count of skipped steps; all NaN but the count when no
        update ran since the previous call (e.g. before learning starts), so that every
        metrics.csv row has the same columns."""
        last, self._last = self._last, None
        if last is None:
            values = [math.nan] * 3
        else:
            loss, norm, priority = last
            td = priority.mean() if priority is not None else torch.tensor(math.nan)
            # One host transfer for the three figures (each float() would wait on its own).
            values = torch.stack([loss, norm.to(loss.device), td.to(loss.device)]).tolist()
        return {
            "loss/q": values[0],
            "train/grad_norm": values[1],
            "train/td_error": values[2],
            "train/skipped_steps": self.guard.skipped,
        }

    def export_module(self) -> torch.nn.Module:
        """The Q-network and the argmax of its Q-values (of their expectation over C51's
        support), as a plain module sharing the weights."""
        return GreedyQ(self.q_network, self.support).eval()

    def networks(self) -> list[torch.nn.Module]:
        # The loss holds the online parameters (the Q-network's tensors) and the target ones
        # (as buffers; ``target_network`` holds the same tensors as parameters); ``explore``
        # the acting schedule's frame count.
        return [self.q_network, self.loss, self.explore, self.target_network]

    def initial_state(self, num_envs: int) -> None:
        return None  # feed-forward

    def state_dict(self) -> dict:
        return {
            "loss": self.loss.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "target": self.target.state_dict() if hasattr(self.target, "state_dict") else {},
            # The acting schedule's frame count (and epsilon): without it a resumed run collects
            # its first batch at eps_start.
            "explore": self.explore.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.loss.load_state_dict(state["loss"])
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("target") and hasattr(self.target, "load_state_dict"):
            self.target.load_state_dict(state["target"])
        self.explore.load_state_dict(state["explore"])
