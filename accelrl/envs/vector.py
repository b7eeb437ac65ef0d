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

from accelrl.compat import new_tensordict_unchecked, set_unchecked

_NO_ROWS = np.zeros(0, dtype=np.int64)  # ``step_into``'s finals when no episode ended


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
        fire_action: int | None = None,
    ) -> None:
        super().__init__(batch_size=torch.Size([rows]), device="cpu")
        # ``fire_action``: the action index sent instead of the agent's on the step after a
        # lost life (``EnvConfig.fire_on_life_loss``); None: never.
        self.fire_action = fire_action
        self._fire_due = np.zeros(num_envs, dtype=bool)
        self.num_envs = num_envs
        self.rows = rows
        self.num_actions = num_actions
        self.clip_rewards = clip_rewards
        self._seed = seed
        self._started = False
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._ep_return = np.zeros(num_envs, dtype=np.float32)
        self._ep_length = np.zeros(num_envs, dtype=np.int64)
        self._root: dict[str, torch.Tensor] | None = None
        # What ``step_into`` leaves for ``complete_rollout`` (a dict: attribute assignment on a
        # TorchRL env goes through nn.Module.__setattr__, microseconds a call).
        self._stepped: dict[str, object] = {}
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

    @property
    def step_keys(self) -> tuple[str, ...]:
        """The keys of a step's ``next`` data (the root's are the same but ``reward``)."""
        return (self.obs_key, "reward", "score", "done", "terminated", "truncated",
                "life_lost", "episode_return", "episode_length", "env_id")  # fmt: skip

    def close(self, *, raise_if_closed: bool = True) -> None:
        # Subclasses that step a vector env of their own keep it in ``_vec``.
        vec = self.__dict__.get("_vec")
        if vec is not None:
            vec.close()
            self._vec = None
        super().close(raise_if_closed=raise_if_closed)

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

    def _pack(self, values: dict[str, torch.Tensor]) -> TensorDict:
        # No per-key validation (see accelrl.compat): shapes and device hold by construction.
        return new_tensordict_unchecked(values, self.batch_size, self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if self._started and mask is not None and self._root is not None:
            # Ended simulators already reset themselves during the step; the cached root holds
            # the first observation of their new episode.
            return self._pack(self._root)
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
        col = (self.rows, 1)
        zeros = np.zeros(col, bool)
        root = {
            self.obs_key: obs,
            "score": np.zeros(col, np.float32),
            "life_lost": zeros,
            "episode_return": np.zeros(col, np.float32),
            "episode_length": np.zeros(col, np.int64),
            "env_id": env_ids.astype(np.int64).reshape(col),
            "done": zeros,
            "terminated": zeros,
            "truncated": zeros,
        }
        self._root = {k: torch.from_numpy(v) for k, v in root.items()}
        return self._pack(self._root)

    def _raw_send(self, actions: np.ndarray) -> None:
        """Start stepping the rows with ``actions``; simulators with a native split step
        (ale-py) override this and ``_raw_recv`` so the caller can work while they run."""
        self._sent = actions

    def _raw_recv(
        self,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, dict]:
        """Wait for the step started by ``_raw_send``; returns what ``_raw_step`` returns."""
        return self._raw_step(self._sent)

    def _executed(self, actions: np.ndarray) -> np.ndarray:
        """``actions`` as sent: FIRE for the rows that lost a life on their previous step."""
        if self.fire_action is None:
            return actions
        # The rows act for the simulators of the last root (all, in order, when synchronous).
        ids = slice(None) if self.rows == self.num_envs else self._root["env_id"].numpy()[:, 0]
        due = self._fire_due[ids].copy()
        if not due.any():
            return actions
        self._fire_due[ids] = False
        actions = actions.copy()
        actions[due] = self.fire_action
        return actions

    def step_send(self, action: torch.Tensor) -> None:
        """First half of a step: the simulators start stepping with ``action`` ([rows])."""
        self._raw_send(self._executed(action.numpy()))

    def step_recv(self) -> tuple[TensorDict, TensorDict]:
        """Second half: (the transition's ``next`` data, the root to act on next)."""
        return self._complete(*self._raw_recv())

    def _advance(self, action: torch.Tensor) -> tuple[TensorDict, TensorDict]:
        """One batched step: the transition's ``next`` data and the root to act on next."""
        return self._complete(*self._raw_step(self._executed(action.numpy())))

    def _final_rows(self, obs: np.ndarray, ended: np.ndarray, info: dict) -> np.ndarray:
        """The episodes' last observations of the ``ended`` rows only, ``[ended rows, ...]``;
        backends whose simulators give them on the side override this cheaper default."""
        return self._final_obs(obs, ended, info)[ended]

    def _account(self, score, terminated, truncated, env_ids, lives):
        """The step's episode bookkeeping (lives, running return and length, auto-reset of the
        statistics): returns (rows, ended, life_lost, score, ep_return, ep_length), the
        statistics as of this step (final on ended rows)."""
        # Synchronous mode returns every simulator in order: plain views instead of gathers.
        rows = slice(None) if self.rows == self.num_envs else env_ids
        ended = terminated | truncated
        life_lost = np.zeros_like(ended) if lives is None else self._life_lost(rows, lives, ended)
        score = score.astype(np.float32, copy=False)
        ep_return = self._ep_return[rows] + score
        ep_length = self._ep_length[rows] + 1
        if ended.any():
            self._ep_return[rows] = np.where(ended, 0.0, ep_return)
            self._ep_length[rows] = np.where(ended, 0, ep_length)
        else:
            self._ep_return[rows] = ep_return
            self._ep_length[rows] = ep_length
        return rows, ended, life_lost, score, ep_return, ep_length

    def _life_lost(self, rows, lives: np.ndarray, ended: np.ndarray) -> np.ndarray:
        """Rows that lost a life this step (not at game over); notes FIRE due on them."""
        # After game over the simulator has started its next episode and its lives counter
        # jumped up, so a life loss is a drop in lives within one episode.
        life_lost = (lives < self._lives[rows]) & ~ended
        self._lives[rows] = lives
        if self.fire_action is not None:
            self._fire_due[rows] = life_lost
        return life_lost

    def _complete(self, obs, score, terminated, truncated, env_ids, lives, info):
        _, ended, life_lost, score, ep_return, ep_length = self._account(
            score, terminated, truncated, env_ids, lives
        )
        any_ended = ended.any()
        next_obs = self._final_obs(obs, ended, info) if any_ended else obs
        col = (self.rows, 1)
        nxt = {
            self.obs_key: torch.from_numpy(next_obs),
            "reward": torch.from_numpy(
                (np.sign(score) if self.clip_rewards else score).reshape(col)
            ),
            "score": torch.from_numpy(score.reshape(col)),
            "done": torch.from_numpy(ended.reshape(col)),
            "terminated": torch.from_numpy(terminated.reshape(col)),
            "truncated": torch.from_numpy(truncated.reshape(col)),
            "life_lost": torch.from_numpy(life_lost.reshape(col)),
            "episode_return": torch.from_numpy(ep_return.reshape(col)),
            "episode_length": torch.from_numpy(ep_length.reshape(col)),
            "env_id": torch.from_numpy(env_ids.astype(np.int64).reshape(col)),
        }
        # As TorchRL's step_mdp + reset: the next root holds this step's observation keys, with
        # the values of a fresh episode in rows that ended. Without ended rows it shares the
        # ``next`` tensors (no copies).
        root = {k: v for k, v in nxt.items() if k != "reward"}
        if any_ended:
            keep = torch.from_numpy(~ended).unsqueeze(-1)
            false = torch.zeros(col, dtype=torch.bool)
            root.update(
                {
                    self.obs_key: torch.from_numpy(obs),
                    "score": root["score"] * keep,
                    "episode_return": root["episode_return"] * keep,
                    "episode_length": root["episode_length"] * keep,
                    "done": false,
                    "terminated": false,
                    "truncated": false,
                }
            )
        self._root = root
        return self._pack(nxt), self._pack(root)

    def step_into(
        self,
        action: torch.Tensor,
        nxt: dict[str, np.ndarray],
        root_obs: np.ndarray | None,
        finals: list[tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> np.ndarray:
        """One batched step written into a batch the caller owns, without a TensorDict: ``nxt``
        (arrays ``[rows, ...]``, flags and statistics ``[rows, 1]``) takes the transition's
        observation, ``score``, ``terminated``, ``truncated``, ``life_lost`` (simulators with
        lives) and ``episode_return`` as ``_advance`` returns them, ``root_obs`` the root's
        observation (None: not written; the caller keeps the returned array until it steps
        again); ``complete_rollout`` writes the other keys once per batch (among them
        ``episode_length``, which follows from the batch's episode ends). Synchronous envs only
        (every simulator, in row order). Without the observation's key in ``nxt`` (a compact
        batch, ``accelrl.batches``) the transition's observation is not written; ``finals``
        then takes the step's ended rows and their final observations (an empty pair when none
        ended). Returns the simulators' observation array (the root's, for the policy's next
        forward pass), valid until the next step.
        ``accelrl.collectors.LeanCollector`` writes its batches this way."""
        # ``_account``'s bookkeeping, written into the batch as it goes (every simulator, in
        # order: ``LeanCollector`` steps only synchronous envs); ``env_id``, the episode
        # lengths and a simulator without lives' ``life_lost`` follow once per batch in
        # ``complete_rollout``.
        obs, score, terminated, truncated, env_ids, lives, info = self._raw_step(
            self._executed(action.numpy())
        )
        ended = terminated | truncated
        score = score.astype(np.float32, copy=False)
        ep_return = nxt["episode_return"][:, 0]
        np.add(self._ep_return, score, out=ep_return)
        np.copyto(nxt["score"][:, 0], score)
        np.copyto(nxt["terminated"][:, 0], terminated)
        np.copyto(nxt["truncated"][:, 0], truncated)
        self._stepped["env_ids"], self._stepped["lives"] = env_ids, lives is not None
        if lives is not None:
            np.copyto(nxt["life_lost"][:, 0], self._life_lost(slice(None), lives, ended))
        next_obs = nxt.get(self.obs_key)
        if next_obs is not None:
            np.copyto(next_obs, obs)
        if root_obs is not None:
            np.copyto(root_obs, obs)
        if ended.any():
            final = self._final_rows(obs, ended, info)  # a new array: finals may keep it
            if next_obs is not None:
                next_obs[ended] = final
            if finals is not None:
                finals.append((np.flatnonzero(ended), final))
            self._ep_return[:] = np.where(ended, 0.0, ep_return)
        else:
            if finals is not None:
                finals.append((_NO_ROWS, obs[:0]))
            np.copyto(self._ep_return, ep_return)
        if self._root is not None:  # (an assignment on a TorchRL env costs microseconds)
            self._root = None  # the caller holds the root; a masked reset resets everything
        return obs

    def complete_rollout(
        self, nxt: dict[str, np.ndarray], root: dict[str, np.ndarray], carry: dict[str, np.ndarray]
    ) -> None:
        """After ``step_into`` filled steps ``0..T-1`` of ``nxt`` (arrays ``[rows, T, ...]``)
        and ``root[obs_key][:, 1:]``, with ``root[:, 0]`` the batch's first root: fill the
        keys that follow from them as ``_advance`` computes them (``reward`` from the score,
        ``done``, ``episode_length``, the roots' statistics, zeroed where an episode ended, and
        flags), and
        ``carry`` (arrays ``[rows, ...]``) with the root after the last step, whose observation
        the caller copies."""
        if not self._stepped["lives"]:
            nxt["life_lost"][...] = False
        np.copyto(nxt["env_id"], self._stepped["env_ids"].reshape(-1, 1, 1), casting="unsafe")
        if self.clip_rewards:
            np.sign(nxt["score"], out=nxt["reward"])
        else:
            np.copyto(nxt["reward"], nxt["score"])
        np.logical_or(nxt["terminated"], nxt["truncated"], out=nxt["done"])
        # Episode lengths, as ``_account`` counts them step by step: on from the batch's
        # start until an episode end, from 1 on the step after one.
        done = nxt["done"][..., 0]
        time = np.arange(done.shape[1])
        after_end = np.zeros_like(done)
        after_end[:, 1:] = done[:, :-1]
        start = np.maximum.accumulate(np.where(after_end, time, -1), axis=1)
        length = nxt["episode_length"][..., 0]
        length[...] = np.where(start >= 0, time - start, self._ep_length[:, None] + time) + 1
        self._ep_length[:] = np.where(done[:, -1], 0, length[:, -1])
        keep = ~nxt["done"]
        for key in ("score", "episode_return", "episode_length"):
            np.multiply(nxt[key][:, :-1], keep[:, :-1], out=root[key][:, 1:])
            np.multiply(nxt[key][:, -1], keep[:, -1], out=carry[key])
        for key in ("life_lost", "env_id"):
            np.copyto(root[key][:, 1:], nxt[key][:, :-1])
            np.copyto(carry[key], nxt[key][:, -1])
        for key in ("done", "terminated", "truncated"):
            root[key][:, 1:] = False
            carry[key][...] = False

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
        # Shapes and device hold by construction: skip ``set``'s validation.
        set_unchecked(tensordict, "next", next_td)
        return tensordict, root


class InfoFinalObsVectorEnv(SameStepVectorEnv):
    """A ``SameStepVectorEnv`` whose simulators give every row's final observation on the side,
    in ``info["final_obs"]`` (ale-py's vector env; the zero-cost simulators)."""

    def _final_obs(self, obs: np.ndarray, ended: np.ndarray, info: dict) -> np.ndarray:
        # A copy and the few ended rows: faster than ``np.where`` over the whole stack
        # (docs/performance.md#the-acting-path).
        out = obs.copy()
        out[ended] = info["final_obs"][ended]
        return out

    def _final_rows(self, obs: np.ndarray, ended: np.ndarray, info: dict) -> np.ndarray:
        return info["final_obs"][ended]
