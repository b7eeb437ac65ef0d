"""The TensorDict / TorchRL APIs accelrl depends on beyond their documented surface.

Each private API behind ``accelrl.compat`` is checked by name, signature and behaviour against
the installed releases, so that an upgrade that changes one fails here with the name of the
attribute, not deep inside a run. The public calls that replaced private ones, and the private
TorchRL hooks accelrl overrides, are pinned as well.
"""

from __future__ import annotations

import copy
import inspect
import io
from importlib.metadata import version

import numpy as np
import pytest
import tensordict
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Categorical, LazyTensorStorage, PrioritizedSampler, ReplayBuffer
from torchrl.envs import EnvBase, ParallelEnv
from torchrl.modules import QValueActor, QValueModule
from torchrl.objectives import DQNLoss, HardUpdate

from accelrl import compat
from accelrl.algos.ppo import PPO, PPOConfig
from accelrl.collectors import BatchedInferenceCollector, env_factory, plan_threads
from accelrl.config import EnvConfig, ThreadsConfig
from accelrl.envs import make_env
from accelrl.models import DirectTensorDictModule, make_actor_critic
from accelrl.tools.export import greedy_module

WRITTEN_AGAINST = "tensordict 0.14.3 / TorchRL 0.14.1"
INSTALLED = f"tensordict {tensordict.__version__} / TorchRL {version('torchrl')}"


def private(owner: type, name: str, *params: str, user: str) -> None:
    """Fail, naming ``owner.name`` and its accelrl user, unless it exists with ``params``."""
    where = f"{owner.__module__}.{owner.__qualname__}.{name}"
    fix = f"update {user} (written against {WRITTEN_AGAINST}; installed: {INSTALLED})"
    attr = getattr(owner, name, None)
    assert callable(attr), f"private {where} is gone: {fix}"
    missing = set(params) - set(inspect.signature(attr).parameters)
    assert not missing, f"private {where} lost its parameters {sorted(missing)}: {fix}"


def batch(rows: int = 3) -> dict[str, torch.Tensor]:
    return {"obs": torch.zeros(rows, 4), "done": torch.zeros(rows, 1, dtype=torch.bool)}


def test_new_tensordict_unchecked_wraps_the_values_as_given():
    user = "accelrl.compat.new_tensordict_unchecked"
    private(TensorDict, "_new_unsafe", "source", "batch_size", user=user)
    values = batch()
    td = compat.new_tensordict_unchecked(values, torch.Size([3]))
    assert type(td) is TensorDict and td.batch_size == (3,) and td.device is None
    assert list(td.keys()) == list(values)
    assert all(td.get(k) is v for k, v in values.items()), "values must not be copied"
    values["extra"] = torch.zeros(3)
    assert "extra" not in td.keys(), "the TensorDict must not share the caller's dict"
    # Validation is what the private call is there to skip; if it validates, it lost its point.
    odd = compat.new_tensordict_unchecked({"obs": torch.zeros(5, 4)}, torch.Size([3]))
    assert odd.get("obs").shape == (5, 4), (
        "TensorDict._new_unsafe now validates its values: measure the public constructor "
        "against it and update accelrl.compat.new_tensordict_unchecked"
    )


def test_set_unchecked_stores_a_new_entry_without_copying():
    user = "accelrl.compat.set_unchecked"
    private(TensorDict, "_set_str", "key", "value", "inplace", "validated", user=user)
    root = TensorDict(batch(), batch_size=[3])
    old = TensorDict(batch(), batch_size=[3])
    root.set("next", old)
    new = TensorDict({"obs": torch.ones(3, 4)}, batch_size=[3])
    compat.set_unchecked(root, "next", new)
    assert root.get("next") is new, "the value must be stored as is (inplace=False)"
    assert not old.get("obs").any(), "the previous entry must not be written into"
    odd = TensorDict({"obs": torch.zeros(5)}, batch_size=[5])
    compat.set_unchecked(root, "odd", odd)
    assert root.get("odd") is odd, (
        "TensorDictBase._set_str(validated=True) now validates: measure the public set "
        "against it and update accelrl.compat.set_unchecked"
    )


