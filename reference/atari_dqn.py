"""The plain Atari DQN family (``reference.atari`` describes it and what the Atari loops share):
epsilon-greedy acting, a replay of (obs, next obs) stacks in a ring per simulator (uniform, or
prioritized over a numpy sum tree) with n-step returns summed at sample time, and the
``double``, ``dueling``, ``distributional`` (C51) flags of the DQN recipe."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from reference.atari import BatchLog, Checkpoint, QNet, Record, VecAtari, setup
from reference.common import Ring, clipped_step, dqn_losses, q_values, require

if TYPE_CHECKING:  # the recipes' config dataclasses, for annotations only
    from accelrl.algos.dqn import DQNConfig
    from recipes.dqn_atari import Config as DQNRecipeConfig


class Replay(Ring):
    """(obs, action, reward, next obs, terminal, boundary) in a ring of ``replay_capacity / N``
    steps per simulator (``reference.common.Ring``), torch tensors in host memory; n-step
    returns are summed when sampling. ``d``: the recipe's ``cfg.dqn``."""

    def __init__(self, num_envs: int, d: DQNConfig, obs_shape: Sequence[int]) -> None:
        super().__init__(d, num_envs)
        shape = (self.len, num_envs)
        self.obs = torch.zeros((*shape, *obs_shape), dtype=torch.uint8)
        self.next_obs = torch.zeros_like(self.obs)
        self.action = torch.zeros(shape, dtype=torch.int64)
        self.reward = torch.zeros(shape)
        self.term = torch.zeros(shape, dtype=torch.bool)
        self.done = torch.zeros(shape, dtype=torch.bool)

    def add(self, obs, action, reward, next_obs, term, done) -> None:
        p = self.next_slot()
        self.obs[p], self.action[p], self.next_obs[p] = obs, action, next_obs
        self.reward[p], self.term[p], self.done[p] = reward, term, done

    def sample(self, batch: int, beta: float):
        n_step, rng = self.s.n_step, np.random
        if self.tree is None:
            flat = self.uniform(batch)
            weights = None
        else:
            total = self.tree.total()
            mass = (np.arange(batch) + rng.random_sample(batch)) * (total / batch)
            flat = np.minimum(self.tree.find(mass), self.len * self.n - 1)
            prob = self.tree.tree[flat + self.tree.leaves] / total
            valid = min(self.written - n_step + 1, self.len) * self.n
            w = (valid * np.maximum(prob, 1e-12)) ** (-beta)
            weights = torch.from_numpy(w / w.max()).float()
        idx = torch.from_numpy(flat)
        p, e = idx // self.n, idx % self.n
        ret = torch.zeros(batch)
        alive = torch.ones(batch, dtype=torch.bool)
        last, bootstrap, k_used = p.clone(), torch.ones(batch), torch.zeros(batch)
        for k in range(n_step):
            q = (p + k) % self.len
            ret += alive * self.s.gamma**k * self.reward[q, e]
            last = torch.where(alive, q, last)
            bootstrap = torch.where(alive, (~self.term[q, e]).float(), bootstrap)
            k_used = torch.where(alive, torch.full_like(k_used, k + 1), k_used)
            alive = alive & ~self.done[q, e]
        discount = bootstrap * self.s.gamma**k_used
        return (
            self.obs[p, e],
            self.action[p, e],
            ret,
            self.next_obs[last, e],
            discount,
            weights,
            flat,
        )

    def state_dict(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in self._ARRAYS}
        state.update(written=self.written, max_priority=self.max_priority)
        if self.tree is not None:
            state["tree"] = torch.from_numpy(self.tree.tree)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._ARRAYS:
            getattr(self, name).copy_(state[name])
        self.written, self.max_priority = int(state["written"]), float(state["max_priority"])
        if self.tree is not None:
            self.tree.tree[:] = state["tree"].numpy()
        if self.written:
            # The resumed simulators start new episodes: an n-step sum stops at the last stored
            # step and bootstraps from its stored next obs (a truncation, not a terminal).
            self.done[(self.written - 1) % self.len] = True

    _ARRAYS = ("obs", "next_obs", "action", "reward", "term", "done")

    def update_priority(self, flat: np.ndarray, priority: np.ndarray) -> None:
        if self.tree is None:
            return
        priority = np.maximum(priority, 1e-6)
        self.max_priority = max(self.max_priority, float(priority.max()))
        self.tree.set(flat, priority**self.s.priority_alpha)


