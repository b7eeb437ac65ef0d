"""DQN-family maths on small fixed batches against hand-written computations.

Each test builds a batch by hand (no env, no replay), desynchronises the target network from
the online one, and compares accelrl's ``DQN`` (TorchRL's losses inside) with the textbook
formula written out here: DQN / Double-DQN targets with ``gamma ** k`` bootstraps over
terminations and truncations, the C51 projection, the dueling combination, hard and Polyak
target updates, importance weights and priorities.

Networks, batches and loss constants are float64 (``tests.numerics``): the two sides of each
comparison then agree to ~1e-15 on any CPU kernel and thread count, and ``TIGHT`` is safe on
every host while a wrong term moves the loss or a gradient by 1e-3 and more.
"""

from __future__ import annotations

import contextlib
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from accelrl.algos.dqn import DQN, DQNConfig
from accelrl.models import QNetwork
from tests.helpers import grads
from tests.numerics import TIGHT, float64

pytestmark = pytest.mark.numerics

GAMMA = 0.9
B, OBS, ACTIONS = 12, 4, 3


def make_dqn(
    on_nonfinite: str = "stop",
    dtype: torch.dtype = torch.float64,
    compile_loss: bool = False,
    **changes,
) -> DQN:
    torch.manual_seed(0)
    cfg = DQNConfig(gamma=GAMMA, max_grad_norm=1e9, **changes)
    with float64() if dtype == torch.float64 else contextlib.nullcontext():
        return DQN(
            cfg,
            obs_key="observation",
            obs_shape=(OBS,),
            num_actions=ACTIONS,
            device=torch.device("cpu"),
            mlp_hidden=(16, 16),
            on_nonfinite=on_nonfinite,
            compile_loss=compile_loss,
        )


def network(dqn: DQN) -> QNetwork:
    """The online QNetwork inside the TorchRL actor."""
    for module in dqn.greedy.modules():
        if isinstance(module, QNetwork):
            return module
    raise AssertionError("no QNetwork in the actor")


def target_network(dqn: DQN) -> QNetwork:
    """A QNetwork holding the loss module's target parameters."""
    target = copy.deepcopy(network(dqn))
    with dqn.loss.target_value_network_params.to_module(dqn.loss.value_network):
        state = copy.deepcopy(network(dqn).state_dict())
    target.load_state_dict(state)
    return target


def desync_target(dqn: DQN) -> None:
    """Move the target parameters away from the online ones."""
    with torch.no_grad():
        for p in dqn.loss.target_value_network_params.values(True, True):
            if p.dtype.is_floating_point and p.numel() > 1:
                p.add_(0.3 * torch.randn_like(p))


def fixed_batch(weight: bool = False, dtype: torch.dtype = torch.float64) -> TensorDict:
    """Twelve transitions with terminations, truncations and n-step lengths."""
    gen = torch.Generator().manual_seed(1)
    f64 = dtype
    terminated = torch.tensor([0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0], dtype=torch.bool)
    truncated = torch.tensor([0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0], dtype=torch.bool)
    k = torch.tensor([1, 1, 2, 3, 2, 3, 1, 3, 2, 3, 3, 1])
    col = (B, 1)
    td = TensorDict(
        {
            "observation": torch.randn(B, OBS, generator=gen, dtype=f64),
            "action": torch.randint(ACTIONS, (B,), generator=gen),
            "steps_to_next_obs": k.view(col),
            "next": {
                "observation": torch.randn(B, OBS, generator=gen, dtype=f64),
                "reward": torch.randn(B, generator=gen, dtype=f64).view(col) * 3,
                "terminated": terminated.view(col),
                "truncated": truncated.view(col),
                "done": (terminated | truncated).view(col),
            },
        },
        batch_size=[B],
    )
    if weight:
        td["_weight"] = torch.rand(B, generator=gen, dtype=f64) + 0.1
    return td


def hand_q_loss(dqn: DQN, td: TensorDict, double: bool, weight: torch.Tensor | None):
    online, target = network(dqn), target_network(dqn)
    rows = torch.arange(B)
    with torch.no_grad():
        next_target = target(td["next", "observation"])
        if double:
            best = online(td["next", "observation"]).argmax(-1)
        else:
            best = next_target.argmax(-1)
        bootstrap = next_target[rows, best]
        k = td["steps_to_next_obs"].view(-1).to(td["next", "reward"])
        # Truncated transitions bootstrap; terminated ones do not.
        alive = (~td["next", "terminated"].view(-1)).float()
        y = td["next", "reward"].view(-1) + GAMMA**k * alive * bootstrap
    q = online(td["observation"])[rows, td["action"]]
    per_sample = F.smooth_l1_loss(q, y, reduction="none")
    loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
    return loss, (q - y).detach().abs()