def test_overridden_torchrl_hooks_are_still_called(monkeypatch):
    """accelrl overrides these private TorchRL methods; a rename would silently bypass it."""
    assert "_start_workers" in vars(ParallelEnv), (
        "torchrl ParallelEnv._start_workers is gone: accelrl.envs.gym_atari._AtariParallelEnv "
        f"overrides it (written against {WRITTEN_AGAINST}; installed: {INSTALLED})"
    )
    private(EnvBase, "_step_and_maybe_reset", "tensordict", user="SameStepVectorEnv")
    env = make_env(EnvConfig(game="CartPole-v1", num_envs=2), seed=0)
    try:
        cls, calls = type(env), []
        fast = cls._step_and_maybe_reset

        def spy(self, td):
            calls.append(td)
            return fast(self, td)

        monkeypatch.setattr(cls, "_step_and_maybe_reset", spy)
        td = env.reset()
        td["action"] = torch.zeros(2, dtype=torch.int64)
        out, root = env.step_and_maybe_reset(td)
    finally:
        env.close()
    assert calls, (
        "EnvBase.step_and_maybe_reset no longer calls _step_and_maybe_reset: "
        "accelrl.envs.vector.SameStepVectorEnv's fast path is bypassed"
    )
    assert out.get("next") is not None and root.batch_size == (2,)


def test_actor_critic_parts_by_public_indexing():
    """``model[0]`` (the learners' trunk) and the export's plain modules."""
    model = make_actor_critic("observation", (4,), 3)
    trunk = model[0]
    assert trunk is model.get_policy_operator()[0] is model.get_value_operator()[0]
    assert trunk.out_keys == ["hidden"]
    assert model.get_policy_head()[0].out_keys == ["logits"]
    greedy = greedy_module(PPO(model, PPOConfig(), torch.device("cpu")))
    obs = torch.randn(5, 4)
    td = model.get_policy_operator()(TensorDict({"observation": obs}, batch_size=[5]))
    assert torch.equal(greedy(obs), td["logits"].argmax(-1))


def test_batched_collector_weight_update_reaches_the_server():
    """``AsyncBatchedCollector.update_policy_weights_`` (public) replaced a call on its private
    ``_server``: the served copy gets the learner's weights, no storage shared, version + 1."""
    model = make_actor_critic("observation", (4,), 2)
    plan = plan_threads(ThreadsConfig(), 1)
    one = EnvConfig(game="CartPole-v1", num_envs=1)
    fns = [env_factory(one, i, plan, in_worker=True, num_envs=1, sim_threads=1) for i in (0, 1)]
    collector = BatchedInferenceCollector(
        fns,
        model,
        steps_per_batch=8,
        envs_per_worker=2,
        policy_device="cpu",
        storing_device="cpu",
        start_version=3,
    )
    try:
        torchrl_collector = collector._inner  # accelrl's own attribute: the TorchRL collector
        served = TensorDict.from_module(torchrl_collector.policy)
        learner = TensorDict.from_module(model)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        assert not (served == learner).all()
        collector.update_policy_weights_()
        assert (served == learner).all(), "the server did not get the learner's weights"
        assert torchrl_collector.policy_version == 4
        ptrs = {p.data_ptr() for p in learner.values(True, True)}
        assert not ptrs & {p.data_ptr() for p in served.values(True, True)}
        assert collector.procs == []
    finally:
        collector.shutdown()


def leaves(tree, size: int) -> torch.Tensor:
    return torch.as_tensor(tree[torch.arange(size)])


def test_segment_trees_are_the_samplers_masses():
    """The replay zeroes slots and draws through them (``accelrl.replay.sampler``)."""
    user = "accelrl.compat.segment_trees (accelrl.replay.sampler)"
    sampler = PrioritizedSampler(8, alpha=0.5, beta=0.4, eps=1e-6, dtype=torch.float64)
    for name in ("_sum_tree", "_min_tree"):
        assert hasattr(sampler, name), f"private PrioritizedSampler.{name} is gone: update {user}"
    sampler.update_priority(torch.tensor([2, 5]), torch.tensor([1.0, 4.0], dtype=torch.float64))
    sum_tree, min_tree = compat.segment_trees(sampler)
    stored = (torch.tensor([1.0, 4.0], dtype=torch.float64) + 1e-6) ** 0.5
    assert torch.allclose(leaves(sum_tree, 8)[[2, 5]], stored), "sum tree leaves: (p + eps) ** a"
    assert sum_tree.query(0, 8) == pytest.approx(float(stored.sum()))
    assert min_tree.query(0, 8) == pytest.approx(float(stored.min()))
    assert int(sum_tree.scan_lower_bound(np.array([float(stored[0]) + 1e-3]))[0]) == 5
    assert min_tree.identity_element > 1e300, "the min tree's neutral value (a disabled slot)"
    # Zero mass written into the tree is what TorchRL's own draw then sees.
    sum_tree[torch.tensor([2])] = torch.zeros(1, dtype=torch.float64)
    min_tree[torch.tensor([2])] = torch.full((1,), min_tree.identity_element, dtype=torch.float64)
    storage = LazyTensorStorage(8)
    storage.set(torch.arange(8), TensorDict({"x": torch.zeros(8)}, batch_size=[8]))
    index, _ = sampler.sample(storage, 64)
    assert set(torch.as_tensor(index).tolist()) == {5}


