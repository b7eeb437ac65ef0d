"""Networks as TensorDict modules: the Nature CNN trunk, an MLP trunk, actor-critic heads.

Frames arrive as uint8 and are scaled to [0, 1] inside the trunk, on whatever device the module
lives on, so only bytes cross process and device boundaries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import ActorValueOperator, ProbabilisticActor, ValueOperator


def orthogonal_(layer: nn.Module, gain: float) -> nn.Module:
    """Orthogonal weights with ``gain`` and zero bias (the standard Atari actor-critic init)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class NatureCNN(nn.Module):
    """Mnih et al. (2015) trunk: conv 32x8s4, 64x4s2, 64x3s1, then a 512-unit layer, ReLU."""

    def __init__(self, in_channels: int = 4, screen_size: int = 84, features: int = 512) -> None:
        super().__init__()
        gain = math.sqrt(2)
        self.convs = nn.Sequential(
            orthogonal_(nn.Conv2d(in_channels, 32, 8, stride=4), gain),
            nn.ReLU(),
            orthogonal_(nn.Conv2d(32, 64, 4, stride=2), gain),
            nn.ReLU(),
            orthogonal_(nn.Conv2d(64, 64, 3, stride=1), gain),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, in_channels, screen_size, screen_size)).shape[-1]
        self.fc = nn.Sequential(orthogonal_(nn.Linear(flat, features), gain), nn.ReLU())
        self.out_features = features

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        # One conversion pass (copy=True: never scale a caller's float tensor in place).
        x = pixels.to(torch.float32, copy=True).mul_(1.0 / 255.0)
        batch = x.shape[:-3]
        y = self.fc(self.convs(x.reshape(-1, *x.shape[-3:])))
        return y.reshape(*batch, -1)


class MLP(nn.Module):
    """Tanh MLP trunk for vector observations."""

    def __init__(self, in_features: int, hidden: Sequence[int] = (64, 64)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [orthogonal_(nn.Linear(in_features, width), math.sqrt(2)), nn.Tanh()]
            in_features = width
        self.net = nn.Sequential(*layers)
        self.out_features = in_features

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


def make_trunk(obs_key: str, obs_shape: Sequence[int], mlp_hidden: Sequence[int]) -> nn.Module:
    """Nature CNN for ``pixels`` ([stack, H, W] uint8), an MLP for flat vector observations."""
    if obs_key == "pixels":
        return NatureCNN(in_channels=obs_shape[0], screen_size=obs_shape[-1])
    return MLP(int(math.prod(obs_shape)), mlp_hidden)


def make_actor_critic(
    obs_key: str,
    obs_shape: Sequence[int],
    num_actions: int,
    *,
    mlp_hidden: Sequence[int] = (64, 64),
) -> ActorValueOperator:
    """Shared trunk with a categorical policy head and a value head.

    ``get_policy_operator()`` writes ``action`` and ``action_log_prob`` (and ``logits``);
    ``get_value_operator()`` writes ``state_value`` [..., 1].
    """
    trunk = make_trunk(obs_key, obs_shape, mlp_hidden)
    common = TensorDictModule(trunk, in_keys=[obs_key], out_keys=["hidden"])
    policy_head = TensorDictModule(
        orthogonal_(nn.Linear(trunk.out_features, num_actions), 0.01),
        in_keys=["hidden"],
        out_keys=["logits"],
    )
    actor = ProbabilisticActor(
        policy_head,
        in_keys=["logits"],
        out_keys=["action"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = ValueOperator(orthogonal_(nn.Linear(trunk.out_features, 1), 1.0), in_keys=["hidden"])
    return ActorValueOperator(common, actor, critic)
