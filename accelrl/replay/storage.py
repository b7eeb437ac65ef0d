"""The entries behind ``accelrl.replay.memory.FrameReplay``: one ring per env, each frame stored
once.

Entry ``j`` of env ``e`` lives in slot ``e * ring + j % ring`` of one flat storage; an entry is
one frame with the step's action, reward, ``done``, ``terminated``, ``life_lost`` and ``epos``
(its position in the episode, capped at ``stack - 1``). ``append`` writes a collector batch (a
step's newest frame, an episode's final frame after its last step, and at a stream start the
older frames of its first observation) and ``stacks`` rebuilds observations from the ``stack``
entries ending at an entry, zeros before the episode start (see ``accelrl.replay.memory`` for the
layout). The storage is RAM tensors or, with ``storage_dir``, tensordict memory-mapped files
(``memmap_like`` / ``load_memmap``: sparse files, reopened in place on resume).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import TensorStorage

Layout = dict[str, tuple[tuple[int, ...], torch.dtype]]


def word_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` (``n`` frames) as ``[n, words]``, in int64 words when the frame size allows it.

    ``index_put_`` and ``index_select`` move one element at a time, so 8-byte words move uint8
    frames faster than bytes (docs/development-notes.md#pytorch-and-the-platform).
    """
    rows = t.reshape(n, -1)
    size = rows.element_size()
    if rows.shape[1] * size % 8:
        return rows
    if rows.stride(-1) != 1 or rows.stride(0) * size % 8 or rows.storage_offset() * size % 8:
        rows = rows.contiguous()
    return rows.view(torch.int64)