@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "is-weights"])
def test_q_loss_gradient_and_priorities_match_hand_computation(double, weighted):
    dqn = make_dqn(double=double, prioritized=weighted)
    desync_target(dqn)
    td = fixed_batch(weight=weighted)
    weight = td["_weight"] if weighted else None
    # Importance weights as in Schaul et al. (2016): mean(w * loss), w already divided by
    # max(w) by the replay (TorchRL's own weighted mean, sum(w l) / sum(w), is not that).
    # Priorities are |TD error| (TorchRL writes it squared).
    assert_objective_is(dqn, td, *hand_q_loss(dqn, td, double, weight))


def assert_objective_is(dqn: DQN, td: TensorDict, hand: torch.Tensor, priority: torch.Tensor):
    """``dqn.objective`` on ``td`` gives the loss ``hand``, its gradients and ``priority``."""
    params = list(network(dqn).parameters())
    hand.backward()
    expected_grads = grads(params)
    for p in params:
        p.grad = None
    loss, got_priority = dqn.objective(td.clone())
    torch.testing.assert_close(loss, hand.detach(), **TIGHT)
    loss.backward()
    for got, want in zip(grads(params), expected_grads, strict=True):
        torch.testing.assert_close(got, want, **TIGHT)
    torch.testing.assert_close(got_priority, priority, **TIGHT)


def test_update_applies_one_adam_step_of_the_hand_gradient():
    dqn = make_dqn(lr=1e-2)
    desync_target(dqn)
    td = fixed_batch()
    reference = copy.deepcopy(network(dqn))
    target = target_network(dqn)
    opt = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=dqn.cfg.adam_eps)
    rows = torch.arange(B)
    with torch.no_grad():
        k = td["steps_to_next_obs"].view(-1).to(td["next", "reward"])
        alive = (~td["next", "terminated"].view(-1)).float()
        y = (
            td["next", "reward"].view(-1)
            + GAMMA**k * alive * target(td["next", "observation"]).max(-1).values
        )
    loss = F.smooth_l1_loss(reference(td["observation"])[rows, td["action"]], y)
    loss.backward()
    opt.step()
    dqn.update(td)
    for got, want in zip(network(dqn).parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, **TIGHT)


def hand_c51_loss(
    dqn: DQN, td: TensorDict, weight: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, per-sample cross-entropies) of C51 on ``td``, in ``td``'s dtype."""
    cfg = dqn.cfg
    online, target = network(dqn), target_network(dqn)
    dtype = td["next", "reward"].dtype
    support = torch.linspace(cfg.v_min, cfg.v_max, cfg.atoms, dtype=dtype)
    dz = (cfg.v_max - cfg.v_min) / (cfg.atoms - 1)
    rows = torch.arange(B)
    with torch.no_grad():
        # Online network picks the bootstrap action by expected value; the target scores it.
        p_online = online(td["next", "observation"]).softmax(-2)  # [B, atoms, A]
        best = (p_online * support[:, None]).sum(-2).argmax(-1)
        p_next = target(td["next", "observation"]).softmax(-2)[rows, :, best]  # [B, atoms]
        k = td["steps_to_next_obs"].view(-1, 1).to(td["next", "reward"])
        alive = (~td["next", "terminated"].view(-1, 1)).to(dtype)
        tz = (td["next", "reward"].view(-1, 1) + alive * GAMMA**k * support).clamp(
            cfg.v_min, cfg.v_max
        )
        # Split each atom's mass between its two neighbours on the support, written as a
        # dense triangle kernel (independent of the floor/ceil bookkeeping in TorchRL).
        b = (tz - cfg.v_min) / dz  # [B, atoms]
        kernel = (1 - (b[:, :, None] - torch.arange(cfg.atoms)[None, None]).abs()).clamp_min(0)
        m = (p_next[:, :, None] * kernel).sum(1)  # [B, atoms]
        torch.testing.assert_close(m.sum(-1), torch.ones(B, dtype=dtype), rtol=0, atol=1e-5)
    log_p = online(td["observation"]).log_softmax(-2)[rows, :, td["action"]]
    per_sample = -(m * log_p).sum(-1)
    loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
    return loss, per_sample.detach()


