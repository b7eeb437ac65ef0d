"""Replay for DQN-family learners that stores each observation frame once, with n-step targets.

Layout. The buffer keeps one ring of ``L = capacity // num_envs`` entries per env (collector row),
in one flat storage of ``num_envs * L`` entries (entry ``j`` of env ``e`` lives in slot
``e * L + j % L``). An entry is one frame (``obs[-1]`` of a stacked observation, or the whole
observation when ``stack == 1``) with the step's action, reward, ``done``, ``terminated``,
``life_lost`` and ``epos``, its position in the episode (capped at ``stack - 1``). Every step
appends its observation's newest frame; a step that ends an episode also appends the final frame
of that episode (from ``("next", obs_key)``) right after it, and the new episode's first frame
follows. So the next observation of the transition at entry ``j`` is always the stack ending at
entry ``j + 1``, and its n-step target the stack ending at ``j + k``, ``k`` being the number of
rewards summed. Stacks are rebuilt from the ``stack`` entries ending there, with the frames from
before the episode start set to zero, exactly as ale-py's ``AtariVectorEnv`` emits them (its reset
stack is ``[0, 0, 0, f0]``). The first batch of a stream (and the first after ``restart_streams``)
also stores the older frames of each row's first observation, so a stream that starts
mid-episode is rebuilt exactly too. The entries that are not transitions (one per episode end,
``stack - 1`` per row and stream start) take room: the buffer holds ``capacity`` minus those
transitions (0.2% for Atari episodes of 500 steps).

Validity. A transition can be sampled once its n-step target is stored (``n`` later steps, or
an episode end within them) and until an entry its stack reads is overwritten; both are
maintained on every ``extend`` as exact zero/non-zero sampling mass, so samples never see
pending or overwritten data.

TorchRL pieces. Sampling uses TorchRL's ``PrioritizedSampler`` (C++ sum/min segment trees) in
both modes: with ``alpha = 0`` every sampleable entry has mass 1, which is exact uniform sampling
over the valid entries; a small subclass sets the mass of entries that are not (or no longer)
transitions to exactly zero, which ``update_priority`` cannot do (it stores ``(p + eps) ** alpha``).
The sampler reads the storage through TorchRL's ``TensorStorage`` wrapped around a TensorDict
that is either plain RAM tensors or, with ``storage_dir``, tensordict memory-mapped files
(``memmap_like`` / ``load_memmap``: sparse files, reopened in place on resume). TorchRL's
``TensorDictReplayBuffer`` is not used: its storage returns the items that were written, while
here one sample gathers ``2 * stack`` frames at offsets within an env's ring and ``n`` rewards,
and items must stay masked until their target arrives, which its writer/sampler pair cannot
express without storing the stacks.

Not thread-safe: ``extend`` and ``sample`` must not run concurrently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import PrioritizedSampler, TensorStorage

from accelrl.compat import new_tensordict_unchecked


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` (``n`` frames) as ``[n, words]``, in int64 words when the frame size allows it.

    ``index_put_`` and ``index_select`` move one element at a time: 8-byte words move uint8
    frames about 4x faster than bytes.
    """
    rows = t.reshape(n, -1)
    size = rows.element_size()
    if rows.shape[1] * size % 8:
        return rows
    if rows.stride(-1) != 1 or rows.stride(0) * size % 8 or rows.storage_offset() * size % 8:
        rows = rows.contiguous()
    return rows.view(torch.int64)


