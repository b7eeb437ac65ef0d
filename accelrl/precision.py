"""Reduced precision for the learner and the acting policy (``--precision.*``), in one place.

``bf16`` (and ``fp16``, CUDA only) run the networks under ``torch.autocast``: convolutions and
matrix products (autocast's lower-precision list: conv2d, linear, matmul ...) take bf16 inputs
and accumulate in fp32 inside the kernel. Everything else stays fp32, on purpose:

- weights (the master copy), gradients and optimizer state: one Adam step moves a weight by
  about lr (1e-4 .. 1e-3) relative to its size or less, below bf16's resolution of 2^-8 relative,
  so bf16 weights would mostly not move. Checkpoints and ``accelrl.tools.export`` hold these fp32
  weights, so they are the same whichever precision trained or resumes;
- network outputs (logits, state values, Q-values, C51 logits): ``full`` casts them to fp32 as
  they leave the network (``accelrl.models``), so log-softmax, log-probs, entropy, PPO's
  probability ratio, value and TD losses, the C51 projection and cross-entropy and every mean
  over the batch run in fp32. In bf16 a log-prob of -1.4 carries an error of up to 2^-9 x 1.4 =
  0.003, and so would the ratio exp(new - old): the 0.1 clip would be decided by rounding for
  many samples, and a batch mean of bf16 terms loses 8 bits more;
- advantages and targets (GAE, V-trace, n-step TD targets): computed from fp32 values and
  rewards outside autocast (values collected by a bf16 actor are rounded once, then fp32).

fp16 scales the loss (``torch.amp.GradScaler``): its 5 exponent bits underflow small gradients.
A step whose scaled gradients overflow is skipped and the scale halved, which is the scaler's
normal operation, not a non-finite run (``accelrl.algos.common.gradient_step``). A resumed fp16
run starts from the initial scale again (2^16) and finds its level within a few steps.

``--precision.channels-last`` stores the conv weights NHWC (``torch.channels_last``); oneDNN
and cuDNN then run NHWC kernels without reordering each call. The values, and so checkpoints,
do not change (``load_state_dict`` copies values into whatever layout a module has).

``auto`` chooses by the host's capability (``choose``) and logs what it chose and why.
docs/precision.md has the measurements and when to turn it on.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from accelrl.compat import cpu_has_native_bf16
from accelrl.errors import ConfigError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
HALF = (torch.bfloat16, torch.float16)


def full(x: torch.Tensor) -> torch.Tensor:
    """``x`` in fp32 when autocast made it bf16 or fp16; fp32 and float64 (the parity tests')
    tensors pass unchanged."""
    return x.float() if x.dtype in HALF else x


@dataclass(frozen=True)
class Precision:
    """One side's resolved precision: ``dtype`` None is fp32 (no autocast)."""

    dtype: torch.dtype | None = None
    device_type: str = "cpu"
    reason: str = ""

    @property
    def name(self) -> str:
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward passes' context: autocast to ``dtype`` on ``device_type``, or nothing."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """fp16's loss scaler (``gradient_step`` uses it); None for fp32 and bf16, whose
        exponent range is fp32's."""
        if self.dtype is not torch.float16:
            return None
        return torch.amp.GradScaler(self.device_type)


FP32 = Precision()


def check(cfg: Any) -> None:
    """``--precision.*`` values a run can use, before anything starts: fp16 needs CUDA for the
    learner (CPUs have no fp16 matrix units worth it, and autocast's CPU fp16 path is slow)."""
    from accelrl.config import resolve_device

    p = cfg.precision
    if p.learner not in ("fp32", "bf16", "fp16", "auto"):
        raise ConfigError("precision.learner", p.learner, "must be fp32, bf16, fp16 or auto")
    if p.actor not in ("fp32", "bf16", "auto"):
        raise ConfigError("precision.actor", p.actor, "must be fp32, bf16 or auto")
    if p.learner == "fp16" and not resolve_device(cfg.device).startswith("cuda"):
        raise ConfigError(
            "precision.learner", "fp16", "needs a CUDA learner (--device cuda); use bf16 on a CPU"
        )


def choose(choice: str, device: torch.device, conv: bool, acting: bool = False) -> Precision:
    """``choice`` (fp32, bf16, fp16, auto) resolved for networks on ``device``; ``conv``: the
    network has a conv trunk (frames or grids), where the matrix work that bf16 speeds up is;
    ``acting``: the collection policy's small batches.

    auto: bf16 for the learner on a CPU with native bf16 instructions (AVX-512 BF16 or AMX,
    which oneDNN uses), for conv trunks only; otherwise fp32, on a GPU too: there the Atari and
    MinAtar networks are too small for bf16's matrix units to pay for autocast's casts. A CPU
    without them emulates bf16 through fp32 and is slower than fp32; small MLPs (CartPole) gain
    nothing and pay autocast's casts; a CPU actor's batches of a few frames ran as fast in bf16
    as in fp32. docs/precision.md has the measurements.
    """
    kind = device.type
    if choice == "fp32":
        return Precision(None, kind, "as asked")
    if choice in DTYPES:
        return Precision(DTYPES[choice], kind, "as asked")
    if not conv:
        return Precision(None, kind, "auto: an MLP network gains nothing from bf16")
    if acting and kind == "cpu":
        return Precision(None, kind, "auto: acting batches on a CPU gained nothing from bf16")
    if kind == "cuda":
        # bf16 ran slower than fp32 on a GPU for these networks (docs/precision.md#on-a-gpu):
        # they are bound by kernel launches, not by matrix throughput, and autocast adds casts.
        return Precision(None, kind, "auto: bf16 ran slower than fp32 for these networks on a GPU")
    if kind == "cpu" and cpu_has_native_bf16():
        return Precision(torch.bfloat16, kind, "auto: this CPU has native bf16 (oneDNN)")
    return Precision(None, kind, f"auto: no native bf16 on {kind}; emulated bf16 is slower")


@dataclass(frozen=True)
class Plan:
    """What ``--precision.*`` resolves to for one run: the learner's and the actor's precision
    and the conv weights' memory layout."""

    learner: Precision = FP32
    actor: Precision = FP32
    channels_last: bool = False

    def describe(self) -> str:
        """The one log line of a run's start."""
        layout = "channels_last" if self.channels_last else "contiguous"
        return (
            f"precision: learner {self.learner.name} ({self.learner.reason}), actor "
            f"{self.actor.name} ({self.actor.reason}), conv weights {layout}"
        )

    def prepare(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` with its convolutions' weights channels_last when asked (in place;
        linear layers and MLPs are untouched)."""
        if self.channels_last:
            for layer in module.modules():
                if isinstance(layer, torch.nn.Conv2d):
                    layer.to(memory_format=torch.channels_last)
        return module

    def acting(self, policy: TensorDictModuleBase) -> TensorDictModuleBase:
        """``policy`` as collectors run it: under the actor's autocast, or itself for fp32."""
        if self.actor.dtype is None:
            return policy
        return AutocastPolicy(policy, self.actor.dtype)


FP32_PLAN = Plan()
"""Every network in fp32, contiguous: the learners' default."""


def plan(cfg: Any, obs_shape: tuple[int, ...], device: torch.device | str) -> Plan:
    """``cfg.precision`` resolved for a recipe's networks on the learner's ``device`` (the actor:
    on ``collector.policy_device``, which is the learner's unless set)."""
    from accelrl.config import resolve_device

    p = cfg.precision
    conv = len(obs_shape) == 3
    learner_device = torch.device(device)
    acting = cfg.collector.policy_device
    policy_device = learner_device if acting == "auto" else torch.device(resolve_device(acting))
    return Plan(
        learner=choose(p.learner, learner_device, conv),
        actor=choose(p.actor, policy_device, conv, acting=True),
        channels_last=p.channels_last and conv,
    )


def announce(resolved: Plan) -> None:
    """Log what ``--precision.*`` resolved to, and why (one line at a run's start)."""
    logging.getLogger("accelrl").info(resolved.describe())


class AutocastPolicy(TensorDictModuleBase):
    """A TensorDict policy run under ``torch.autocast`` to ``dtype`` on its parameters' device.

    The wrapped policy's outputs leave its networks in fp32 (``full``), so the batches that
    collectors assemble hold what an fp32 policy writes, and their specs are the same. The
    device is read from the parameters at each call: collectors move their copy of the policy to
    their own device.
    """

    def __init__(self, policy: TensorDictModuleBase, dtype: torch.dtype) -> None:
        super().__init__()
        self.policy = policy
        self.dtype = dtype
        self.in_keys = list(policy.in_keys)
        self.out_keys = list(policy.out_keys)

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        device = next(self.policy.parameters()).device
        with torch.autocast(device.type, dtype=self.dtype):
            return self.policy(tensordict, *args, **kwargs)
