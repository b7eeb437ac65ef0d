"""TorchRL's reference Atari pipeline, as in its PPO example (``sota-implementations/ppo/
utils_atari.py`` in the TorchRL repository).

Each ``ParallelEnv`` worker runs ``GymEnv("PongNoFrameskip-v4", frame_skip=4)`` (RGB frames, the
frameskip done by ALE) with ``NoopResetEnv`` and ``EndOfLifeTransform``; the parent applies
``ToTensorImage``, ``GrayScale``, a resize to 84x84, ``CatFrames(N=4)``, ``RewardSum``,
``StepCounter``, ``RewardClipping`` and ``DoubleToFloat`` to the stacked batch (``VecNorm``, which
the example appends last, is left out). TorchRL's ``Resize`` needs torchvision, which accelrl does
not depend on, so ``InterpolateResize`` stands in for it: the same call torchvision's ``resize``
makes on float tensors (bilinear, antialiased), through ``torch.nn.functional.interpolate``.

The factories are module-level so that spawned workers can unpickle them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from tensordict.utils import NestedKey
from torchrl.envs import (
    CatFrames,
    DoubleToFloat,
    EndOfLifeTransform,
    EnvBase,
    EnvCreator,
    GrayScale,
    NoopResetEnv,
    ObservationTransform,
    ParallelEnv,
    RenameTransform,
    Resize,
    RewardClipping,
    RewardSum,
    StepCounter,
    ToTensorImage,
    TransformedEnv,
)
from torchrl.envs.libs.gym import GymEnv, set_gym_backend

ENV_NAME = "PongNoFrameskip-v4"


class InterpolateResize(Resize):
    """``Resize`` without torchvision: bilinear antialiased ``F.interpolate`` on float images.

    torchvision's ``resize`` of a float tensor with ``antialias=True`` calls the same kernel
    (``_upsample_bilinear2d_aa``), so outputs and cost match ``Resize(84, 84)``.
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        # Skip Resize.__init__, which raises without torchvision.
        in_keys = in_keys or ["pixels"]
        ObservationTransform.__init__(self, in_keys=in_keys, out_keys=out_keys or list(in_keys))
        self.w, self.h = int(w), int(h if h is not None else w)
        self.interpolation = "bilinear"

    def _apply_transform(self, observation: torch.Tensor) -> torch.Tensor:
        if observation.shape[-2:] == torch.Size([self.w, self.h]):
            return observation
        lead = observation.shape[:-3]
        flat = observation.reshape(-1, *observation.shape[-3:])
        out = torch.nn.functional.interpolate(
            flat, size=(self.w, self.h), mode="bilinear", align_corners=False, antialias=True
        )
        return out.reshape(*lead, *out.shape[-3:])


def make_base_env(env_name: str = ENV_NAME, frame_skip: int = 4) -> EnvBase:
    """One worker's env, as ``make_base_env`` in TorchRL's PPO Atari utils (training mode)."""
    torch.set_num_threads(1)
    with set_gym_backend("gymnasium"):
        env = GymEnv(
            env_name,
            frame_skip=frame_skip,
            from_pixels=True,
            pixels_only=False,
            device="cpu",
            categorical_action_encoding=True,
        )
    env = TransformedEnv(env)
    env.append_transform(NoopResetEnv(noops=30, random=True))
    env.append_transform(EndOfLifeTransform())
    return env


def make_parallel_env(num_envs: int, env_name: str = ENV_NAME) -> TransformedEnv:
    """``ParallelEnv`` of base envs with the pixel transforms in the parent, as the example."""
    threads = torch.get_num_threads()  # ParallelEnv lowers the parent's threads; keep ours
    env = ParallelEnv(
        num_envs,
        EnvCreator(functools.partial(make_base_env, env_name)),
        serial_for_single=True,
        device="cpu",
    )
    env = TransformedEnv(env)
    env.append_transform(RenameTransform(in_keys=["pixels"], out_keys=["pixels_int"]))
    env.append_transform(ToTensorImage(in_keys=["pixels_int"], out_keys=["pixels"]))
    env.append_transform(GrayScale())
    env.append_transform(InterpolateResize(84, 84))
    env.append_transform(CatFrames(N=4, dim=-3))
    env.append_transform(RewardSum())
    env.append_transform(StepCounter(max_steps=4500))
    env.append_transform(RewardClipping(-1, 1))
    env.append_transform(DoubleToFloat())
    torch.set_num_threads(threads)
    return env