def c51_batch(weight: bool = False, dtype: torch.dtype = torch.float64) -> TensorDict:
    """``fixed_batch`` with a terminated transition whose reward lands on an atom (the
    projection's case of a target exactly on the support); clamped targets at both ends of the
    support are in the batch anyway (rewards of +-3 sd against a support of [-5, 5])."""
    td = fixed_batch(weight=weight, dtype=dtype)
    td["next", "reward"][1] = 2.0  # transition 1 is terminated: its target is 2.0 for every atom
    return td


C51 = dict(distributional=True, atoms=11, v_min=-5.0, v_max=5.0)


def test_c51_projection_and_cross_entropy_match_hand_computation():
    # Float32, the default: the loss sums 12 x 11 products m * log p of order 1; two
    # summation orders of n terms differ by at most n * 2**-24 of their absolute sum (132 *
    # 6e-8 = 8e-6 of a loss of ~2): rtol 1e-5. A mass put on the wrong neighbour atom moves the
    # loss by ~1e-2.
    dqn = make_dqn(dtype=torch.float32, **C51)
    desync_target(dqn)
    td = c51_batch(dtype=torch.float32)
    hand, _ = hand_c51_loss(dqn, td)
    loss, _ = dqn.objective(td.clone())
    torch.testing.assert_close(loss, hand.detach(), rtol=1e-5, atol=0)


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "is-weights"])
def test_c51_loss_gradient_and_priorities_match_hand_computation_in_float64(weighted):
    """The update's C51 terms in float64 (networks and batch) against the hand computation:
    loss, gradients and priorities (the cross-entropies), with importance weights as
    mean(w * loss)."""
    dqn = make_dqn(prioritized=weighted, **C51)
    desync_target(dqn)
    td = c51_batch(weight=weighted)
    weight = td["_weight"] if weighted else None
    assert_objective_is(dqn, td, *hand_c51_loss(dqn, td, weight))


def test_dueling_head_is_value_plus_centred_advantage():
    with float64():
        net = QNetwork((OBS,), ACTIONS, dueling=True, mlp_hidden=(8,))
        dist = QNetwork((OBS,), ACTIONS, dueling=True, atoms=7, mlp_hidden=(8,))
    x = torch.randn(5, OBS, dtype=torch.float64)
    h = net.features(x)
    a, v = net.advantage(h), net.value(h)
    torch.testing.assert_close(net(x), v + a - a.mean(-1, keepdim=True), **TIGHT)
    h = dist.features(x)
    a = dist.advantage(h).view(5, 7, ACTIONS)
    v = dist.value(h).view(5, 7, 1)
    torch.testing.assert_close(dist(x), v + a - a.mean(-1, keepdim=True), **TIGHT)


def test_vector_q_network_uses_relu_and_default_init():
    """The DQN convention for vector inputs: a Tanh trunk with orthogonal init (the
    actor-critic one) made DQN on CartPole reach last-100 ~70 instead of ~250."""
    net = QNetwork((OBS,), ACTIONS, mlp_hidden=(64, 64))
    acts = [m for m in net.features.modules() if isinstance(m, torch.nn.Tanh | torch.nn.ReLU)]
    assert acts and all(isinstance(m, torch.nn.ReLU) for m in acts)
    # PyTorch's default Linear init draws biases uniformly (orthogonal_ zeroes them).
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert all(m.bias.abs().sum() > 0 for m in linears)


