"""The private TensorDict / TorchRL APIs accelrl still uses, one function each.

Written against tensordict 0.14.3 and TorchRL 0.14.1. Callers go through these functions, never
the private names; ``tests/test_compat.py`` calls each one against the installed releases and
names the private attribute when a release changes or removes it. "Private" here also covers
undocumented structure that public attributes expose (a module's submodule layout, the keys of
a loss module's parameters): a release may change it without notice just the same.

The first two are on the env's hot path (two new TensorDicts and one ``set`` per batched step)
and stay private for speed only: the public calls validate every value, a cost that matters on
small simulators' steps (docs/development-notes.md#torchrl-and-tensordict has the figures). The
others reach what TorchRL has
no public call for: the prioritized sampler's segment trees (``accelrl.replay.sampler``), the
fallback of a module's output write (``accelrl.models``), the parts of DQN's actor and loss
that ``accelrl.algos.dqn`` runs directly, whether the CPU computes bf16 natively
(``accelrl.precision``), and TorchRL's in-process collector's root and a storage's use count
(``accelrl.collectors.LeanCollector``).

Private TorchRL *hooks* that accelrl overrides (they cannot move here; the tests pin them too):
``EnvBase._step_and_maybe_reset`` (``accelrl.envs.vector.SameStepVectorEnv``'s fast path),
``ParallelEnv._start_workers`` (``accelrl.envs.gym_atari``) and
``TensorDictModule._write_to_tensordict`` (``accelrl.models``' direct output writes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector
from torchrl.data import PrioritizedSampler
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.modules import QValueActor
from torchrl.objectives import DQNLoss, HardUpdate
from torchrl.objectives.utils import TargetNetUpdater


def new_tensordict_unchecked(
    values: Mapping[str, torch.Tensor | TensorDictBase],
    batch_size: torch.Size,
    device: torch.device | None = None,
    names: list[str | None] | None = None,
) -> TensorDict:
    """A TensorDict holding ``values`` as given, without checking them.

    Every value must already have ``batch_size`` as its leading dims and, when ``device`` is
    given, live on it (nested TensorDicts too, with that device). Uses the private
    ``TensorDict._new_unsafe``; the public ``TensorDict(values, batch_size=...)`` validates each
    key, several times slower. Pass the device where it is known: ``td.to(device)`` returns a
    device-less TensorDict only after visiting every leaf (once per step in TorchRL's collector
    and once per replay sample in the loss), a TensorDict already on ``device`` at once.
    ``names`` names the batch dims as given (the ``names`` setter visits every nested
    TensorDict and costs more than building the TensorDict).
    """
    return TensorDict._new_unsafe(dict(values), batch_size=batch_size, device=device, names=names)


def set_unchecked(tensordict: TensorDictBase, key: str, value: TensorDictBase) -> None:
    """``tensordict[key] = value`` (a new entry, not a copy into an old one), without checking.

    ``value`` must have ``tensordict``'s batch size and device. Uses the private
    ``TensorDictBase._set_str(..., validated=True, inplace=False)``; the public
    ``tensordict.set(key, value)`` validates ``value``, many times slower.
    """
    tensordict._set_str(key, value, validated=True, inplace=False)


def segment_trees(sampler: PrioritizedSampler) -> tuple[Any, Any]:
    """The sum and min segment trees of ``sampler``, C++ objects indexed by slot.

    Private ``PrioritizedSampler._sum_tree`` / ``_min_tree`` (checked against TorchRL 0.14.1).
    TorchRL writes them only through ``update_priority``, which stores ``(p + eps) ** alpha``
    and so cannot give a slot exactly zero mass, and draws only with its importance weights;
    the frame replay needs both (``accelrl.replay.sampler``). Fetch them again after
    ``load_state_dict``, which replaces them.
    """
    return sampler._sum_tree, sampler._min_tree


def priority_state(sampler: PrioritizedSampler) -> tuple[float, tuple[Any, Any]]:
    """``sampler``'s priority epsilon and its largest raw priority so far, as TorchRL tracks it:
    ``(value, slot)`` tensors, or ``(None, None)`` before any. Private ``_eps`` and
    ``_max_priority`` (checked against TorchRL 0.14.1; ``update_priority`` keeps the raw maximum,
    which ``default_priority`` returns)."""
    return sampler._eps, sampler._max_priority


def set_max_priority(sampler: PrioritizedSampler, value: torch.Tensor, slot: torch.Tensor) -> None:
    """Record ``value`` at ``slot`` as ``sampler``'s largest raw priority (``priority_state``)."""
    sampler._max_priority = (value, slot)


def sampler_generator(sampler: Sampler) -> torch.Generator | None:
    """The torch generator a TorchRL replay buffer gave ``sampler`` (``ReplayBuffer(...,
    generator=)``); None when it draws from NumPy's global RNG, as ``PrioritizedSampler.sample``
    does then. Private ``Sampler._rng`` (checked against TorchRL 0.14.1)."""
    return sampler._rng


_TREE_KEYS = ("_sum_tree", "_min_tree")  # PrioritizedSampler.state_dict()'s keys of the trees


def prioritized_state_dict(sampler: PrioritizedSampler) -> dict[str, Any]:
    """``PrioritizedSampler.state_dict()`` with the segment trees as tensors of their leaves.

    TorchRL's state holds the C++ tree objects under the private names ``_sum_tree`` and
    ``_min_tree``, which would make a checkpoint unloadable with ``torch.load(weights_only=True)``;
    here those keys hold the leaves in slot order (checked against TorchRL 0.14.1). Checkpoints
    hold this form: ``load_prioritized_state_dict`` reads it back.
    """
    state = PrioritizedSampler.state_dict(sampler)
    slots = torch.arange(sampler.max_size)
    for key, tree in zip(_TREE_KEYS, segment_trees(sampler), strict=True):
        state[key] = torch.as_tensor(tree[slots]).clone()
    return state


