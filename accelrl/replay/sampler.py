"""Which transitions of ``accelrl.replay.memory.FrameReplay`` can be sampled, and how likely each
is.

Every storage slot has a sampling mass in TorchRL's ``PrioritizedSampler`` (C++ sum/min segment
trees): exactly zero while its transition waits for its n-step target and once an entry its
stack reads is overwritten; otherwise 1 (``alpha = 0``: exact uniform sampling over the valid
entries) or its priority. ``update_priority`` cannot store zero (it stores
``(p + eps) ** alpha``), so a small subclass of the sampler sets it directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchrl.data import PrioritizedSampler

from accelrl.compat import (
    load_prioritized_state_dict,
    prioritized_state_dict,
    priority_state,
    sampler_generator,
    segment_trees,
    set_max_priority,
)
from accelrl.replay.storage import FrameStorage


class MaskedPrioritizedSampler(PrioritizedSampler):
    """TorchRL's prioritized sampler plus entries with exactly zero sampling mass."""

    def disable(self, index: np.ndarray) -> int:
        """Give ``index`` (distinct slots) zero mass; returns how many of them had mass."""
        if index.size == 0:
            return 0
        # NumPy in and out: the trees take arrays directly, tensors through a conversion that
        # costs more than the update (every collected batch invalidates a batch of slots).
        sum_tree, min_tree = segment_trees(self)
        had = int(np.count_nonzero(sum_tree[index] > 0))
        sum_tree[index] = 0.0
        # The min tree's neutral value keeps disabled slots out of p_min (the IS-weight norm).
        min_tree[index] = min_tree.identity_element
        return had

    def sample(self, storage: Any, batch_size: int) -> tuple[torch.Tensor, dict]:
        """TorchRL's draw from NumPy's global RNG over the sum tree, with its importance weights
        ``(p_i / p_min) ** -beta`` when prioritized (none in the uniform mode: all 1, and the
        replay does not return them), in NumPy throughout: the tree takes and returns arrays,
        and the torch operations of ``PrioritizedSampler.sample`` doubled this draw's time on
        CartPole-sized batches. A sampler given a torch generator takes TorchRL's path."""
        if sampler_generator(self) is not None:
            return super().sample(storage, batch_size)
        sum_tree, min_tree = segment_trees(self)
        size = self.max_size
        total = sum_tree.query(0, size)
        if total <= 0:
            raise RuntimeError("no transition can be sampled (zero total mass)")
        mass = np.random.uniform(0.0, total, size=batch_size)
        index = np.minimum(sum_tree.scan_lower_bound(mass), size - 1)
        # A draw on a float boundary can land on a zero-mass slot: step left, as TorchRL does.
        leaf = sum_tree[index]
        zero = leaf == 0
        while zero.any():
            index = np.where(zero, index - 1, index)
            if (index < 0).any():
                raise RuntimeError("failed to find a slot with sampling mass")
            leaf = sum_tree[index]
            zero = leaf == 0
        if self.alpha == 0:
            return torch.from_numpy(index), {}
        p_min = min_tree.query(0, size)
        if p_min <= 0:
            raise RuntimeError("non-positive p_min")
        weight = (leaf / p_min) ** -self.beta
        return torch.from_numpy(index), {"priority_weight": torch.from_numpy(weight)}

    def enable(self, slots: np.ndarray, priority: float | torch.Tensor) -> None:
        """``update_priority(slots, priority)`` for distinct slots sharing one raw priority, as
        TorchRL computes it (the largest raw priority kept, ``(p + eps) ** alpha`` by
        ``torch.pow`` over as many elements) without its per-call tensor checks, which cost
        more than the rest of a replay write of a CartPole-sized batch."""
        eps, (top, _) = priority_state(self)
        raw = float(priority)
        if top is None or raw > float(top):
            top_raw = torch.tensor(raw, dtype=torch.float64)
            set_max_priority(self, top_raw, torch.tensor(int(slots[0])))
        if self.alpha == 0:
            value: float | np.ndarray = 1.0  # (p + eps) ** 0 is exactly 1 (uniform sampling)
        else:  # torch's pow over the slots, as TorchRL computes the values
            full = torch.full(slots.shape, raw, dtype=torch.float64)
            value = torch.pow(full + eps, self.alpha).numpy()
        sum_tree, min_tree = segment_trees(self)
        sum_tree[slots] = value
        min_tree[slots] = value

    def set_priority(self, slots: np.ndarray, priority: np.ndarray) -> None:
        """``update_priority`` for slot and float64 priority arrays: stores ``(p + eps) **
        alpha`` in both trees and keeps the largest raw priority as TorchRL does (its tensor
        path costs as much again as the rest of a CartPole-sized priority write)."""
        if slots.size == 0:
            return
        eps, (top, _) = priority_state(self)
        i = int(priority.argmax())
        if top is None or priority[i] > top:
            set_max_priority(self, torch.tensor(priority[i]), torch.tensor(slots[i]))
        sum_tree, min_tree = segment_trees(self)
        value = (priority + eps) ** self.alpha
        sum_tree[slots] = value
        min_tree[slots] = value

    def state_dict(self) -> dict[str, Any]:
        """TorchRL's state with the segment trees as tensors of their leaves: the C++ tree
        objects would make checkpoints unloadable with ``torch.load(weights_only=True)``."""
        return prioritized_state_dict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_prioritized_state_dict(self, state)


