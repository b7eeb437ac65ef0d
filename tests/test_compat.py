"""The TensorDict / TorchRL APIs accelrl depends on beyond their documented surface.

Each private API behind ``accelrl.compat`` is checked by name, signature and behaviour against
the installed releases, so that an upgrade that changes one fails here with the name of the
attribute, not deep inside a run. The public calls that replaced private ones, and the private
TorchRL hooks accelrl overrides, are pinned as well.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version
from types import SimpleNamespace

import pytest
import tensordict
import torch
from tensordict import TensorDict
from torchrl.envs import EnvBase, ParallelEnv

from accelrl import compat
from accelrl.collectors import BatchedInferenceCollector, env_factory, plan_threads
from accelrl.config import EnvConfig, ThreadsConfig
from accelrl.envs import make_env
from accelrl.export import greedy_module
from accelrl.models import make_actor_critic

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
    greedy = greedy_module(SimpleNamespace(policy=model))
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