def plain_dqn(
    cfg: DQNRecipeConfig,
    iterations: int | None = None,
    *,
    device: str = "cpu",
    threads: int = 1,
    on_iteration: Callable[[int, VecAtari], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> list[Record]:
    """The DQN family with ``cfg``'s settings (``cfg.dqn``, presets already applied by
    ``accelrl.algos.catalog.resolve_dqn``) for ``iterations`` batches (default: until
    ``cfg.total_frames``; a resumed ``checkpoint`` counts the batches it has done and brings
    back the target network, the replay, the update count and numpy's RNG)."""
    s = cfg.dqn
    require("dqn", s, tau=0.0, life_loss_boundary=True)
    env, dev, steps, frames, batches = setup(cfg, iterations, checkpoint, threads, device)
    n = env.num_envs
    per_iter = n * steps * cfg.env.frameskip
    atoms = s.atoms if s.distributional else 1
    online = QNet(env.num_actions, s.dueling, atoms, cfg.env.frame_stack, cfg.env.screen_size)
    online = online.to(dev)
    target = copy.deepcopy(online).requires_grad_(False)
    opt = torch.optim.Adam(online.parameters(), lr=s.lr, eps=s.adam_eps)
    replay = Replay(n, s, env.obs.shape[1:])
    support = torch.linspace(s.v_min, s.v_max, s.atoms, device=dev)
    per_batch = s.training_intensity * n * steps / s.batch_size
    updates, credit = 0, 0.0

    def loop_state() -> dict[str, Any]:
        _, keys, pos, *_ = np.random.get_state()
        return {"target": target.state_dict(), "replay": replay.state_dict(),
                "updates": updates, "credit": credit,
                "np_rng": torch.from_numpy(keys.astype(np.int64)), "np_pos": int(pos)}  # fmt: skip

    # A resumed checkpoint's model and optimizer come back here, the loop's own part below.
    log = BatchLog(env, online, opt, on_iteration, checkpoint, loop_state)
    if saved := log.restored:
        target.load_state_dict(saved["target"])
        replay.load_state_dict(saved["replay"])
        updates, credit = int(saved["updates"]), float(saved["credit"])
        np.random.set_state(("MT19937", saved["np_rng"].numpy().astype(np.uint32),
                             int(saved["np_pos"]), 0, 0.0))  # fmt: skip

    def update() -> None:
        nonlocal updates
        beta = s.priority_beta + min(1.0, frames / cfg.total_frames) * (1.0 - s.priority_beta)
        obs, action, ret, next_obs, discount, weights, flat = replay.sample(s.batch_size, beta)
        batch = (obs, action, ret, next_obs, discount)
        per_sample, priority = dqn_losses(online, target, [x.to(dev) for x in batch], support, s)
        w = weights.to(dev) if weights is not None else None
        loss = (per_sample * w).mean() if w is not None else per_sample.mean()
        clipped_step(opt, loss, online.parameters(), s.max_grad_norm)
        updates += 1
        if updates % s.target_update_interval == 0:
            target.load_state_dict(online.state_dict())
        replay.update_priority(flat, priority.cpu().numpy())
        float(loss.detach())  # logged per update by the recipe too

    try:
        for _ in batches:
            eps = s.eps_start + min(1.0, frames / s.eps_decay_frames) * (s.eps_end - s.eps_start)
            for _ in range(steps):
                obs = torch.from_numpy(env.obs)
                with torch.no_grad():
                    greedy = q_values(online, obs.to(dev), support, s).argmax(-1).cpu()
                explore = torch.rand(n) < eps
                action = torch.where(explore, torch.randint(env.num_actions, (n,)), greedy)
                obs = obs.clone()  # stored apart from the simulator's array
                reward, term, done, final, truncated = env.step(action.numpy())
                next_obs = torch.from_numpy(env.obs).clone()
                if final is not None:
                    next_obs[torch.from_numpy(truncated)] = torch.from_numpy(final)
                ended = torch.from_numpy(done)
                replay.add(obs, action, torch.from_numpy(reward).float(), next_obs,
                           torch.from_numpy(term), ended)  # fmt: skip
            frames += per_iter
            if frames > s.learning_starts_frames:
                credit += per_batch
                while credit >= 1.0:
                    update()
                    credit -= 1.0
            log.done(frames)
    finally:
        env.close()
    return log.records