class ReplayMass:
    """The sampling mass of ``frames``' slots and the n-step window that decides it.

    ``mark_ready`` gives a transition mass once its n-step target is stored (``n`` later steps,
    or an episode end within them); ``invalidate`` takes it away when its frames are overwritten.
    ``num_valid`` counts the transitions with mass.
    """

    def __init__(
        self,
        frames: FrameStorage,
        *,
        n_step: int,
        prioritized: bool,
        alpha: float,
        beta: float,
        priority_eps: float,
    ) -> None:
        self.frames, self.n_step = frames, n_step
        self.sampler = MaskedPrioritizedSampler(
            frames.num_envs * frames.ring,
            alpha=alpha if prioritized else 0.0,
            beta=beta,
            eps=priority_eps,
            dtype=torch.float64,  # float32 sums over 1M slots can land a draw on a masked slot
        )
        self.num_valid = 0
        self.restart_streams()

    def restart_streams(self) -> None:
        """Drop the transitions still waiting for their n-step target."""
        n, e = self.n_step, self.frames.num_envs
        self._tail_entry = np.zeros((e, n), dtype=np.int64)
        self._tail_done = np.zeros((e, n), dtype=bool)
        self._tail_exists = np.zeros((e, n), dtype=bool)

    def invalidate(self, lo: torch.Tensor, hi: torch.Tensor) -> None:
        """Remove entries ``[lo_e, hi_e)`` of every env ``e`` from sampling."""
        ring = self.frames.ring
        lo = np.maximum(lo.numpy(), 0)
        hi = np.minimum(hi.numpy(), lo + ring)
        span = max(int((hi - lo).max()), 0)
        if span == 0:
            return
        entry = lo[:, None] + np.arange(span)
        keep = entry < hi[:, None]
        env = np.broadcast_to(np.arange(self.frames.num_envs)[:, None], entry.shape)
        slots = self.frames.slots(env[keep], entry[keep])
        self.num_valid -= self.sampler.disable(slots)

    def mark_ready(self, entry: np.ndarray, done: np.ndarray) -> None:
        """Give the transitions whose n-step target just became known the max priority.

        ``entry`` and ``done`` are a batch's ``[E, T]`` entry counters and episode ends. The
        window is the previous batch's last ``n`` steps (still waiting) plus this batch. A step is
        ready once ``n`` later steps are stored, or an episode ended within them.
        """
        n = self.n_step
        win_entry = np.concatenate([self._tail_entry, entry], 1)
        win_done = np.concatenate([self._tail_done, done], 1)
        win_exists = np.concatenate([self._tail_exists, np.ones_like(done)], 1)
        width = win_entry.shape[1]
        ready = np.repeat((np.arange(width) + n <= width - 1)[None], len(win_done), 0)
        was_ready = np.zeros_like(self._tail_done)
        for i in range(n):
            ready[:, : width - i] |= win_done[:, i:]
            was_ready[:, : n - i] |= self._tail_done[:, i:]
        ready &= win_exists
        ready[:, :n] &= ~was_ready
        env = np.broadcast_to(np.arange(self.frames.num_envs)[:, None], win_entry.shape)
        slots = self.frames.slots(env[ready], win_entry[ready])
        if slots.size:
            self.sampler.enable(slots, self.sampler.default_priority)
            self.num_valid += slots.size
        self._tail_entry = win_entry[:, -n:].copy()
        self._tail_done = win_done[:, -n:].copy()
        self._tail_exists = win_exists[:, -n:].copy()

    def draw(self, batch_size: int, beta: float | None) -> tuple[torch.Tensor, dict]:
        """``batch_size`` slots by mass and TorchRL's info (``priority_weight`` when
        prioritized); ``beta`` None keeps the last one given."""
        if beta is not None:
            self.sampler.beta = beta
        return self.sampler.sample(self.frames.tensor_storage, batch_size)

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priorities of the transitions ``index`` (``entry * num_envs + env``), skipping
        those overwritten since they were sampled."""
        frames = self.frames
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1).cpu().numpy()
        priority = torch.as_tensor(priority).detach().reshape(-1).to("cpu", torch.float64).numpy()
        entry, env = np.divmod(index, frames.num_envs)
        live = entry >= frames.bound(frames.written).numpy()[env]
        if not live.all():
            env, entry, priority = env[live], entry[live], priority[live]
        self.sampler.set_priority(frames.slots(env, entry), priority)