def test_sampler_generator_is_the_replay_buffers():
    user = "accelrl.compat.sampler_generator (accelrl.replay.sampler)"
    sampler = PrioritizedSampler(8, alpha=0.0, beta=0.4)
    assert compat.sampler_generator(sampler) is None, f"Sampler._rng default changed: {user}"
    generator = torch.Generator()
    ReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler, generator=generator)
    assert compat.sampler_generator(sampler) is generator, (
        f"ReplayBuffer no longer hands its generator to Sampler._rng: update {user} "
        f"(written against {WRITTEN_AGAINST}; installed: {INSTALLED})"
    )


def test_prioritized_state_dict_holds_tensors_and_round_trips():
    user = "accelrl.compat.prioritized_state_dict"
    sampler = PrioritizedSampler(8, alpha=0.6, beta=0.4, eps=1e-6, dtype=torch.float64)
    sampler.update_priority(
        torch.tensor([1, 3, 6]), torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)
    )
    state = compat.prioritized_state_dict(sampler)
    assert {"_sum_tree", "_min_tree", "_alpha", "_beta", "_eps"} <= set(state), (
        f"PrioritizedSampler.state_dict() keys changed to {sorted(state)}: update {user}"
    )
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)  # raises on the C++ tree objects
    other = PrioritizedSampler(8, alpha=0.0, beta=0.1, dtype=torch.float64)
    compat.load_prioritized_state_dict(other, loaded)
    for mine, theirs in zip(
        compat.segment_trees(sampler), compat.segment_trees(other), strict=True
    ):
        assert torch.equal(leaves(mine, 8), leaves(theirs, 8))
    assert other.alpha == 0.6 and other.beta == 0.4
    assert other.default_priority == sampler.default_priority


def test_write_outputs_is_tensordicts_own_write():
    """``accelrl.models``' direct write overrides the private hook and falls back to it."""
    user = "accelrl.models._DirectWrite and accelrl.compat.write_outputs"
    hook = "_write_to_tensordict"
    params = ("tensordict", "tensors", "tensordict_out", "out_keys")
    private(TensorDictModule, hook, *params, user=user)
    plain = TensorDictModule(nn.Identity(), in_keys=["x"], out_keys=["y"])
    td = TensorDict({"x": torch.ones(2, 3)}, batch_size=[2])
    out = compat.write_outputs(plain, td, [torch.zeros(2, 3)], None, ["y"])
    assert out is td and torch.equal(td["y"], torch.zeros(2, 3))
    direct = DirectTensorDictModule(nn.Identity(), in_keys=["x"], out_keys=["y"])
    calls = []
    original = DirectTensorDictModule._write_to_tensordict  # accelrl's override

    def spy(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DirectTensorDictModule, hook, spy)
        direct(TensorDict({"x": torch.ones(2, 3)}, batch_size=[2]))
    assert calls, f"TensorDictModule.forward no longer calls {hook}: {user} is bypassed"


def test_qvalue_actor_modules_are_the_network_and_its_head():
    net = nn.Linear(4, 3)
    actor = QValueActor(net, spec=Categorical(3), in_keys=["observation"])
    q_module, head = compat.qvalue_actor_modules(actor)
    assert isinstance(q_module, TensorDictModule) and q_module.module is net
    assert q_module.in_keys == ["observation"]
    assert isinstance(head, QValueModule)
    assert head.out_keys == ["action", "action_value", "chosen_action_value"], (
        "QValueModule's out_keys changed order: accelrl.algos.dqn.GreedyQValueActor unpacks them"
    )
    assert head.action_space == "categorical" and head.action_mask_key is None


def dqn_loss() -> tuple[nn.Module, DQNLoss]:
    net = nn.Linear(4, 3)
    actor = QValueActor(net, spec=Categorical(3), in_keys=["observation"])
    return net, DQNLoss(actor, delay_value=True)


def test_dqn_target_params_are_the_loss_target_of_the_network():
    net, loss = dqn_loss()
    target = compat.dqn_target_params(loss)
    assert set(target.keys()) == set(dict(net.named_parameters())), (
        "DQNLoss.target_value_network_params is laid out differently: update "
        "accelrl.compat.dqn_target_params"
    )
    ptrs = {p.data_ptr() for p in loss.target_value_network_params.values(True, True)}
    assert {p.data_ptr() for p in target.values()} <= ptrs, "must be the loss's own tensors"
    copy_of_net = copy.deepcopy(net)
    target.to_module(copy_of_net)
    with torch.no_grad():
        target["weight"].add_(1.0)
    assert torch.equal(copy_of_net.weight, net.weight + 1.0), "target updates must reach it"