def load_prioritized_state_dict(sampler: PrioritizedSampler, state: Mapping[str, Any]) -> None:
    """Restore ``prioritized_state_dict``'s output into ``sampler`` (a float64 sampler of the same
    size): TorchRL's ``load_state_dict`` for the rest, then the leaves into its own trees."""
    leaves = [state[key] for key in _TREE_KEYS]
    PrioritizedSampler.load_state_dict(
        sampler, {**state, **dict(zip(_TREE_KEYS, segment_trees(sampler), strict=True))}
    )
    slots = torch.arange(sampler.max_size)
    for tree, values in zip(segment_trees(sampler), leaves, strict=True):
        tree[slots] = values.to(torch.float64)


def write_outputs(
    module: TensorDictModule,
    tensordict: TensorDictBase,
    tensors: list[Any],
    tensordict_out: TensorDictBase | None,
    out_keys: Any,
) -> TensorDictBase:
    """TensorDict's own write of ``module``'s outputs (each through ``TensorDict.from_any``), for
    an override of the hook that falls back to it. Private
    ``TensorDictModule._write_to_tensordict`` (checked against tensordict 0.14.3)."""
    return TensorDictModule._write_to_tensordict(
        module, tensordict, tensors, tensordict_out, out_keys
    )


def qvalue_actor_modules(actor: QValueActor) -> tuple[TensorDictModule, Any]:
    """The two modules TorchRL builds a ``QValueActor`` from: the Q-network in its
    ``TensorDictModule`` and the ``QValueModule`` head (argmax, chosen value). TorchRL's layout
    of the sequence, ``actor.module`` (checked against TorchRL 0.14.1); the head's ``out_keys``
    are the action, the action values and the chosen value, in that order."""
    q_module, head = actor.module
    return q_module, head


def dqn_target_params(loss: DQNLoss) -> TensorDictBase:
    """The target copy of the Q-network's own parameters in ``loss`` (``delay_value=True``), as
    a TensorDict that ``to_module`` puts into a copy of that network.

    ``loss.target_value_network_params`` is laid out as the ``QValueActor`` it copies: its
    ``TensorDictModule`` is submodule ``module.0`` and the network that module's ``module``
    (checked against TorchRL 0.14.1). The tensors are the loss's own: target updates write them.
    """
    return loss.target_value_network_params.get(("module", "0", "module"))


def hard_update_now(updater: HardUpdate) -> None:
    """Copy every online parameter of ``updater``'s loss into its target now.

    ``TargetNetUpdater.step`` walks the parameter pairs; the private ``HardUpdate._step`` copies
    a pair only when ``counter == value_network_update_interval`` (checked against TorchRL
    0.14.1). Leaves ``counter`` at the interval: the caller sets it.
    """
    updater.counter = updater.value_network_update_interval
    TargetNetUpdater.step(updater)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively: AVX-512 BF16 or AMX on x86 (oneDNN's bf16
    kernels use them; an AVX-512 CPU without them runs oneDNN's emulation, slower than fp32),
    Arm's bf16 extension elsewhere. Private ``torch.cpu._is_avx512_bf16_supported`` and
    ``_is_amx_tile_supported`` (x86, cpuinfo's flags) and
    ``torch.ops.mkldnn._is_mkldnn_bf16_supported`` (Arm: true only with the bf16 extension),
    checked against torch 2.14."""
    import platform

    if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686"):
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    onednn = torch.backends.mkldnn.is_available()
    return bool(onednn and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def collector_carrier(collector: Collector) -> TensorDictBase:
    """The TensorDict a TorchRL ``Collector`` acts on next (its root: the observation after the
    last step, or after the first reset). Private ``Collector._carrier`` (checked against
    TorchRL 0.14.1); ``accelrl.collectors.LeanCollector`` starts its lean batches from it."""
    return collector._carrier


def collector_truncates_batches(collector: Collector) -> bool:
    """Whether ``collector`` marks the last step of every batch truncated (its env declares
    truncation keys TorchRL does not expect; private ``Collector._truncated_keys``, checked
    against TorchRL 0.14.1: empty for accelrl's envs)."""
    return bool(collector._truncated_keys)


def storage_use_count(tensor: torch.Tensor) -> int:
    """How many tensors (views included) share ``tensor``'s storage, plus one for the storage
    object this call makes. Private ``torch._C._storage_Use_Count`` (checked against torch
    2.14): ``accelrl.collectors.LeanCollector`` reuses a batch's memory only when it is 1 + its
    own tensor."""
    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


def storage_handle(tensor: torch.Tensor) -> Any:
    """``tensor``'s storage, for ``handle_use_count`` (holding it counts as one use)."""
    return tensor.untyped_storage()


def handle_use_count(handle: Any) -> int:
    """``storage_use_count`` of the tensor whose ``storage_handle`` is ``handle`` (the count
    includes the handle itself), without looking the storage up again."""
    return torch._C._storage_Use_Count(handle._cdata)


def unbatched_payload(value: torch.Tensor) -> torch.Tensor:
    """The plain tensor an ``UnbatchedTensor`` wraps (``value`` itself for a plain tensor).
    Private ``UnbatchedTensor._base_tensor`` (checked against tensordict 0.14.3): the public
    ``.data`` goes through the subclass's dispatch, 12 us against 0.1 us, on every compact
    batch's read of its side observations (``accelrl.batches.next_obs_at_ends``)."""
    base = getattr(value, "_base_tensor", None)
    return value if base is None else base()
