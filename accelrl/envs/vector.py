"""A batched TorchRL env over any simulator batch that resets ended episodes in the same step.

Native vector simulators (ale-py's ``AtariVectorEnv``, gymnasium's vector envs) step N
environments per call and, in "SameStep" autoreset mode, return the first observation of the next
episode for rows that ended, with the final observation on the side. TorchRL's generic
``EnvBase.step`` + ``step_mdp`` + ``maybe_reset`` chain costs more Python time per call than a
batched Atari step; ``SameStepVectorEnv`` keeps the per-step work to a few numpy ops on small
arrays and builds each output TensorDict once, without copying the simulator's arrays
(``benchmarks/env_throughput.py`` measures it against the raw simulator).

Keys written on every step (batch ``[rows]``): the observation (``obs_key``), ``reward`` (the sign
of the game reward when ``clip_rewards``), ``score`` (the unclipped reward),
``done``/``terminated``/``truncated``, ``life_lost`` (lives dropped within an episode; False when
the simulator has no lives), ``episode_return`` (unclipped) and ``episode_length`` (agent steps)
so far, final on the step where ``done`` is set, and ``env_id`` (the simulator of each row, which
differs from the row index in ale-py's async mode).
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs import EnvBase


class SameStepVectorEnv(EnvBase):
    """Base class: subclasses provide ``_raw_reset`` and ``_raw_step`` over numpy arrays."""

    obs_key: str = "observation"

    def __init__(
        self,
        *,
        num_envs: int,
        rows: int,
        obs_spec: TensorSpec,
        num_actions: int,
        clip_rewards: bool,
        seed: int = 0,
    ) -> None:
        super().__init__(batch_size=torch.Size([rows]), device="cpu")
        self.num_envs = num_envs
        self.rows = rows
        self.num_actions = num_actions
        self.clip_rewards = clip_rewards
        self._seed = seed
        self._started = False
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._ep_return = np.zeros(num_envs, dtype=np.float32)
        self._ep_length = np.zeros(num_envs, dtype=np.int64)
        self._root: TensorDict | None = None
        b = self.batch_size
        flag = Categorical(2, shape=(*b, 1), dtype=torch.bool)
        self.observation_spec = Composite(
            {
                self.obs_key: obs_spec,
                "score": Unbounded(shape=(*b, 1), dtype=torch.float32),
                "life_lost": flag.clone(),
                "episode_return": Unbounded(shape=(*b, 1), dtype=torch.float32),
                "episode_length": Unbounded(shape=(*b, 1), dtype=torch.int64),
                "env_id": Unbounded(shape=(*b, 1), dtype=torch.int64),
            },
            shape=b,
        )
        self.action_spec = Categorical(num_actions, shape=b, dtype=torch.int64)
        self.reward_spec = Unbounded(shape=(*b, 1), dtype=torch.float32)
        self.done_spec = Composite(
            done=flag.clone(), terminated=flag.clone(), truncated=flag.clone(), shape=b
        )

    @abstractmethod
    def _raw_reset(self, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Reset every simulator; returns (observations, env ids of the rows, lives or None)."""

    @abstractmethod
    def _raw_step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, dict]:
        """Step the rows; returns (obs, reward, terminated, truncated, env ids, lives, info)."""

    @abstractmethod
    def _final_obs(self, obs: np.ndarray, ended: np.ndarray, info: dict) -> np.ndarray:
        """Observations with the ended rows replaced by their episode's last observation."""

    def _set_seed(self, seed: int | None) -> None:
        self._seed = 0 if seed is None else int(seed)
        self._started = False

    def _pack(self, values: dict[str, np.ndarray]) -> TensorDict:
        # Arrays become tensors without a copy; ``_new_unsafe`` skips per-key validation
        # (~15 us a key), the shapes being fixed by construction.
        return TensorDict._new_unsafe(
            {k: torch.from_numpy(v) for k, v in values.items()}, batch_size=self.batch_size
        )

    def _root_output(self, obs: np.ndarray, env_ids: np.ndarray) -> TensorDict:
        col = (self.rows, 1)
        return self._pack(
            {
                self.obs_key: obs,
                "score": np.zeros(col, np.float32),
                "life_lost": np.zeros(col, bool),
                "episode_return": self._ep_return[env_ids].reshape(col),
                "episode_length": self._ep_length[env_ids].reshape(col),
                "env_id": env_ids.astype(np.int64).reshape(col),
                "done": np.zeros(col, bool),
                "terminated": np.zeros(col, bool),
                "truncated": np.zeros(col, bool),
            }
        )

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if self._started and mask is not None and self._root is not None:
            # Ended simulators already reset themselves during the step; the cached root holds
            # the first observation of their new episode.
            return self._root.copy()
        if self._started and self.rows != self.num_envs:
            raise RuntimeError(
                "async mode (rows < num_envs) resets ended episodes itself; a full reset is "
                "only possible before the first step"
            )
        seeds = np.arange(self._seed, self._seed + self.num_envs, dtype=np.int64)
        self._seed += self.num_envs
        obs, env_ids, lives = self._raw_reset(seeds)
        self._started = True
        if lives is not None:
            self._lives[env_ids] = lives
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        self._root = self._root_output(obs, env_ids)
        return self._root.copy()

    def _advance(self, action: torch.Tensor) -> tuple[TensorDict, TensorDict]:
        """One batched step: the transition's ``next`` data and the root to act on next."""
        obs, score, terminated, truncated, env_ids, lives, info = self._raw_step(action.numpy())
        ended = terminated | truncated
        if lives is not None:
            # After game over the simulator has started its next episode and its lives counter
            # jumped up, so a life loss is a drop in lives within one episode.
            life_lost = (lives < self._lives[env_ids]) & ~ended
            self._lives[env_ids] = lives
        else:
            life_lost = np.zeros_like(ended)
        score = score.astype(np.float32, copy=False)
        ep_return = self._ep_return[env_ids] + score
        ep_length = self._ep_length[env_ids] + 1
        next_obs = obs
        if ended.any():
            next_obs = self._final_obs(obs, ended, info)
            self._ep_return[env_ids] = np.where(ended, 0.0, ep_return)
            self._ep_length[env_ids] = np.where(ended, 0, ep_length)
        else:
            self._ep_return[env_ids] = ep_return
            self._ep_length[env_ids] = ep_length
        col = (self.rows, 1)
        next_td = self._pack(
            {
                self.obs_key: next_obs,
                "reward": (np.sign(score) if self.clip_rewards else score).reshape(col),
                "score": score.reshape(col),
                "done": ended.reshape(col),
                "terminated": terminated.reshape(col),
                "truncated": truncated.reshape(col),
                "life_lost": life_lost.reshape(col),
                "episode_return": ep_return.reshape(col),
                "episode_length": ep_length.reshape(col),
                "env_id": env_ids.astype(np.int64).reshape(col),
            }
        )
        self._root = self._root_output(obs, env_ids)
        return next_td, self._root

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._advance(tensordict.get("action"))[0]

    def _step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        # Fast path used by collectors and rollouts: every ended episode is already reset, so
        # the root for the next action is ready-made. An input with a preset "next" takes
        # EnvBase's generic path, which knows how to merge it.
        if "next" in tensordict.keys():
            return super()._step_and_maybe_reset(tensordict)
        next_td, root = self._advance(tensordict.get("action"))
        tensordict.set("next", next_td)
        return tensordict, root.copy()