class _MaskedPrioritizedSampler(PrioritizedSampler):
    """TorchRL's prioritized sampler plus entries with exactly zero sampling mass."""

    def disable(self, index: torch.Tensor) -> int:
        """Give ``index`` (distinct slots) zero mass; returns how many of them had mass."""
        if index.numel() == 0:
            return 0
        had = int((torch.as_tensor(self._sum_tree[index]) > 0).sum())
        self._sum_tree[index] = torch.zeros(index.shape, dtype=torch.float64)
        # The min tree's neutral value keeps disabled slots out of p_min (the IS-weight norm).
        neutral = torch.full(index.shape, self._min_tree.identity_element, dtype=torch.float64)
        self._min_tree[index] = neutral
        return had

    def sample(self, storage: Any, batch_size: int) -> tuple[torch.Tensor, dict]:
        """Uniform mode (alpha 0, every valid entry mass 1): TorchRL's draw (numpy's global
        RNG, the sum tree's lower bound) without the importance weights, which are all 1 and
        which the replay does not return; prioritized mode: TorchRL's ``sample``."""
        if self._alpha != 0 or self._rng is not None:
            return super().sample(storage, batch_size)
        total = self._sum_tree.query(0, self._max_capacity)
        if total <= 0:
            raise RuntimeError("no transition can be sampled (zero total mass)")
        mass = np.random.uniform(0.0, total, size=batch_size)
        # NumPy throughout: the tree takes and returns arrays, and torch's per-operation cost
        # would double this draw's time on CartPole-sized batches.
        index = np.minimum(self._sum_tree.scan_lower_bound(mass), self._max_capacity - 1)
        # A draw on a float boundary can land on a zero-mass slot: step left, as TorchRL does.
        zero = self._sum_tree[index] == 0
        while zero.any():
            index = np.where(zero, index - 1, index)
            if (index < 0).any():
                raise RuntimeError("failed to find a slot with sampling mass")
            zero = self._sum_tree[index] == 0
        index = torch.from_numpy(index)
        return index, {}

    def state_dict(self) -> dict[str, Any]:
        """TorchRL's state with the segment trees as tensors of their leaves: the C++ tree
        objects would make checkpoints unloadable with ``torch.load(weights_only=True)``."""
        state = super().state_dict()
        slots = torch.arange(self._max_capacity)
        state["_sum_tree"] = torch.as_tensor(self._sum_tree[slots]).clone()
        state["_min_tree"] = torch.as_tensor(self._min_tree[slots]).clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        sum_leaves, min_leaves = state["_sum_tree"], state["_min_tree"]
        super().load_state_dict({**state, "_sum_tree": self._sum_tree, "_min_tree": self._min_tree})
        slots = torch.arange(self._max_capacity)
        self._sum_tree[slots] = sum_leaves.to(torch.float64)
        self._min_tree[slots] = min_leaves.to(torch.float64)


