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
transitions to exactly zero, which ``update_priority`` cannot do (it stores ``(p + eps) ** alpha``)
(``accelrl.replay.sampler``). The sampler reads the storage through TorchRL's ``TensorStorage``
wrapped around a TensorDict that is either plain RAM tensors or, with ``storage_dir``, tensordict
memory-mapped files (``memmap_like`` / ``load_memmap``: sparse files, reopened in place on
resume; ``accelrl.replay.storage``). TorchRL's
``TensorDictReplayBuffer`` is not used: its storage returns the items that were written, while
here one sample gathers ``2 * stack`` frames at offsets within an env's ring and ``n`` rewards,
and items must stay masked until their target arrives, which its writer/sampler pair cannot
express without storing the stacks.

Not thread-safe: ``extend`` and ``sample`` must not run concurrently.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from accelrl.batches import ends, is_compact, next_obs_at_ends
from accelrl.compat import new_tensordict_unchecked
from accelrl.replay.sampler import ReplayMass
from accelrl.replay.storage import FrameStorage


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
        # gamma ** k for k = 0..n, float32 (k = 0 never occurs: a sample spans >= 1 step)
        pows = torch.pow(gamma, torch.arange(n_step + 1, dtype=torch.float64))
        self._gamma_pows = pows.float().numpy()
        self._discounts = torch.tensor([gamma**i for i in range(n_step)], dtype=torch.float32)
        self._frames = FrameStorage(
            num_envs=num_envs,
            ring=self.ring,
            obs_shape=self.obs_shape,
            stack=stack,
            storage_dir=storage_dir,
        )
        self._mass = ReplayMass(
            self._frames,
            n_step=n_step,
            prioritized=prioritized,
            alpha=alpha,
            beta=beta,
            priority_eps=priority_eps,
        )

    @property
    def storage(self) -> TensorDict | None:
        """The per-entry storage TensorDict ``[num_envs * ring]``; None before the first extend."""
        return self._frames.entries

    # ----- writing -------------------------------------------------------------------------

    def restart_streams(self) -> None:
        """Treat the next batch as the start of every row's stream (a new or reset collector).

        Transitions still waiting for their n-step target are dropped; the next batch stores the
        older frames of each row's first observation. ``load_state_dict`` calls it.
        """
        self._frames.restart_streams()
        self._mass.restart_streams()

    @torch.no_grad()
    def extend(self, batch: TensorDictBase) -> None:
        """Append a collector batch ``[E, T]`` or ``[W, E, T]`` (rows = envs, time last)."""
        if batch.ndim not in (2, 3):
            raise ValueError(f"expected batch dims [E, T] or [W, E, T], got {batch.batch_size}")
        if batch.ndim == 3:
            batch = batch.reshape(-1, batch.batch_size[-1])
        if batch.device is None or batch.device.type != "cpu":
            batch = batch.to("cpu")
        num_envs, steps = batch.batch_size
        if num_envs != self.num_envs:
            raise ValueError(f"batch has {num_envs} rows, the replay was built for {self.num_envs}")
        # One batch appends up to 2 entries a step; it must not reach the transitions waiting
        # in the previous batch's tail, nor wrap onto itself.
        need = 2 * (steps + self.n_step + self.stack - 1)
        if self.ring < need:
            raise ValueError(
                f"capacity per env ({self.ring}) too small for batches of {steps} steps: "
                f"need at least {need} per env"
            )
        keys = batch.keys()
        if "env_id" in keys:
            env_id = batch.get("env_id").numpy().reshape(num_envs, steps)
            if not (env_id == env_id[:, :1]).all():
                raise ValueError("each batch row must be one simulator (ale-py async mode is not)")
        nxt = batch.get("next")
        obs = batch.get(self.obs_key)
        if tuple(obs.shape[2:]) != self.obs_shape:
            raise ValueError(
                f"{self.obs_key} has shape {tuple(obs.shape[2:])}, not {self.obs_shape}"
            )
        done = nxt.get("done").reshape(num_envs, steps)
        terminated = nxt.get("terminated").reshape(num_envs, steps)
        if "life_lost" in nxt.keys():
            life_lost = nxt.get("life_lost").reshape(num_envs, steps)
        else:
            life_lost = torch.zeros_like(done)
        # The episodes' final observations, row-major (a compact batch keeps them on the side:
        # ``accelrl.batches``).
        if is_compact(batch):
            at_ends = next_obs_at_ends(batch, self.obs_key)
            final_obs = at_ends[done[ends(done)]]
        else:
            final_obs = nxt.get(self.obs_key).reshape(num_envs, steps, *self.obs_shape)[done]
        frames = self._frames
        before = frames.written
        entry = frames.append(
            obs, final_obs, batch.get("action"), nxt.get("reward"), done, terminated, life_lost
        )
        self._mass.invalidate(frames.bound(before), frames.bound(frames.written))
        self._mass.mark_ready(entry, done.numpy())

    # ----- reading -------------------------------------------------------------------------

    def __len__(self) -> int:
        """Transitions that can be sampled now."""
        return self._mass.num_valid

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
        if self._mass.num_valid == 0:
            raise RuntimeError("no transition can be sampled yet (n-step targets pending)")
        slot, info = self._mass.draw(batch_size, beta)
        # Index arithmetic and the per-step columns run in NumPy (about a microsecond an
        # operation, ~10 for torch's); the frame gathers use torch.
        slot = torch.as_tensor(slot, dtype=torch.int64).numpy()
        env, pos = np.divmod(slot, self.ring)
        last = self._frames.written.numpy()[env] - 1
        entry = last - (last - pos) % self.ring
        cols = self._frames.columns
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
            window = self._frames.slots(env[:, None], entry[:, None] + self._ahead)
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
            self.obs_key: self._frames.stacks(env, entry + steps),
            "reward": ret.view(col),
            "done": torch.from_numpy(ended.reshape(col)),
            "terminated": torch.from_numpy(terminal.reshape(col)),
            "truncated": torch.from_numpy(truncated.reshape(col)),
        }
        out = {
            self.obs_key: self._frames.stacks(env, entry),
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
        if self.prioritized:
            self._mass.update_priority(index, priority)

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
        frames = self._frames
        return {
            **self._signature(),
            "created": frames.entries is not None,
            "written": frames.written.clone(),
            "num_valid": self._mass.num_valid,
            "sampler": self._mass.sampler.state_dict(),
            "entries": frames.entries if frames.dir is None else None,
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
        frames = self._frames
        if frames.entries is not None and frames.dir is not None:
            raise RuntimeError("load_state_dict must come before extend with a storage_dir")
        if state["created"] and (state["entries"] is None) != (frames.dir is not None):
            raise ValueError("the state and this replay disagree on using a storage_dir")
        frames.written = state["written"].clone()
        self._mass.num_valid = state["num_valid"]
        self._mass.sampler.load_state_dict(state["sampler"])
        if state["created"]:
            if frames.dir is None:
                frames.adopt(state["entries"])
            else:
                water = frames.reopen()
                self._mass.invalidate(frames.bound(frames.written), frames.bound(water))
        self.restart_streams()