def test_hard_update_now_copies_the_online_weights():
    user = "accelrl.compat.hard_update_now (accelrl.algos.dqn.HardTargetUpdate)"
    private(HardUpdate, "_step", "p_source", "p_target", user=user)
    net, loss = dqn_loss()
    updater = HardUpdate(loss, value_network_update_interval=5)
    with torch.no_grad():
        net.weight.add_(1.0)
    target = compat.dqn_target_params(loss)
    assert not torch.equal(target["weight"], net.weight)
    compat.hard_update_now(updater)
    assert torch.equal(target["weight"], net.weight), f"no copy: update {user}"
    assert updater.counter == 5


def test_cpu_has_native_bf16_reads_the_cpus_bf16_flags():
    user = "accelrl.compat.cpu_has_native_bf16"
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        fix = f"update {user} (written against torch 2.14; installed: torch {torch.__version__})"
        assert callable(getattr(torch.cpu, name, None)), f"private torch.cpu.{name} is gone: {fix}"
    assert callable(getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None))
    native = compat.cpu_has_native_bf16()
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return  # not Linux: nothing to compare with
    if "sse2" in flags:  # x86: the kernel's names of the two bf16 instruction sets
        assert native == bool({"avx512_bf16", "amx_bf16"} & flags)


@pytest.mark.parametrize(
    "name,test",
    [
        ("_new_unsafe", test_new_tensordict_unchecked_wraps_the_values_as_given),
        ("_set_str", test_set_unchecked_stores_a_new_entry_without_copying),
    ],
)
def test_a_missing_private_api_fails_with_its_name(monkeypatch, name, test):
    monkeypatch.setattr(TensorDict, name, None)
    with pytest.raises(AssertionError, match=f"private tensordict.*TensorDict.{name} is gone"):
        test()


def test_collector_carrier_is_the_root_it_acts_on_next():
    from torchrl.collectors import Collector

    user = "accelrl.collectors.LeanCollector (accelrl.compat.collector_carrier)"
    env = make_env(EnvConfig(game="Null/CartPole", num_envs=2), seed=0)
    policy = PPO(make_actor_critic("observation", (4,), 2), PPOConfig(), torch.device("cpu"))
    collector = Collector(
        env, policy.collect_policy, frames_per_batch=6, total_frames=-1, track_traj_ids=False
    )
    try:
        batch = next(iter(collector))
        root = compat.collector_carrier(collector)
        assert isinstance(root, TensorDict) and root.batch_size == (2,), user
        # The root after the batch's last step is that step's next observation (no episode
        # ends in the first 3 steps of the zero-cost simulators).
        assert torch.equal(root["observation"], batch["next", "observation"][:, -1]), user
        assert not compat.collector_truncates_batches(collector), (
            "TorchRL now marks every batch's last step truncated for accelrl's envs: "
            f"LeanCollector would no longer write its batches; update {user}"
        )
    finally:
        collector.shutdown()


def test_storage_use_count_counts_views_of_a_tensor():
    tensor = torch.zeros(4, 3)
    alone = compat.storage_use_count(tensor)
    view = tensor[1:]
    assert compat.storage_use_count(tensor) == alone + 1
    del view
    assert compat.storage_use_count(tensor) == alone


def test_a_storage_handle_counts_the_views_taken_after_it():
    tensor = torch.zeros(4, 3)
    handle = compat.storage_handle(tensor)
    alone = compat.handle_use_count(handle)
    assert alone == compat.storage_use_count(tensor)  # the same count as a fresh lookup
    view = tensor.reshape(12)
    assert compat.handle_use_count(handle) == alone + 1
    del view
    assert compat.handle_use_count(handle) == alone


def test_unbatched_payload_is_the_wrapped_tensor():
    from tensordict import UnbatchedTensor

    user = "accelrl.batches.next_obs_at_ends (accelrl.compat.unbatched_payload)"
    private(UnbatchedTensor, "_base_tensor", user=user)
    data = torch.arange(12.0).reshape(3, 4)
    td = TensorDict({"x": torch.zeros(2)}, [2])
    td.set("side", UnbatchedTensor(data))
    payload = compat.unbatched_payload(td.get("side"))
    assert type(payload) is torch.Tensor, user
    assert payload.data_ptr() == data.data_ptr() and torch.equal(payload, data), user
    plain = torch.ones(2)
    assert compat.unbatched_payload(plain) is plain