class FrameStorage:
    """``num_envs`` rings of ``ring`` entries and the counters of what each env appended."""

    def __init__(
        self,
        *,
        num_envs: int,
        ring: int,
        obs_shape: tuple[int, ...],
        stack: int,
        storage_dir: str | Path | None,
    ) -> None:
        self.num_envs, self.ring, self.stack = num_envs, ring, stack
        self.obs_shape = tuple(obs_shape)
        self.frame_shape = self.obs_shape[1:] if stack > 1 else self.obs_shape
        self.dir = None if storage_dir is None else Path(storage_dir)
        self._back = np.arange(stack - 1, -1, -1)  # offsets of a frame stack's frames
        self.entries: TensorDict | None = None
        """The per-entry storage ``[num_envs * ring]``; None before the first ``append``."""
        self.tensor_storage: TensorStorage | None = None  # the entries, as TorchRL's sampler reads
        self.high_water: torch.Tensor | None = None  # memmapped max entry counter ever written
        self.written = torch.zeros(num_envs, dtype=torch.int64)  # entries appended per env
        self.columns: dict[str, np.ndarray] = {}
        self.restart_streams()

    def restart_streams(self) -> None:
        """Treat the next batch as the start of every row's stream: it stores the older frames
        of each row's first observation."""
        self._restart = True
        self._epos_next = torch.zeros(self.num_envs, dtype=torch.int64)

    # ----- creating and reopening -------------------------------------------------------------

    def layout(self, obs: torch.Tensor, action: torch.Tensor) -> Layout:
        """Shape and dtype of each entry's fields, from a batch's ``[E, T, ...]`` tensors."""
        return {
            "frame": (self.frame_shape, obs.dtype),
            "action": (tuple(action.shape[2:]), action.dtype),
            "reward": ((), torch.float32),
            "done": ((), torch.bool),
            "terminated": ((), torch.bool),
            "life_lost": ((), torch.bool),
            "epos": ((), torch.uint8),
        }

    def create(self, layout: Layout) -> None:
        size = self.num_envs * self.ring
        if self.dir is None:
            # torch.empty: pages are only backed by memory once written.
            fields = {k: torch.empty((size, *s), dtype=d) for k, (s, d) in layout.items()}
            self.entries = TensorDict(fields, batch_size=[size])
        else:
            # Zero-stride templates: memmap_like only reads shapes and dtypes; files are sparse.
            fields = {k: torch.zeros((), dtype=d).expand(size, *s) for k, (s, d) in layout.items()}
            template = TensorDict(fields, batch_size=[size])
            self.entries = template.memmap_like(prefix=str(self.dir / "entries"))
            water = TensorDict(
                {"high_water": torch.zeros(self.num_envs, dtype=torch.int64)},
                batch_size=[self.num_envs],
            )
            self.high_water = water.memmap(prefix=str(self.dir / "streams"))["high_water"]
        self._attach()

    def adopt(self, entries: TensorDict) -> None:
        """Use ``entries`` (a RAM storage from a state) as the storage."""
        self.entries = entries
        self._attach()

    def reopen(self) -> torch.Tensor:
        """Reopen ``storage_dir``'s files in place; returns the high-water entry counters (what
        a run wrote there, perhaps after the state being resumed was taken)."""
        assert self.dir is not None
        self.entries = TensorDict.load_memmap(self.dir / "entries")
        self.high_water = TensorDict.load_memmap(self.dir / "streams")["high_water"]
        self._attach()
        return self.high_water

    def _attach(self) -> None:
        size = self.num_envs * self.ring
        if self.entries.batch_size != torch.Size([size]):
            raise ValueError(f"storage holds {self.entries.batch_size} entries, expected {size}")
        self.tensor_storage = TensorStorage(self.entries)
        # The per-step columns as NumPy arrays over the same memory (RAM or memmap): a TensorDict
        # lookup per read costs more than the read, and a NumPy gather of a few hundred elements
        # is faster than torch.index_select (docs/development-notes.md#pytorch-and-the-platform).
        self.columns = {k: v.numpy() for k, v in self.entries.items() if k != "frame"}
        self._frame_dtype = self.entries["frame"].dtype
        self._action_shape = tuple(self.entries["action"].shape[1:])
        self._frame_rows = word_rows(self.entries["frame"], size)  # a view: writes go to storage

    # ----- index arithmetic -------------------------------------------------------------------

    def slots(self, env: torch.Tensor, entry: torch.Tensor) -> torch.Tensor:
        """Storage slots of entry counters ``entry`` of envs ``env`` (tensors or arrays)."""
        return env * self.ring + entry % self.ring

    def bound(self, written: torch.Tensor) -> torch.Tensor:
        """Oldest entry counter whose stack is still fully stored, per env."""
        return written - self.ring + self.stack - 1

    # ----- writing and reading ----------------------------------------------------------------

    def append(
        self,
        obs: torch.Tensor,
        final_obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        terminated: torch.Tensor,
        life_lost: torch.Tensor,
    ) -> np.ndarray:
        """Store a batch (``obs``, ``action`` ``[E, T, ...]``, ``reward`` as the batch holds
        it, the flags ``[E, T]``, CPU tensors; ``final_obs`` the final observations of the
        episodes that ended in it, ``[ended steps, ...]`` in row-major order); returns the
        entry counters of its steps ``[E, T]``. ``written`` then counts the batch's entries."""
        if self.entries is None:
            self.create(self.layout(obs, action))
        # In NumPy over the storage's memory: the index arithmetic and the column writes are a
        # few microseconds each there, against ten or more for torch's operations and
        # TensorDict lookups, at every collected batch (docs/performance.md#the-acting-path).
        done = done.numpy()
        num_envs, steps = done.shape
        stack = self.stack
        obs_np = obs.numpy()
        frames = obs_np[:, :, -1] if stack > 1 else obs_np
        written = self.written.numpy()
        cols = self.columns

        # Entry counters: a prefix of older frames at a stream start, one entry per step, and
        # one more (the final frame) after every episode end.
        prefix = stack - 1 if self._restart else 0
        time = np.arange(steps)
        ends_before = done.cumsum(1) - done
        entry = written[:, None] + prefix + time + ends_before
        appended = prefix + steps + done.sum(1)

        # Position in the episode: counts on from the previous batch until a reset in this one.
        after_end = np.zeros_like(done)
        after_end[:, 1:] = done[:, :-1]
        start = np.maximum.accumulate(np.where(after_end, time, -1), axis=1)
        base = np.full(num_envs, prefix) if self._restart else self._epos_next.numpy()
        epos = np.where(start >= 0, time - start, base[:, None] + time)
        cap = stack - 1

        first_slot = np.arange(num_envs)[:, None] * self.ring
        slot = (first_slot + entry % self.ring).reshape(-1)
        rows = self._frame_rows.numpy()
        rows[slot] = self._rows_of(frames, slot.size)
        cols["action"][slot] = action.numpy().reshape(-1, *self._action_shape)
        cols["reward"][slot] = reward.numpy().reshape(-1)
        cols["done"][slot] = done.reshape(-1)
        cols["terminated"][slot] = terminated.numpy().reshape(-1)
        cols["life_lost"][slot] = life_lost.numpy().reshape(-1)
        cols["epos"][slot] = np.minimum(epos, cap).reshape(-1)
        if done.any():
            env, at = np.nonzero(done)
            final = env * self.ring + (entry[env, at] + 1) % self.ring
            final_np = final_obs.numpy()  # [ended steps, ...], in np.nonzero(done)'s order
            final_frames = final_np[:, -1] if stack > 1 else final_np
            rows[final] = self._rows_of(final_frames, final.size)
            cols["epos"][final] = np.minimum(epos[env, at] + 1, cap)
        if prefix:
            offs = np.arange(prefix)
            pre = (first_slot + (written[:, None] + offs) % self.ring).reshape(-1)
            rows[pre] = self._rows_of(obs_np[:, 0, :prefix], pre.size)
            cols["epos"][pre] = np.tile(offs, num_envs)

        self.written = torch.from_numpy(written + appended)
        if self.high_water is not None:
            self.high_water.copy_(torch.maximum(self.high_water, self.written))
        self._epos_next = torch.from_numpy(np.where(done[:, -1], 0, epos[:, -1] + 1))
        self._restart = False
        return entry

    def _rows_of(self, frames: np.ndarray, n: int) -> np.ndarray:
        """``frames`` (``n`` of them) as rows of the storage's frame rows (``word_rows``)."""
        rows = np.ascontiguousarray(frames).reshape(n, -1)
        return rows.view(np.int64) if self._frame_rows.dtype == torch.int64 else rows

    def stacks(self, env: np.ndarray, end: np.ndarray) -> torch.Tensor:
        """Observations ``[B, *obs_shape]`` rebuilt from the entries ending at ``end``."""
        dtype = self._frame_dtype
        if self.stack == 1:
            out = torch.index_select(self._frame_rows, 0, torch.from_numpy(self.slots(env, end)))
            return out.view(dtype).view(len(end), *self.obs_shape)
        back = self._back  # oldest frame first, as the env stacks
        slots = self.slots(env[:, None], end[:, None] - back).reshape(-1)
        out = torch.index_select(self._frame_rows, 0, torch.from_numpy(slots))
        epos = self.columns["epos"][self.slots(env, end)]
        # Frames from before the episode start are zeros, as the env pads its first stacks
        # (index_fill_ on the few such frames; a broadcast masked_fill_ costs a full pass).
        before_start = np.flatnonzero(back > epos[:, None])
        out.index_fill_(0, torch.from_numpy(before_start), 0)
        return out.view(dtype).view(len(end), *self.obs_shape)