def flat(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def online_and_target(dqn: DQN) -> tuple[torch.Tensor, torch.Tensor]:
    return flat(network(dqn).parameters()), flat(target_network(dqn).parameters())


def test_hard_target_copy_every_interval_updates():
    dqn = make_dqn(target_update_interval=3, lr=1e-2)
    td = fixed_batch()
    start = online_and_target(dqn)[1]
    for i in range(1, 8):
        dqn.update(td.clone())
        online, target = online_and_target(dqn)
        if i % 3 == 0:
            assert torch.equal(online, target), f"no copy after update {i}"
            start = target
        else:
            assert torch.equal(target, start), f"target moved after update {i}"
            assert not torch.equal(online, target)


def test_polyak_target_update():
    tau = 0.25
    dqn = make_dqn(tau=tau, lr=1e-2)
    td = fixed_batch()
    for _ in range(3):
        before = online_and_target(dqn)[1]
        dqn.update(td.clone())
        online, target = online_and_target(dqn)
        torch.testing.assert_close(target, (1 - tau) * before + tau * online, **TIGHT)


def test_skipped_nonfinite_step_returns_no_priorities():
    dqn = make_dqn(prioritized=True, on_nonfinite="skip")
    td = fixed_batch(weight=True)
    td["next", "reward"][3] = float("nan")
    before, skipped = flat(network(dqn).parameters()), dqn.guard.skipped
    priority = dqn.update(td)
    assert priority is None, "a NaN priority would poison the prioritized sampler"
    assert math.isnan(dqn.metrics()["train/td_error"])
    assert dqn.guard.skipped == skipped + 1
    assert torch.equal(flat(network(dqn).parameters()), before)
    td["next", "reward"][3] = 0.0
    priority = dqn.update(td)
    assert priority is not None and torch.isfinite(priority).all()


def test_prioritized_run_survives_skipped_nonfinite_steps(tmp_path, monkeypatch):
    """End to end: NaN losses (and so NaN TD errors) in three updates of a prioritized run
    under --on-nonfinite skip; the replay keeps sampling and the run ends with finite losses."""
    import csv

    from recipes.dqn_atari import Config, train

    calls = {"n": 0}
    real = DQN.terms

    def poisoned(self, sample):
        loss, priority, backward = real(self, sample)
        calls["n"] += 1
        if 5 <= calls["n"] < 8:
            return loss * float("nan"), priority * float("nan"), backward
        return loss, priority, backward

    monkeypatch.setattr(DQN, "terms", poisoned)
    cfg = Config(total_frames=1024, run_dir=str(tmp_path), on_nonfinite="skip")
    cfg.env.game, cfg.env.num_envs = "CartPole-v1", 4
    cfg.collector.steps_per_batch = 64
    cfg.dqn = DQNConfig(batch_size=32, learning_starts_frames=128, replay_capacity=4096,
                        prioritized=True, n_step=3)  # fmt: skip
    cfg.log.progress, cfg.log.eval_episodes, cfg.log.tensorboard = False, 0, False
    summary = train(cfg)
    assert summary["frames"] == 1024
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert float(rows[-1]["train/skipped_steps"]) == 3
    assert all(torch.isfinite(torch.tensor(float(r["loss/q"]))) for r in rows[-3:])


@pytest.mark.parametrize(
    "kind", [dict(double=False), dict(double=True), C51], ids=["dqn", "double", "c51"]
)
def test_direct_losses_match_torchrl_losses_through_target_copies_and_loading(kind):
    """``DQN`` computes its losses from its two networks directly; TorchRL's ``DQNLoss`` /
    ``DistributionalDQNLoss`` (which still own the target parameters) must give the same loss,
    gradients and TD errors (C51: cross-entropies): before a target copy, after one, and in a
    DQN restored from a checkpoint. Float64 throughout: TorchRL's C51 projection allocates in
    the default dtype, which ``float64()`` sets."""
    dqn = make_dqn(prioritized=True, target_update_interval=2, **kind)
    direct_terms = DQN._c51_terms if "distributional" in kind else DQN._q_terms
    td = c51_batch(weight=True)

    def both(agent: DQN) -> None:
        params = list(network(agent).parameters())
        for p in params:
            p.grad = None  # update() leaves its last gradients
        results = []
        for terms in (direct_terms, DQN._loss_terms):
            sample = td.clone()
            sample.set("priority_weight", sample.get("_weight"))
            with float64():
                loss, td_error = terms(agent, sample)
            loss.backward()
            results.append((loss.detach(), td_error.reshape(-1), grads(params)))
            for p in params:
                p.grad = None
        (direct, direct_td, direct_grads), (torchrl, torchrl_td, torchrl_grads) = results
        torch.testing.assert_close(direct, torchrl, **TIGHT)
        torch.testing.assert_close(direct_td, torchrl_td, **TIGHT)
        for got, want in zip(direct_grads, torchrl_grads, strict=True):
            torch.testing.assert_close(got, want, **TIGHT)

    desync_target(dqn)
    both(dqn)
    for _ in range(2):  # the second update copies the online weights into the target
        dqn.update(td.clone())
    torch.testing.assert_close(
        list(dqn.target_network.parameters()), list(network(dqn).parameters())
    )
    dqn.update(td.clone())  # online and target differ again
    both(dqn)
    restored = make_dqn(prioritized=True, target_update_interval=2, **kind)
    restored.load_state_dict(copy.deepcopy(dqn.state_dict()))
    torch.testing.assert_close(
        list(restored.target_network.parameters()), list(target_network(dqn).parameters())
    )
    both(restored)


# ----- the gradient without autograd (accelrl.algos.direct_grad) -------------------------------

CHAINS = {
    "mlp": ((OBS,), dict(mlp_hidden=(16, 16))),
    "minatar-cnn": ((4, 10, 10), {}),
    "nature-cnn": ((4, 84, 84), {}),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("net", list(CHAINS))
def test_chain_gradient_equals_autograds(net, dtype):
    """``ChainGradient`` gives the Q-network's own forward values and autograd's gradients of
    a loss through them, for the MLP and both CNNs: bit for bit, since it runs the kernels
    autograd runs (the same call on the same tensors in one process), in float32 too."""
    from accelrl.algos.direct_grad import ChainGradient

    shape, kwargs = CHAINS[net]
    torch.manual_seed(0)
    q_net = QNetwork(shape, ACTIONS, **kwargs).to(dtype)
    chain = ChainGradient.of(q_net)
    assert chain is not None
    gen = torch.Generator().manual_seed(2)
    if len(shape) == 1:
        obs = torch.randn(B, *shape, generator=gen, dtype=dtype)
    else:  # frames or grids: uint8, scaled into the first convolution
        obs = torch.randint(0, 256, (B, *shape), generator=gen, dtype=torch.uint8)
    upstream = torch.randn(B, ACTIONS, generator=gen, dtype=dtype)
    (q_net(obs) * upstream).sum().backward()
    expected = grads(list(q_net.parameters()))
    q_net.zero_grad(set_to_none=True)
    with torch.no_grad():
        values, saved = chain.forward(obs)
        chain.backward(upstream, saved)
    assert torch.equal(values, q_net(obs).detach())
    for got, want in zip(grads(list(q_net.parameters())), expected, strict=True):
        assert torch.equal(got, want)


def test_chain_gradient_declines_networks_that_are_not_chains():
    """Dueling heads, C51's atoms and LayerNorm keep autograd (``of`` gives None), and so
    does a learner on C51 or with a compiled loss."""
    from accelrl.algos.direct_grad import ChainGradient

    assert ChainGradient.of(QNetwork((OBS,), ACTIONS)) is not None
    assert ChainGradient.of(QNetwork((OBS,), ACTIONS, dueling=True)) is None
    assert ChainGradient.of(QNetwork((OBS,), ACTIONS, atoms=5)) is None
    assert ChainGradient.of(QNetwork((4, 10, 10), ACTIONS, layer_norm=True)) is None
    assert ChainGradient.of(torch.nn.Linear(OBS, ACTIONS)) is None
    assert make_dqn()._chain is not None
    assert make_dqn(**C51)._chain is None
    assert make_dqn(dueling=True)._chain is None


@pytest.mark.parametrize("double", [False, True], ids=["dqn", "double"])
@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "is-weights"])
def test_update_without_autograd_equals_the_autograd_update(double, weighted):
    """``DQN.update`` on the gradient written without autograd takes the steps the autograd
    update takes (loss, gradient, Adam, priorities), through a target copy, on n-step samples
    with terminations, truncations and importance weights."""
    runs = []
    for direct in (True, False):
        dqn = make_dqn(double=double, prioritized=weighted, target_update_interval=2, lr=1e-2)
        assert dqn._chain is not None
        if not direct:
            dqn._chain = None  # the objective through autograd, as before
        desync_target(dqn)
        priorities = [dqn.update(fixed_batch(weight=weighted)) for _ in range(3)]
        runs.append((list(network(dqn).parameters()), priorities, dqn.metrics()))
    (params, priorities, metrics), (want_params, want_priorities, want_metrics) = runs
    torch.testing.assert_close(params, want_params, **TIGHT)
    torch.testing.assert_close(priorities, want_priorities, **TIGHT)
    assert metrics == pytest.approx(want_metrics, rel=1e-12)
