"""Collected batches that hold each observation once: TorchRL's ``compact_obs`` layout plus the
next observations the learners read.

A collected batch ``[rows, T]`` in TorchRL's layout holds every observation twice: at its step
(the root) and under ``("next", obs)`` for the step before, which equals the next root except
where an episode ended (the next observation is the episode's final one; the root holds the new
episode's first). TorchRL's ``Collector(compact_obs=True)`` drops ``("next", obs)`` and with it
those final observations. accelrl's learners read ``("next", obs)`` only where an episode ended
and at each row's last step (the value and Q(lambda) bootstraps, ``FrameReplay``'s final
frames), so a compact batch keeps exactly those: ``NEXT_OBS_AT_ENDS``, an ``UnbatchedTensor``
``[K, *obs_shape]`` of the next observations at the steps ``ends(done)`` marks, in row-major
order (``("next", obs)[ends(done)]`` of the full layout). ``next_obs_at_ends`` reads them from
either layout. ``accelrl.collectors.LeanCollector`` writes compact batches with
``compact_obs=True`` (the recipes' default, ``--collector.compact-obs``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase, UnbatchedTensor

from accelrl.compat import unbatched_payload

NEXT_OBS_AT_ENDS = "next_obs_at_ends"
"""A compact batch's key for the next observations at ``ends(done)``, in row-major order."""


def ends(done: torch.Tensor) -> torch.Tensor:
    """The steps whose next observation a learner reads: where an episode ended, and each
    row's last step (``done`` ``[..., T]`` bool; returns a new mask of its shape)."""
    mask = done.clone()
    mask[..., -1] = True
    return mask


def is_compact(batch: TensorDictBase) -> bool:
    """Whether ``batch`` holds ``NEXT_OBS_AT_ENDS`` instead of ``("next", obs)``."""
    return NEXT_OBS_AT_ENDS in batch.keys()


def next_obs_at_ends(
    batch: TensorDictBase, obs_key: str, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The next observations at ``mask`` (default ``ends`` of ``("next", "done")``, batch
    shaped) in row-major order, from a compact batch's ``NEXT_OBS_AT_ENDS`` or a full batch's
    ``("next", obs_key)``; a compact batch answers only for its own ``ends`` mask."""
    if is_compact(batch):
        if mask is not None and not torch.equal(mask, _ends_of(batch)):
            raise ValueError("a compact batch holds the next observations at its ends only")
        return unbatched_payload(batch.get(NEXT_OBS_AT_ENDS))
    if mask is None:
        mask = _ends_of(batch)
    return batch.get(("next", obs_key))[mask]


def _ends_of(batch: TensorDictBase) -> torch.Tensor:
    return ends(batch.get(("next", "done")).squeeze(-1))


def compact(batch: TensorDictBase, obs_key: str) -> TensorDictBase:
    """``batch`` (full layout) without ``("next", obs_key)`` and with ``NEXT_OBS_AT_ENDS`` (a
    new TensorDict over the same tensors, plus the gathered observations)."""
    at_ends = next_obs_at_ends(batch, obs_key)
    out = batch.exclude(("next", obs_key))
    out.set(NEXT_OBS_AT_ENDS, UnbatchedTensor(at_ends))
    return out
