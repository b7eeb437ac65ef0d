"""TorchRL's in-process ``Collector`` with a lean step path for accelrl's batched envs.

TorchRL's rollout costs several times a plain loop's per-step time on zero-cost simulators
(docs/results/speed.md#acting-overhead): a TensorDict per step from the env, the policy module's
key handling, every step's TensorDict kept and stacked into its batch at the end (a second pass
over every observation), and that batch cloned before it is yielded (a third pass, into fresh
memory whose first touch costs more than the copy). ``LeanCollector`` keeps ``Collector``'s
interface and everything else it does (construction, the first batch, policy weights,
shutdown, every case it does not handle) and replaces the rollout where accelrl's recipes run
it: the env writes each step straight into the batch's memory (``SameStepVectorEnv.step_into``),
the policy's outputs go there too, and batches reuse memory nobody holds any more.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Callable, Iterator

import numpy as np
import torch
from tensordict import TensorDictBase, UnbatchedTensor
from torchrl.collectors import Collector
from torchrl.envs.utils import set_exploration_type

from accelrl.batches import NEXT_OBS_AT_ENDS, compact
from accelrl.collectors.graphs import choose
from accelrl.compat import (
    collector_carrier,
    collector_truncates_batches,
    handle_use_count,
    new_tensordict_unchecked,
    set_unchecked,
    storage_handle,
)
from accelrl.envs.vector import SameStepVectorEnv
from accelrl.models import DirectTensorDictModule
from accelrl.precision import full

log = logging.getLogger("accelrl")


COMPACT_FROM_BYTES = 512 * 1024
"""``compact_obs="auto"``: compact batches where a batch's observations take at least this.
A compact batch saves one copy of every observation (the full layout's ``("next", obs)``) and
costs a fixed 50-100 us a batch (the side observations' positions and copies, a few more
objects): on 2 CPU cores (2026-12-07, docs/performance.md#the-acting-path) the Atari shape's
batches (9 MiB and more) collected 7-30% faster compact, the CartPole shape's (5-512 KiB) up
to 9% slower. The threshold is where one copy of a batch's observations costs about that
fixed work (a few hundred KiB at memory-copy speed)."""


def compact_choice(obs: torch.Tensor) -> bool:
    """``compact_obs="auto"``'s choice for a batch whose observations are ``obs``."""
    return obs.numel() * obs.element_size() >= COMPACT_FROM_BYTES


class _BatchMemory:
    """One batch's tensors ``[rows, T, ...]`` by key path, with per-step views for the env
    (numpy) and the policy; reused once nothing outside holds them."""

    def __init__(
        self,
        like: TensorDictBase,
        root_keys: list[str],
        next_keys: list[str],
        output_keys: list[str],
        ends_like: torch.Tensor | None = None,
    ) -> None:
        rows, steps = like.batch_size
        # In host memory, whatever device ``like`` is on: the env writes through numpy views.
        self.size, self.device = like.batch_size, torch.device("cpu")
        self.leaves: dict[tuple[str, ...], torch.Tensor] = {}
        for key, value in like.items(include_nested=True, leaves_only=True):
            path = key if isinstance(key, tuple) else (key,)
            self.leaves[path] = torch.empty_like(
                value, memory_format=torch.contiguous_format, device=self.device
            )
        step = range(steps)
        leaf = self.leaves
        # numpy views for the env: whole arrays [rows, T, ...] and each step's [rows, ...].
        self.root = {k: leaf[(k,)].numpy() for k in root_keys}
        self.next = {k: leaf[("next", k)].numpy() for k in next_keys}
        self.next_at = [{k: v[:, t] for k, v in self.next.items()} for t in step]
        self.outputs = [{k: leaf[(k,)][:, t] for k in output_keys} for t in step]
        # The policy's input at each step (the generic path): the root's keys, as views.
        self.inputs = [
            new_tensordict_unchecked(
                {k: leaf[(k,)][:, t] for k in root_keys}, torch.Size([rows]), self.device
            )
            for t in step
        ]
        self._held: weakref.ref | None = None  # the last batch made of this memory
        # Compact batches (``accelrl.batches``): room for the next observations at the ends,
        # at most one a step; a batch holds its first ``ends_count`` as ``NEXT_OBS_AT_ENDS``.
        self.ends: torch.Tensor | None = None
        self.ends_count = 0
        held = list(self.leaves.values())
        if ends_like is not None:
            shape = (rows * steps, *ends_like.shape[2:])  # like: the root obs [rows, T, ...]
            self.ends = torch.empty(shape, dtype=ends_like.dtype, device=self.device)
            held.append(self.ends)
        # Each leaf's storage, looked up once (a lookup per check costs more than the count;
        # holding it adds one use to every count, the baseline included).
        self._storages = [(t, storage_handle(t)) for t in held]
        del held  # its references would count in the baseline below
        self._baseline = self._holders()
        self.inputs_replaced = False  # the generic path's inputs hold other tensors now

    def _holders(self) -> list[tuple[int, int]]:
        # Python references to each tensor (``batch.get(key)`` kept by a consumer) and views of
        # its storage (slices, reshapes) show who still holds a batch made of it.
        return [(sys.getrefcount(t), handle_use_count(h)) for t, h in self._storages]

    def free(self) -> bool:
        """True when the last batch made of this memory is gone and no tensor or view of its
        memory is held beyond what this object holds itself."""
        if self._held is not None and self._held() is not None:
            return False
        # As ``_holders`` counts (the same references to each tensor), stopping at the first
        # leaf held outside: this runs at every batch.
        for (t, h), (refs, uses) in zip(self._storages, self._baseline, strict=True):
            if sys.getrefcount(t) > refs or handle_use_count(h) > uses:
                return False
        return True

    def batch(self) -> TensorDictBase:
        """A new TensorDict over this memory, laid out as TorchRL's batches (keys a consumer
        adds to it stay in that TensorDict)."""
        # What this object holds without any batch: measured again when the rollout put other
        # tensors into the policy's inputs (their views of this memory are gone), else as it was.
        if self.inputs_replaced:
            self._baseline = self._holders()
            self.inputs_replaced = False
        root = {path[0]: t for path, t in self.leaves.items() if len(path) == 1}
        nxt = {path[1]: t for path, t in self.leaves.items() if len(path) == 2}
        # Named as TorchRL names its batches' dims (a list each: a rename stays in its own).
        root["next"] = new_tensordict_unchecked(nxt, self.size, self.device, [None, "time"])
        if self.ends is not None:
            root[NEXT_OBS_AT_ENDS] = UnbatchedTensor(self.ends[: self.ends_count])
        batch = new_tensordict_unchecked(root, self.size, self.device, [None, "time"])
        self._held = weakref.ref(batch)
        return batch


class LeanCollector(Collector):
    """TorchRL's ``Collector``; after its first batch, a lean rollout where that is exact.

    The lean rollout runs when the env is a ``SameStepVectorEnv`` stepping every simulator
    together on the CPU (no transforms: a recurrent policy's state travels through TorchRL's
    path), the policy acts without compilation on the CPU or a GPU (each step's observation goes
    there and the action comes back; the batch is written in host memory and, stored on a GPU,
    copied there once), the collector is endless and none of TorchRL's extras are asked for
    (replay buffer, trajectory ids, splitting, post-processing, random frames, resets at each
    batch, hooks), and TorchRL's
    first batch holds the env's keys and the policy's outputs only. Each step the policy acts
    on the root (a ``DirectTensorDictModule`` reading one key runs its network directly, a
    policy with ``lean_outputs`` its own tensor path; their outputs are stacked into the batch
    once per key), the env steps into the batch's memory, and the next root is the batch's next
    time index. The
    batches hold the same keys, values and layout as TorchRL's (``tests/test_collect.py``
    compares the two). Each is a new TensorDict over one of the two newest memory sets, reused
    when no batch, tensor or view of it is alive any more (``for batch in collector`` drops
    batch k-1 while batch k+1 is collected), else over new memory.
    """

    def __init__(
        self, *args, acting_graph: str = "off", compact_obs: bool | str = False, **kwargs
    ) -> None:
        # TorchRL's own rollout (the first batch, and every batch where the lean one cannot
        # run) writes the full layout; the lean rollout writes compact batches itself.
        super().__init__(*args, **kwargs)
        choices = {True: True, False: False, "on": True, "off": False, "auto": "auto"}
        if compact_obs not in choices:
            raise ValueError(f"compact_obs={compact_obs!r}: use True, False, 'on', 'off' or 'auto'")
        # True or False from the first batch on (``compact_choice`` decides "auto").
        self.compact_obs: bool | str = choices[compact_obs]
        self._batch_memory: list[_BatchMemory] = []
        self._direct, self._lean_outputs = False, None  # how the policy acts: ``_plan`` decides
        # --compile.cudagraphs for the direct path on a GPU (``accelrl.collectors.graphs``):
        # decided at the first lean step; ``_act`` then runs the network one way or the other.
        self.acting_graph = acting_graph
        self._act: Callable[[torch.Tensor], tuple[torch.Tensor, ...]] | None = None
        self._graph_reason: str | None = None
        cpu = torch.device("cpu")
        # A policy or batches on a GPU: the lean rollout acts there and writes in host memory
        # (None here: on the CPU, nothing moves).
        self._policy_on = self.policy_device if self.policy_device not in (None, cpu) else None
        self._store_on = self.storing_device if self.storing_device not in (None, cpu) else None
        # Why TorchRL's rollout runs instead (None: the lean one can), the first that holds.
        self.why_torchrl = next(
            (reason for holds, reason in self._torchrl_cases(cpu) if holds), None
        )
        self.lean = self.why_torchrl is None

    def _torchrl_cases(self, cpu: torch.device) -> Iterator[tuple[bool, str]]:
        """(holds, reason) for each case the lean rollout leaves to TorchRL's."""
        env = self.env
        yield not isinstance(env, SameStepVectorEnv), "the env has transforms or is not accelrl's"
        yield env.rows != env.num_envs, "ale-py's async mode (rows change simulator)"
        yield bool(self.compiled_policy or self.cudagraphed_policy), "a compiled policy"
        yield self.replay_buffer is not None, "TorchRL's replay buffer"
        yield (
            bool(self.split_trajs or self.track_traj_ids or self.reset_at_each_iter),
            ("trajectory ids, split trajectories or resets at each batch"),
        )
        hooks = (self.postproc, self.pre_collect_hook, self.post_collect_hook)
        yield any(h is not None for h in hooks), "post-processing or collection hooks"
        yield self.init_random_frames not in (0, None), "random frames first"
        yield self.total_frames != float("inf"), "a collector with an end"
        yield self.env_device not in (None, cpu) or env.device != cpu, "an env off the CPU"
        yield (
            any(
                device is not None and device.type not in ("cpu", "cuda")
                for device in (self.policy_device, self.storing_device)
            ),
            "a policy or batches on a device other than the CPU or a GPU",
        )
        yield collector_truncates_batches(self), "TorchRL marks every batch's last step truncated"

    def rollout_line(self) -> str:
        """One line: which rollout collects and why (logged once a run's collector starts)."""
        if not self.lean:
            return f"collection: TorchRL's rollout ({self.why_torchrl})"
        where = f"policy on {self._policy_on or 'cpu'}, batches on {self._store_on or 'cpu'}"
        acts = "its network directly" if self._direct else "its own tensor path"
        if not (self._direct or self._lean_outputs is not None):
            acts = "its TensorDict module"
        if self._graph_reason is not None:
            acts += f", {self._graph_reason}"
        layout = "compact batches" if self.compact_obs else "TorchRL's full batches"
        return f"collection: the lean rollout ({where}; the policy runs {acts}; {layout})"

    def iterator(self) -> Iterator[TensorDictBase]:
        """TorchRL's batches; after the first, lean ones ``[rows, T]`` where that is exact."""
        if not self.lean:
            log.info(self.rollout_line())
            yield from super().iterator()
            return
        first = super().rollout().clone()  # TorchRL's first batch, as its iterator yields it
        if self.compact_obs == "auto":
            self.compact_obs = compact_choice(first.get(self.env.obs_key))
        self.lean = self._plan(first, collector_carrier(self))
        if not self.lean:
            self.why_torchrl = "its first batch holds keys besides the env's and the policy's"
        elif self.compact_obs:  # every batch in one layout: the first one too
            first = compact(first, self.env.obs_key)
        if self.acting_graph == "on" and not (self.lean and self._direct and self._policy_on):
            raise RuntimeError(
                "--compile.cudagraphs on: the lean rollout captures a policy that runs its "
                "network directly on a GPU, and here "
                + (f"TorchRL's rollout runs ({self.why_torchrl})" if not self.lean else
                   "the policy is not such a network or not on a GPU")
                + "; use --compile.cudagraphs auto, or --compile.policy for TorchRL's graphs"
            )  # fmt: skip
        log.info(self.rollout_line())
        yield first
        if not self.lean:
            yield from super().iterator()
            return
        while True:
            yield self._lean_rollout()

    def _plan(self, batch: TensorDictBase, root: TensorDictBase) -> bool:
        """Read the keys from TorchRL's first batch; False when the lean path cannot write
        that batch (keys other than the env's and the policy's outputs)."""
        env = self.env
        root_keys = list(root.keys())
        nested = [k for k in batch.keys() if isinstance(batch.get(k), TensorDictBase)]
        output_keys = [k for k in batch.keys() if k not in root_keys and k != "next"]
        step_keys = set(env.step_keys)
        if (
            nested != ["next"]
            or set(batch.get("next").keys()) != step_keys
            or set(root_keys) != step_keys - {"reward"}
            or any(isinstance(batch.get(k), TensorDictBase) for k in batch.get("next").keys())
            or "action" not in output_keys
        ):
            return False
        policy = self.policy
        reads_obs = list(policy.in_keys) == [env.obs_key]
        same_outputs = sorted(policy.out_keys) == sorted(output_keys)
        self._direct = isinstance(policy, DirectTensorDictModule) and reads_obs and same_outputs
        # A policy's own tensor path (``lean_outputs(obs)``: its out_keys' tensors in order,
        # or None for TorchRL's path at that step), e.g. DQN's epsilon-greedy Q-values.
        lean_outputs = getattr(policy, "lean_outputs", None)
        self._lean_outputs = lean_outputs if reads_obs and same_outputs else None
        if self._direct or self._lean_outputs is not None:
            output_keys = list(policy.out_keys)  # in the order the network returns them
        if self.compact_obs:
            batch = batch.exclude(("next", env.obs_key))
        self._like, self._root_keys, self._output_keys = batch, root_keys, output_keys
        self._carry = {k: root.get(k).cpu().numpy().copy() for k in root_keys}
        return True

    def _acting(self, obs: torch.Tensor) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
        """How the direct path runs the network from now on: on a GPU as ``choose`` decides
        for ``--compile.cudagraphs`` (logged once), else eagerly."""
        net = self.policy.module
        if self._policy_on is None or self._policy_on.type != "cuda":
            choice = choose(net, obs, "off")
        else:
            choice = choose(net, obs, self.acting_graph)
            self._graph_reason = f"as {choice.reason}"
            log.info(f"collection: the policy acts {self._graph_reason}")
        return choice.act

    def _take_memory(self) -> _BatchMemory:
        for memory in self._batch_memory:
            if memory.free():
                return memory
        env = self.env
        compact_obs = self.compact_obs
        next_keys = [k for k in env.step_keys if not (compact_obs and k == env.obs_key)]
        ends_like = self._like.get(env.obs_key) if compact_obs else None
        memory = _BatchMemory(self._like, self._root_keys, next_keys, self._output_keys, ends_like)
        # Keep the two newest sets: one a caller keeps stays the caller's alone.
        self._batch_memory = [*self._batch_memory[-1:], memory]
        return memory

    @staticmethod
    def _write_ends(
        memory: _BatchMemory, finals: list[tuple[np.ndarray, np.ndarray]], last: np.ndarray
    ) -> None:
        """A compact batch's ``NEXT_OBS_AT_ENDS`` (``accelrl.batches``): the next observation
        at every step where an episode ended (``finals[t]``: the ended rows and their final
        observations) and at each row's last step (``last``, the next root's, where none
        ended), in row-major order."""
        done = memory.next["done"][..., 0]
        need = done.copy()
        need[:, -1] = True
        position = (np.cumsum(need.reshape(-1)) - 1).reshape(need.shape)
        out = memory.ends.numpy()
        # Every row's last slot first (one copy of ``last``, not a gather of the open rows and
        # a copy), then the finals, which overwrite the rows that ended at the last step.
        out[position[:, -1]] = last
        for t, (rows, final) in enumerate(finals):
            if rows.size:
                out[position[rows, t]] = final
        memory.ends_count = int(position[-1, -1]) + 1

    @torch.no_grad()
    def _lean_rollout(self) -> TensorDictBase:
        env, policy, carry = self.env, self.policy, self._carry
        obs_key, direct, lean_outputs = env.obs_key, self._direct, self._lean_outputs
        policy_on = self._policy_on
        memory = self._take_memory()
        steps = len(memory.next_at)
        for key, value in carry.items():
            np.copyto(memory.root[key][:, 0], value)
        obs = torch.from_numpy(carry[obs_key])
        root_obs = memory.root[obs_key]
        keys = self._output_keys
        action_at = keys.index("action")
        # The outputs of a network's own path are fresh tensors: kept until the batch ends and
        # stacked into its memory once per key (a copy per key and step costs more on small
        # batches); the TensorDict path's are copied at once.
        stacked: list[list[torch.Tensor]] = [[] for _ in keys]
        stacked_steps = 0
        # Compact batches: each step's ended rows and their final observations (step_into
        # gives them instead of writing ``("next", obs)``).
        finals: list[tuple[np.ndarray, np.ndarray]] | None = [] if self.compact_obs else None
        with set_exploration_type(self.exploration_type):
            for t in range(steps):
                acted = None
                seen = obs if policy_on is None else obs.to(policy_on)
                if direct:
                    if self._act is None:
                        self._act = self._acting(seen)
                    acted = self._act(seen)
                elif lean_outputs is not None:
                    acted = lean_outputs(seen)
                if acted is not None and stacked_steps == t:
                    for values, value in zip(stacked, acted, strict=True):
                        values.append(full(value))
                    stacked_steps += 1
                    action = acted[action_at]
                else:
                    if acted is None:
                        td = memory.inputs[t]
                        set_unchecked(td, obs_key, obs)
                        memory.inputs_replaced = True
                        td = policy(td if policy_on is None else td.to(policy_on))
                        acted = tuple(td.get(key) for key in keys)
                    for key, value in zip(keys, acted, strict=True):
                        memory.outputs[t][key].copy_(full(value))
                    action = acted[action_at]
                # The last step's observation stays in the simulators' array (valid until they
                # step again): the next batch's first root and a compact batch's last
                # observations are copied from there, with no copy of their own in between.
                into = None if t + 1 == steps else root_obs[:, t + 1]
                # The policy's own (contiguous) action tensor, not the batch's strided view.
                action = action if policy_on is None else action.cpu()
                obs_np = env.step_into(action, memory.next_at[t], into, finals)
                obs = torch.from_numpy(obs_np)
        carry[obs_key] = obs_np
        for key, values in zip(keys, stacked, strict=True):
            if stacked_steps == steps and policy_on is None:
                torch.stack(values, dim=1, out=memory.leaves[(key,)])
            elif stacked_steps:
                memory.leaves[(key,)][:, :stacked_steps].copy_(torch.stack(values, dim=1))
        env.complete_rollout(memory.next, memory.root, carry)
        if finals is not None:
            self._write_ends(memory, finals, carry[obs_key])
        batch = memory.batch()
        # Batches stored on a GPU: one copy of the whole batch (the caller's from then on, so
        # the host memory is free again at once).
        return batch if self._store_on is None else batch.to(self._store_on)
