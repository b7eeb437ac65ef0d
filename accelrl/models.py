"""Networks as TensorDict modules: conv trunks (Nature CNN, MinAtar CNN), an MLP trunk,
actor-critic heads, Q-networks. ``conv_trunk`` chooses the trunk from the observation shape.

Frames and grids arrive as uint8 and become float (frames scaled to [0, 1]) inside the trunk, on
whatever device the module lives on, so only bytes cross process and device boundaries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    InteractionType,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
)
from tensordict.nn.probabilistic import interaction_type
from torch import nn
from torchrl.modules import ActorValueOperator, ProbabilisticActor, ValueOperator

from accelrl.compat import write_outputs
from accelrl.precision import full
from accelrl.recurrent import CORES, LSTM, core_of


class _DirectWrite:
    """Writes tensor outputs straight into the TensorDict.

    ``TensorDictModule`` passes every output through ``TensorDict.from_any``, which for a plain
    tensor ends in ``importlib.util.find_spec("pandas")``: a scan of ``sys.path`` on every call
    when pandas is not installed (tensordict 0.14; three calls per actor-critic step; the cost:
    docs/development-notes.md#torchrl-and-tensordict). Non-tensor
    outputs still go through ``from_any``. Overrides tensordict's private hook of that name
    (``accelrl.compat`` lists it; ``tests/test_compat.py`` pins it). Outputs computed under
    bf16/fp16 autocast are written in fp32 (``accelrl.precision.full``): losses and batches
    read fp32 logits and values.
    """

    def _write_to_tensordict(
        self,
        tensordict: TensorDictBase,
        tensors: list[Any],
        tensordict_out: TensorDictBase | None = None,
        out_keys: Any = None,
    ) -> TensorDictBase:
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            return write_outputs(self, tensordict, tensors, tensordict_out, out_keys)  # type: ignore[arg-type]
        if out_keys is None:
            out_keys = self.out_keys_source  # type: ignore[attr-defined]
        if tensordict_out is None:
            if self.inplace is not True:  # type: ignore[attr-defined]
                return write_outputs(self, tensordict, tensors, tensordict_out, out_keys)  # type: ignore[arg-type]
            tensordict_out = tensordict
        if len(tensors) != len(out_keys):
            raise RuntimeError(f"{len(tensors)} outputs for out_keys {list(out_keys)}")
        for key, tensor in zip(out_keys, tensors, strict=True):
            if key != "_":
                tensordict_out.set(key, full(tensor))
        return tensordict_out


class DirectTensorDictModule(_DirectWrite, TensorDictModule):
    """``TensorDictModule`` without the per-output ``from_any`` lookup (see ``_DirectWrite``)."""


class DirectValueOperator(_DirectWrite, ValueOperator):
    """``ValueOperator`` without the per-output ``from_any`` lookup (see ``_DirectWrite``)."""


def orthogonal_(layer: nn.Module, gain: float) -> nn.Module:
    """Orthogonal weights with ``gain`` and zero bias (the standard Atari actor-critic init)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def conv_stack(
    in_channels: int,
    height: int,
    width: int,
    layers: Sequence[tuple[int, int, int]],
    *,
    layer_norm: bool = False,
) -> tuple[nn.Sequential, int]:
    """Convolutions ``(channels, kernel, stride)`` with orthogonal init (gain sqrt 2), each
    followed by ReLU (with ``layer_norm``: a LayerNorm over its whole ``[C, H, W]`` output
    first, as PQN's networks), then a flatten; returns the stack and its output width."""
    gain = math.sqrt(2)
    modules: list[nn.Module] = []
    for channels, kernel, stride in layers:
        modules.append(orthogonal_(nn.Conv2d(in_channels, channels, kernel, stride=stride), gain))
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        if layer_norm:
            modules.append(nn.LayerNorm([channels, height, width]))
        modules.append(nn.ReLU())
        in_channels = channels
    return nn.Sequential(*modules, nn.Flatten()), in_channels * height * width


def dense(in_features: int, out_features: int, *, layer_norm: bool = False) -> nn.Sequential:
    """A hidden layer: orthogonal init (gain sqrt 2), [LayerNorm,] ReLU."""
    layer = orthogonal_(nn.Linear(in_features, out_features), math.sqrt(2))
    norm = [nn.LayerNorm(out_features)] if layer_norm else []
    return nn.Sequential(layer, *norm, nn.ReLU())


class NatureCNN(nn.Module):
    """Mnih et al. (2015) trunk: conv 32x8s4, 64x4s2, 64x3s1, then a 512-unit layer, ReLU.
    ``layer_norm``: a LayerNorm before each ReLU (PQN, Gallici et al. 2025)."""

    input_scale = 1.0 / 255.0
    """Frames arrive as uint8 0..255."""

    def __init__(
        self,
        in_channels: int = 4,
        screen_size: int = 84,
        features: int = 512,
        *,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        self.convs, flat = conv_stack(
            in_channels,
            screen_size,
            screen_size,
            [(32, 8, 4), (64, 4, 2), (64, 3, 1)],
            layer_norm=layer_norm,
        )
        self.fc = dense(flat, features, layer_norm=layer_norm)
        self.out_features = features

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return conv_forward(self, pixels)


class MinAtarCNN(nn.Module):
    """Young & Tian (2019) trunk for MinAtar's 10x10 grids: one 3x3 conv of 16 channels at
    stride 1, ReLU, flatten, a 128-unit layer, ReLU. Initialised as ``NatureCNN``;
    ``layer_norm`` as there."""

    input_scale = 1.0
    """Grids arrive as uint8 0/1."""

    def __init__(
        self, in_channels: int, height: int = 10, width: int = 10, *, layer_norm: bool = False
    ) -> None:
        super().__init__()
        self.convs, flat = conv_stack(
            in_channels, height, width, [(16, 3, 1)], layer_norm=layer_norm
        )
        self.fc = dense(flat, 128, layer_norm=layer_norm)
        self.out_features = 128

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        return conv_forward(self, grid)


ConvTrunk = NatureCNN | MinAtarCNN

NATURE_CNN_MIN_SIZE = 36
"""The smallest frame the Nature CNN's convolutions fit (8x8 stride 4, 4x4 stride 2, 3x3)."""


def conv_trunk(obs_shape: Sequence[int], *, layer_norm: bool = False) -> ConvTrunk | None:
    """The trunk an observation shape gets: frames ``[stack, H, W]`` of at least 36 pixels the
    Nature CNN, smaller grids ``[C, H, W]`` (MinAtar's ``[C, 10, 10]``) the MinAtar CNN, and
    vectors none (None: the caller builds MLPs). ``layer_norm``: a LayerNorm before each ReLU."""
    if len(obs_shape) != 3:
        return None
    channels, height, width = obs_shape
    if min(height, width) >= NATURE_CNN_MIN_SIZE:
        return NatureCNN(in_channels=channels, screen_size=width, layer_norm=layer_norm)
    return MinAtarCNN(in_channels=channels, height=height, width=width, layer_norm=layer_norm)


def as_float(obs: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """``obs`` as a new ``dtype`` tensor times ``scale`` (copy=True: never scale a caller's float
    tensor in place). ``dtype`` is the weights': float32, or float64 in the parity tests."""
    x = obs.to(dtype, copy=True)
    return x if scale == 1.0 else x.mul_(scale)


def conv_forward(trunk: ConvTrunk, obs: torch.Tensor) -> torch.Tensor:
    """Features ``[..., out_features]`` of observations ``[..., C, H, W]`` (any batch dims)."""
    x = as_float(obs, trunk.input_scale, trunk.fc[0].weight.dtype)
    batch = x.shape[:-3]
    y = trunk.fc(trunk.convs(x.reshape(-1, *x.shape[-3:])))
    return y.reshape(*batch, -1)


class MLP(nn.Module):
    """MLP trunk for vector observations.

    Actor-critics use the policy-gradient convention (Tanh, orthogonal init with gain sqrt 2,
    as CleanRL and Stable-Baselines3); Q-networks use the DQN convention (ReLU, PyTorch's
    default init): action values grow to ~1/(1 - gamma), and a Tanh trunk with orthogonal init
    saturates on the way (it held DQN on CartPole far below its ReLU score:
    docs/development-notes.md#settings-that-learn-cartpole-the-tests-use-them).
    ``layer_norm`` (Q-networks): a LayerNorm before each ReLU (PQN, Gallici et al. 2025).
    """

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int] = (64, 64),
        *,
        q_values: bool = False,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        if layer_norm and not q_values:
            raise ValueError("layer_norm is for Q-networks (q_values=True)")
        layers: list[nn.Module] = []
        for width in hidden:
            if q_values:
                norm = [nn.LayerNorm(width)] if layer_norm else []
                layers += [nn.Linear(in_features, width), *norm, nn.ReLU()]
            else:
                layers += [orthogonal_(nn.Linear(in_features, width), math.sqrt(2)), nn.Tanh()]
            in_features = width
        self.net = nn.Sequential(*layers)
        self.out_features = in_features

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


def make_actor_critic(
    obs_key: str,
    obs_shape: Sequence[int],
    num_actions: int,
    *,
    mlp_hidden: Sequence[int] = (64, 64),
    recurrent: str | None = None,
    lstm_hidden: int = 256,
) -> ActorValueOperator:
    """Categorical policy and value heads over a common module.

    ``recurrent``: a core of ``accelrl.recurrent.CORES`` (``"lstm"``):
    ``make_recurrent_actor_critic`` (a trunk, the core, both heads on its output); None: the
    feed-forward networks below.

    Frames and grids (``[C, H, W]`` uint8): one conv trunk shared by both heads, as in the
    Atari papers (``conv_trunk``: the Nature CNN, or the MinAtar CNN for small grids). Vector
    observations: separate actor and critic MLPs (the common module only flattens), as in
    CleanRL and Stable-Baselines3: with a shared MLP the value loss dominates the clipped
    gradient and A2C barely learns CartPole.

    ``get_policy_operator()`` writes ``action`` and ``action_log_prob`` (and ``logits``);
    ``get_value_operator()`` writes ``state_value`` [..., 1].
    """
    if recurrent is not None:
        if recurrent not in CORES:
            raise ValueError(f"recurrent must be None or one of {sorted(CORES)}, not {recurrent!r}")
        return make_recurrent_actor_critic(
            obs_key,
            obs_shape,
            num_actions,
            mlp_hidden=mlp_hidden,
            recurrent=recurrent,
            lstm_hidden=lstm_hidden,
        )
    conv = conv_trunk(obs_shape)
    if conv is not None:
        trunk: nn.Module = conv
        policy_net: nn.Module = orthogonal_(nn.Linear(conv.out_features, num_actions), 0.01)
        value_net: nn.Module = orthogonal_(nn.Linear(conv.out_features, 1), 1.0)
    else:
        trunk = nn.Flatten(start_dim=-len(obs_shape)) if len(obs_shape) > 1 else nn.Identity()
        features = int(math.prod(obs_shape))
        policy_mlp, value_mlp = MLP(features, mlp_hidden), MLP(features, mlp_hidden)
        policy_net = nn.Sequential(
            policy_mlp, orthogonal_(nn.Linear(policy_mlp.out_features, num_actions), 0.01)
        )
        value_net = nn.Sequential(value_mlp, orthogonal_(nn.Linear(value_mlp.out_features, 1), 1.0))
    common = DirectTensorDictModule(trunk, in_keys=[obs_key], out_keys=["hidden"])
    return with_heads(common, policy_net, value_net)


def with_heads(
    common: TensorDictModuleBase, policy_net: nn.Module, value_net: nn.Module
) -> ActorValueOperator:
    """``common`` (writing ``hidden``) with a categorical policy head (``logits``, ``action``,
    ``action_log_prob``) and a value head (``state_value``) on ``hidden``."""
    actor = ProbabilisticActor(
        DirectTensorDictModule(policy_net, in_keys=["hidden"], out_keys=["logits"]),
        in_keys=["logits"],
        out_keys=["action"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = DirectValueOperator(value_net, in_keys=["hidden"])
    return ActorValueOperator(common, actor, critic)


STATE_KEYS = LSTM.state_keys
"""The LSTM's state in a TensorDict: hidden and cell, each ``[..., 1, lstm_hidden]`` (one
layer), written for the next step under ``"next"`` and carried to the root by the env's
``step_mdp`` (``accelrl.envs.with_state`` registers them with the env). Every core's keys:
``accelrl.recurrent.CORES``."""


def make_recurrent_actor_critic(
    obs_key: str,
    obs_shape: Sequence[int],
    num_actions: int,
    *,
    mlp_hidden: Sequence[int] = (64, 64),
    recurrent: str = "lstm",
    lstm_hidden: int = 256,
) -> ActorValueOperator:
    """A recurrent actor-critic: the observation's trunk (``conv_trunk``'s CNN on frames and
    grids, one ``MLP`` of ``mlp_hidden`` on vectors, shared by both heads), the core
    ``recurrent`` of ``accelrl.recurrent.CORES`` (TorchRL's ``LSTMModule`` for ``"lstm"``) of
    ``lstm_hidden`` units, then the policy and value heads on its output.

    The common module reads the observation, ``is_init`` (``InitTracker``: True at the first
    step of an episode, where the core starts from zeros) and the core's state keys; it writes
    ``features``, ``hidden`` and the next state under ``"next"``. One step at a time by
    default (collection, evaluation, play); under ``set_recurrent_mode(True)`` over ``[B, T]``
    sequences (the updates), where sequences are cut at ``is_init`` and each piece starts from
    its stored state.
    """
    conv = conv_trunk(obs_shape)
    if conv is not None:
        trunk: nn.Module = conv
    else:
        flat = nn.Flatten(start_dim=-len(obs_shape)) if len(obs_shape) > 1 else nn.Identity()
        mlp = MLP(int(math.prod(obs_shape)), mlp_hidden)
        trunk = nn.Sequential(flat, mlp)
        trunk.out_features = mlp.out_features
    core = CORES[recurrent].build(trunk.out_features, lstm_hidden)
    common = TensorDictSequential(
        DirectTensorDictModule(trunk, in_keys=[obs_key], out_keys=["features"]), core
    )
    policy_net = orthogonal_(nn.Linear(lstm_hidden, num_actions), 0.01)
    value_net = orthogonal_(nn.Linear(lstm_hidden, 1), 1.0)
    return with_heads(common, policy_net, value_net)


def recurrent_core(model: ActorValueOperator) -> TensorDictModuleBase | None:
    """``model``'s recurrent core module (``make_recurrent_actor_critic``; its kind:
    ``accelrl.recurrent.core_of``), or None: feed-forward."""
    common = model[0]
    if isinstance(common, TensorDictSequential):
        for module in common.module:
            if core_of(module) is not None:
                return module
    return None


class _ActingNet(nn.Module):
    """Trunk, both heads and the action draw of an actor-critic, as one plain module."""

    def __init__(self, trunk: nn.Module, policy_net: nn.Module, value_net: nn.Module) -> None:
        super().__init__()
        self.trunk, self.policy_net, self.value_net = trunk, policy_net, value_net

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = self.trunk(obs)
        # fp32 logits and value under a bf16 actor (``accelrl.precision``): the log-prob that
        # PPO's ratio divides by and the values GAE reads.
        logits = full(self.policy_net(hidden))
        action, log_prob = categorical_draw(logits, interaction_type() is InteractionType.RANDOM)
        return action, log_prob, full(self.value_net(hidden))


def categorical_draw(logits: torch.Tensor, sample: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(action, its log-prob) as ``torch.distributions.Categorical(logits=logits)`` gives them:
    ``sample`` draws (collectors explore: RANDOM), else the most likely action (as TorchRL's
    ProbabilisticActor under DETERMINISTIC or MODE). The distribution's own operations in its
    order (normalised logits, softmax, one multinomial draw per row, the gather), so the same
    generator state gives the same actions and log-probs (``tests/test_models.py``), without
    the distribution object: its construction, shape checks and lazy properties cost about as
    much as the draw at every acting step (docs/performance.md#the-acting-path)."""
    norm = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(norm, dim=-1)
    if sample:
        rows = probs.reshape(-1, probs.shape[-1])
        action = torch.multinomial(rows, 1, True).T.reshape(probs.shape[:-1])
    else:
        action = probs.argmax(-1)
    return action, norm.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def acting_policy(model: ActorValueOperator) -> TensorDictModule:
    """``model``'s collection pass as one TensorDict module over the same parameters: the
    observation in; ``action``, ``action_log_prob`` and ``state_value`` out.

    The ``ActorValueOperator`` writes the same action (one ``Categorical`` draw from the same
    random stream), log-prob and value, but reaches them through seven nested TensorDict modules
    and also stores ``hidden`` and ``logits``, which no update reads, so this is the faster
    one (docs/results/module-write_ppo-policy_pong_2026-12-01.txt). Collect with this; evaluate,
    export and checkpoint the ``ActorValueOperator``.
    """
    trunk = model[0]
    net = _ActingNet(
        trunk.module, model.get_policy_head().module[0].module, model.get_value_head().module
    )
    return DirectTensorDictModule(
        net, in_keys=list(trunk.in_keys), out_keys=["action", "action_log_prob", "state_value"]
    )


class QNetwork(nn.Module):
    """Action values from frames or grids (the convolutions of ``conv_trunk``'s CNN, then a
    hidden layer of its width: 512 for the Nature CNN, 128 for MinAtar's) or vector
    observations (MLP).

    ``dueling`` splits the head into a state-value and an advantage stream (Wang et al. 2016),
    combined as V + A - mean(A); ``atoms`` > 1 outputs logits over a categorical return
    distribution per action (C51, Bellemare et al. 2017), shaped ``[..., atoms, actions]`` as
    TorchRL's distributional modules expect. Both combine (Rainbow's head). ``layer_norm``: a
    LayerNorm before every ReLU of the trunk and the hidden layer (PQN's networks, Gallici et al.
    2025: no target network, so the normalisation keeps the TD updates stable).
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        *,
        dueling: bool = False,
        atoms: int = 1,
        mlp_hidden: Sequence[int] = (64, 64),
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        self.num_actions, self.atoms, self.dueling = num_actions, atoms, dueling
        conv = conv_trunk(obs_shape, layer_norm=layer_norm)
        # Scale of the observations into the convolutions; None: vectors into the MLP.
        self.input_scale = None if conv is None else conv.input_scale
        if conv is not None:
            self.features = conv.convs
            width, hidden = conv.fc[0].in_features, conv.out_features

            def stream(out: int) -> nn.Module:
                return nn.Sequential(
                    *dense(width, hidden, layer_norm=layer_norm),
                    orthogonal_(nn.Linear(hidden, out), 1.0),
                )
        else:
            mlp = MLP(int(math.prod(obs_shape)), mlp_hidden, q_values=True, layer_norm=layer_norm)
            self.features = nn.Sequential(nn.Flatten(start_dim=-len(obs_shape)), mlp)
            width = mlp.out_features

            def stream(out: int) -> nn.Module:
                return nn.Linear(width, out)

        self.advantage = stream(num_actions * atoms)
        self.value = stream(atoms) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.input_scale is not None:
            obs = as_float(obs, self.input_scale, self.advantage[0].weight.dtype)
            batch = obs.shape[:-3]
            x = self.features(obs.reshape(-1, *obs.shape[-3:]))
        else:
            batch = obs.shape[:-1]
            x = self.features(obs.reshape(-1, obs.shape[-1]))
        # fp32 under autocast (``accelrl.precision``): the dueling mean, TD targets, C51's
        # softmax and projection.
        q = full(self.advantage(x)).view(-1, self.atoms, self.num_actions)
        if self.value is not None:
            v = full(self.value(x)).view(-1, self.atoms, 1)
            q = v + q - q.mean(-1, keepdim=True)
        if self.atoms == 1:
            return q.view(*batch, self.num_actions)
        return q.view(*batch, self.atoms, self.num_actions)


class GreedyActorCritic(nn.Module):
    """Trunk, policy head, argmax of the logits."""

    def __init__(self, trunk: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.trunk, self.head = trunk, head

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(obs)).argmax(-1)


class GreedyQ(nn.Module):
    """Q-network, argmax of the Q-values (of their expectation over C51's support)."""

    def __init__(self, q_network: nn.Module, support: torch.Tensor | None) -> None:
        super().__init__()
        self.q_network = q_network
        self.register_buffer("support", support)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        q = self.q_network(obs)
        if self.support is not None:  # [B, atoms, actions] logits
            q = (q.softmax(-2) * self.support.unsqueeze(-1)).sum(-2)
        return q.argmax(-1)