class FrameReplay:
    """Replay of collector batches ``[E, T]`` / ``[W, E, T]`` storing each frame once."""

    def __init__(
        self,
        *,
        capacity: int,
        n_step: int = 1,
        prioritized: bool = False,
        alpha: float = 0.5,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        storage_dir: str | None = None,
        num_envs: int,
        obs_key: str,
        obs_shape: tuple[int, ...],
        stack: int,
        gamma: float,
        life_loss_boundary: bool = False,
        device: str | torch.device = "cpu",
    ) -> None:
        if stack > 1 and (len(obs_shape) < 2 or obs_shape[0] != stack):
            raise ValueError(f"obs_shape {obs_shape} must start with the stack size {stack}")
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        self.capacity, self.n_step, self.prioritized = capacity, n_step, prioritized
        self.num_envs = num_envs
        self.obs_key = obs_key
        self.obs_shape = tuple(obs_shape)
        self.stack = stack
        self.gamma = gamma
        self.life_loss_boundary = life_loss_boundary
        self.device = torch.device(device)
        self.ring = capacity // num_envs
        self._ahead = np.arange(n_step)  # offsets of an n-step window
        self._back = np.arange(stack - 1, -1, -1)  # offsets of a frame stack's frames
        # gamma ** k for k = 0..n, float32 (k = 0 never occurs: a sample spans >= 1 step)
        pows = torch.pow(gamma, torch.arange(n_step + 1, dtype=torch.float64))
        self._gamma_pows = pows.float().numpy()
        self._discounts = torch.tensor([gamma**i for i in range(n_step)], dtype=torch.float32)
        self._frame_shape = self.obs_shape[1:] if stack > 1 else self.obs_shape
        self._dir = None if storage_dir is None else Path(storage_dir)
        self._sampler = _MaskedPrioritizedSampler(
            num_envs * self.ring,
            alpha=alpha if prioritized else 0.0,
            beta=beta,
            eps=priority_eps,
            dtype=torch.float64,  # float32 sums over 1M slots can land a draw on a masked slot
        )
        self._entries: TensorDict | None = None
        self._store: TensorStorage | None = None
        self._high_water: torch.Tensor | None = None  # memmapped max entry counter ever written
        self._written = torch.zeros(num_envs, dtype=torch.int64)  # entries appended per env
        self._num_valid = 0
        self.restart_streams()

    # ----- storage -------------------------------------------------------------------------

    @property
    def storage(self) -> TensorDict | None:
        """The per-entry storage TensorDict ``[num_envs * ring]``; None before the first extend."""
        return self._entries

    def _layout(self, batch: TensorDictBase) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        obs, action = batch.get(self.obs_key), batch.get("action")
        return {
            "frame": (self._frame_shape, obs.dtype),
            "action": (tuple(action.shape[2:]), action.dtype),
            "reward": ((), torch.float32),
            "done": ((), torch.bool),
            "terminated": ((), torch.bool),
            "life_lost": ((), torch.bool),
            "epos": ((), torch.uint8),
        }

    def _create(self, layout: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> None:
        size = self.num_envs * self.ring
        if self._dir is None:
            # torch.empty: pages are only backed by memory once written.
            fields = {k: torch.empty((size, *s), dtype=d) for k, (s, d) in layout.items()}
            self._entries = TensorDict(fields, batch_size=[size])
        else:
            # Zero-stride templates: memmap_like only reads shapes and dtypes; files are sparse.
            fields = {k: torch.zeros((), dtype=d).expand(size, *s) for k, (s, d) in layout.items()}
            template = TensorDict(fields, batch_size=[size])
            self._entries = template.memmap_like(prefix=str(self._dir / "entries"))
            water = TensorDict(
                {"high_water": torch.zeros(self.num_envs, dtype=torch.int64)},
                batch_size=[self.num_envs],
            )
            self._high_water = water.memmap(prefix=str(self._dir / "streams"))["high_water"]
        self._attach()

    def _attach(self) -> None:
        size = self.num_envs * self.ring
        if self._entries.batch_size != torch.Size([size]):
            raise ValueError(f"storage holds {self._entries.batch_size} entries, expected {size}")
        self._store = TensorStorage(self._entries)
        # The per-step columns as NumPy arrays over the same memory (RAM or memmap): a TensorDict
        # lookup per read costs more than the read, and a NumPy gather of a few hundred elements
        # ~1 us where torch.index_select costs ~10 (``benchmarks/replay_sample.py``).
        self._np = {k: v.numpy() for k, v in self._entries.items() if k != "frame"}
        self._frame_dtype = self._entries["frame"].dtype
        self._action_shape = tuple(self._entries["action"].shape[1:])
        self._frame_rows = _rows(self._entries["frame"], size)  # a view: writes go to storage

    def _slots(self, env: torch.Tensor, entry: torch.Tensor) -> torch.Tensor:
        return env * self.ring + entry % self.ring

    def _bound(self, written: torch.Tensor) -> torch.Tensor:
        """Oldest entry counter whose stack is still fully stored, per env."""
        return written - self.ring + self.stack - 1

    def _invalidate(self, lo: torch.Tensor, hi: torch.Tensor) -> None:
        """Remove entries ``[lo_e, hi_e)`` of every env ``e`` from sampling."""
        lo = lo.clamp_min(0)
        hi = torch.minimum(hi, lo + self.ring)
        span = int((hi - lo).max().clamp_min(0))
        if span == 0:
            return
        entry = lo[:, None] + torch.arange(span)
        env = torch.arange(self.num_envs)[:, None].expand_as(entry)
        keep = entry < hi[:, None]
        self._num_valid -= self._sampler.disable(self._slots(env[keep], entry[keep]))

    # ----- writing -------------------------------------------------------------------------

    def restart_streams(self) -> None:
        """Treat the next batch as the start of every row's stream (a new or reset collector).

        Transitions still waiting for their n-step target are dropped; the next batch stores the
        older frames of each row's first observation. ``load_state_dict`` calls it.
        """
        n, e = self.n_step, self.num_envs
        self._restart = True
        self._epos_next = torch.zeros(e, dtype=torch.int64)
        self._tail_entry = torch.zeros(e, n, dtype=torch.int64)
        self._tail_done = torch.zeros(e, n, dtype=torch.bool)
        self._tail_exists = torch.zeros(e, n, dtype=torch.bool)

    @torch.no_grad()
    def extend(self, batch: TensorDictBase) -> None:
        """Append a collector batch ``[E, T]`` or ``[W, E, T]`` (rows = envs, time last)."""
        if batch.ndim not in (2, 3):
            raise ValueError(f"expected batch dims [E, T] or [W, E, T], got {batch.batch_size}")
        batch = batch.reshape(-1, batch.batch_size[-1]).to("cpu")
        num_envs, steps = batch.batch_size
        if num_envs != self.num_envs:
            raise ValueError(f"batch has {num_envs} rows, the replay was built for {self.num_envs}")
        n, stack, ring = self.n_step, self.stack, self.ring
        # One batch appends up to 2 entries a step; it must not reach the transitions waiting
        # in the previous batch's tail, nor wrap onto itself.
        need = 2 * (steps + n + stack - 1)
        if ring < need:
            raise ValueError(
                f"capacity per env ({ring}) too small for batches of {steps} steps: "
                f"need at least {need} per env"
            )
        if "env_id" in batch.keys() and not (batch["env_id"] == batch["env_id"][:, :1]).all():
            raise ValueError("each batch row must be one simulator (ale-py async mode is not)")
        nxt = batch.get("next")
        obs, next_obs = batch.get(self.obs_key), nxt.get(self.obs_key)
        if tuple(obs.shape[2:]) != self.obs_shape:
            raise ValueError(
                f"{self.obs_key} has shape {tuple(obs.shape[2:])}, not {self.obs_shape}"
            )
        if self._entries is None:
            self._create(self._layout(batch))
        done = nxt.get("done").reshape(num_envs, steps)
        terminated = nxt.get("terminated").reshape(num_envs, steps)
        if "life_lost" in nxt.keys():
            life_lost = nxt.get("life_lost").reshape(num_envs, steps)
        else:
            life_lost = torch.zeros_like(done)
        frames = obs[:, :, -1] if stack > 1 else obs

        # Entry counters: a prefix of older frames at a stream start, one entry per step, and
        # one more (the final frame) after every episode end.
        prefix = stack - 1 if self._restart else 0
        time = torch.arange(steps).expand(num_envs, steps)
        entry = self._written[:, None] + prefix + time + (done.cumsum(1) - done.long())
        appended = prefix + steps + done.sum(1)

        # Position in the episode: counts on from the previous batch until a reset in this one.
        after_end = torch.zeros_like(done)
        after_end[:, 1:] = done[:, :-1]
        start = torch.where(after_end, time, -1).cummax(1).values
        base = torch.full_like(self._epos_next, prefix) if self._restart else self._epos_next
        epos = torch.where(start >= 0, time - start, base[:, None] + time)
        cap = stack - 1

        env = torch.arange(num_envs)[:, None].expand(num_envs, steps)
        slot = self._slots(env, entry).reshape(-1)
        store = self._entries
        self._frame_rows[slot] = _rows(frames, slot.numel())
        store["action"][slot] = batch.get("action").reshape(-1, *self._action_shape)
        store["reward"][slot] = nxt.get("reward").reshape(-1).to(torch.float32)
        store["done"][slot] = done.reshape(-1)
        store["terminated"][slot] = terminated.reshape(-1)
        store["life_lost"][slot] = life_lost.reshape(-1)
        store["epos"][slot] = epos.clamp_max(cap).to(torch.uint8).reshape(-1)
        if done.any():
            final = self._slots(env[done], entry[done] + 1)
            final_frames = next_obs[done][:, -1] if stack > 1 else next_obs[done]
            self._frame_rows[final] = _rows(final_frames, final.numel())
            store["epos"][final] = (epos[done] + 1).clamp_max(cap).to(torch.uint8)
        if prefix:
            offs = torch.arange(prefix)
            pre = self._slots(torch.arange(num_envs)[:, None], self._written[:, None] + offs)
            self._frame_rows[pre.reshape(-1)] = _rows(obs[:, 0, :prefix], pre.numel())
            store["epos"][pre.reshape(-1)] = offs.to(torch.uint8).repeat(num_envs)

        written = self._written + appended
        self._invalidate(self._bound(self._written), self._bound(written))
        self._written = written
        if self._high_water is not None:
            self._high_water.copy_(torch.maximum(self._high_water, written))
        self._mark_ready(entry, done)
        self._epos_next = torch.where(done[:, -1], 0, epos[:, -1] + 1)
        self._restart = False

    def _mark_ready(self, entry: torch.Tensor, done: torch.Tensor) -> None:
        """Give the transitions whose n-step target just became known the max priority.

        The window is the previous batch's last ``n`` steps (still waiting) plus this batch. A
        step is ready once ``n`` later steps are stored, or an episode ended within them.
        """
        n = self.n_step
        win_entry = torch.cat([self._tail_entry, entry], 1)
        win_done = torch.cat([self._tail_done, done], 1)
        win_exists = torch.cat([self._tail_exists, torch.ones_like(done)], 1)
        width = win_entry.shape[1]
        ready = (torch.arange(width) + n <= width - 1).expand_as(win_done).clone()
        was_ready = torch.zeros_like(self._tail_done)
        for i in range(n):
            ready[:, : width - i] |= win_done[:, i:]
            was_ready[:, : n - i] |= self._tail_done[:, i:]
        ready &= win_exists
        ready[:, :n] &= ~was_ready
        env = torch.arange(self.num_envs)[:, None].expand_as(win_entry)
        slots = self._slots(env[ready], win_entry[ready])
        if slots.numel():
            top = float(self._sampler.default_priority)
            self._sampler.update_priority(slots, torch.full(slots.shape, top, dtype=torch.float64))
            self._num_valid += slots.numel()
        self._tail_entry = win_entry[:, -n:].clone()
        self._tail_done = win_done[:, -n:].clone()
        self._tail_exists = win_exists[:, -n:].clone()

    # ----- reading -------------------------------------------------------------------------

    def __len__(self) -> int:
        """Transitions that can be sampled now."""
        return self._num_valid

    def _stacks(self, env: np.ndarray, end: np.ndarray) -> torch.Tensor:
        """Observations ``[B, *obs_shape]`` rebuilt from the entries ending at ``end``."""
        dtype = self._frame_dtype
        if self.stack == 1:
            out = torch.index_select(self._frame_rows, 0, torch.from_numpy(self._slots(env, end)))
            return out.view(dtype).view(len(end), *self.obs_shape)
        back = self._back  # oldest frame first, as the env stacks
        slots = self._slots(env[:, None], end[:, None] - back).reshape(-1)
        out = torch.index_select(self._frame_rows, 0, torch.from_numpy(slots))
        epos = self._np["epos"][self._slots(env, end)]
        # Frames from before the episode start are zeros, as the env pads its first stacks
        # (index_fill_ on the few such frames; a broadcast masked_fill_ costs a full pass).
        before_start = np.flatnonzero(back > epos[:, None])
        out.index_fill_(0, torch.from_numpy(before_start), 0)
        return out.view(dtype).view(len(end), *self.obs_shape)

    @torch.no_grad()
    def sample(self, batch_size: int, beta: float | None = None) -> TensorDict:
        """A TensorDict ``[batch_size]`` of n-step transitions.

        Keys: ``obs_key`` and ``("next", obs_key)`` (the observation and the one ``k`` steps
        later, or the episode's final one, as the env emitted them), ``action``, ``("next",
        "reward")`` (sum of ``gamma ** i * r_i`` over the ``k <= n`` rewards up to the first
        episode end, or life loss with ``life_loss_boundary``), ``("next", "done")`` (such a
        boundary within the ``k`` steps), ``("next", "terminated")`` (a terminal or life-loss
        boundary: do not bootstrap), ``("next", "truncated")``, ``gamma_n`` float ``[B, 1]`` =
        ``gamma ** k`` (the bootstrap discount), ``steps_to_next_obs`` int64 ``[B, 1]`` = ``k``
        (the key TorchRL's value estimators raise gamma to), ``index`` int64 ids for
        ``update_priority`` and, when prioritized, ``_weight`` float ``[B]``: (N P(i)) ** -beta
        divided by its maximum over the buffer. ``beta`` None keeps the last one given
        (initially ``beta``).
        """
        if self._num_valid == 0:
            raise RuntimeError("no transition can be sampled yet (n-step targets pending)")
        if beta is not None:
            self._sampler.beta = beta
        slot, info = self._sampler.sample(self._store, batch_size)
        # Index arithmetic and the per-step columns run in NumPy (about a microsecond an
        # operation, ~10 for torch's); the frame gathers use torch.
        slot = torch.as_tensor(slot, dtype=torch.int64).numpy()
        env, pos = np.divmod(slot, self.ring)
        last = self._written.numpy()[env] - 1
        entry = last - (last - pos) % self.ring
        cols = self._np
        col = (batch_size, 1)
        if self.n_step == 1:
            # One step: the window is the entry itself (``entry`` = ``pos`` modulo the ring).
            ended = cols["done"][slot]
            terminal = cols["terminated"][slot]
            if self.life_loss_boundary:
                lost = cols["life_lost"][slot]
                ended, terminal = ended | lost, terminal | lost
            ret = torch.from_numpy(cols["reward"][slot])
            steps = np.ones(batch_size, dtype=np.int64)
        else:
            # The n steps from each sampled entry ([B, n]); step i counts while no boundary
            # came before it.
            window = self._slots(env[:, None], entry[:, None] + self._ahead)
            stop, term = cols["done"][window], cols["terminated"][window]
            if self.life_loss_boundary:
                lost = cols["life_lost"][window]
                stop, term = stop | lost, term | lost
            alive = stop.cumsum(1) - stop == 0
            reward = torch.from_numpy(cols["reward"][window])
            ret = (reward * self._discounts).where(torch.from_numpy(alive), 0.0).sum(1)
            steps = alive.sum(1)
            ended = (alive & stop).any(1)
            terminal = (alive & term).any(1)
        truncated = ended & ~terminal

        cpu = torch.device("cpu")  # the storage's (RAM or memmap); moved to self.device below
        nxt = {
            self.obs_key: self._stacks(env, entry + steps),
            "reward": ret.view(col),
            "done": torch.from_numpy(ended.reshape(col)),
            "terminated": torch.from_numpy(terminal.reshape(col)),
            "truncated": torch.from_numpy(truncated.reshape(col)),
        }
        out = {
            self.obs_key: self._stacks(env, entry),
            "action": torch.from_numpy(cols["action"][slot]),
            "gamma_n": torch.from_numpy(self._gamma_pows[steps].reshape(col)),
            "steps_to_next_obs": torch.from_numpy(steps.reshape(col)),
            "index": torch.from_numpy(entry * self.num_envs + env),
            "next": new_tensordict_unchecked(nxt, torch.Size([batch_size]), cpu),
        }
        if self.prioritized:
            out["_weight"] = torch.as_tensor(info["priority_weight"]).to(torch.float32)
        # Built from tensors made above with these shapes: the checked constructor's per-key
        # validation would cost a tenth of a CartPole gradient step.
        td = new_tensordict_unchecked(out, torch.Size([batch_size]), cpu)
        return td if self.device.type == "cpu" else td.to(self.device)

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priorities (e.g. ``|td_error|``) of sampled ``index``; no-op when uniform.

        Stored as ``(priority + eps) ** alpha`` by TorchRL's sampler. Transitions overwritten
        since they were sampled are skipped.
        """
        if not self.prioritized:
            return
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1).cpu()
        priority = torch.as_tensor(priority).detach().reshape(-1).to("cpu", torch.float64)
        env, entry = index % self.num_envs, index // self.num_envs
        live = entry >= self._bound(self._written)[env]
        if live.any():
            self._sampler.update_priority(self._slots(env[live], entry[live]), priority[live])

    # ----- checkpoints ---------------------------------------------------------------------

    def _signature(self) -> dict[str, Any]:
        # What a state must match to be loaded here; alpha, beta and eps come with its sampler.
        return {
            "num_envs": self.num_envs,
            "ring": self.ring,
            "stack": self.stack,
            "n_step": self.n_step,
            "prioritized": self.prioritized,
            "obs_shape": self.obs_shape,
        }

    def state_dict(self) -> dict[str, Any]:
        """Counters, sampler trees and, without ``storage_dir``, the storage itself (not copied)."""
        return {
            **self._signature(),
            "created": self._entries is not None,
            "written": self._written.clone(),
            "num_valid": self._num_valid,
            "sampler": self._sampler.state_dict(),
            "entries": self._entries if self._dir is None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict()``; with ``storage_dir`` the frames are reopened in place.

        Call it before any ``extend`` on this instance. Entries overwritten after the state was
        taken (a run that went on before it stopped) are removed from sampling. The next batch
        starts new streams (``restart_streams``).
        """
        for key, mine in self._signature().items():
            if state[key] != mine:
                raise ValueError(f"replay state has {key}={state[key]!r}, this replay {mine!r}")
        if self._entries is not None and self._dir is not None:
            raise RuntimeError("load_state_dict must come before extend with a storage_dir")
        if state["created"] and (state["entries"] is None) != (self._dir is not None):
            raise ValueError("the state and this replay disagree on using a storage_dir")
        self._written = state["written"].clone()
        self._num_valid = state["num_valid"]
        self._sampler.load_state_dict(state["sampler"])
        if state["created"]:
            if self._dir is None:
                self._entries = state["entries"]
            else:
                self._entries = TensorDict.load_memmap(self._dir / "entries")
                water = TensorDict.load_memmap(self._dir / "streams")["high_water"]
                self._high_water = water
                self._invalidate(self._bound(self._written), self._bound(water))
            self._attach()
        self.restart_streams()
