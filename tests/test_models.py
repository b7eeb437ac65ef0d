"""Networks: shapes, uint8 input scaling, orthogonal init, heads."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from accelrl.models import NatureCNN, make_actor_critic
from tests.numerics import TIGHT, float64


@pytest.mark.numerics
def test_nature_cnn_shapes_and_uint8_scaling():
    # Float64 (tests.numerics): x * (1/255) and x / 255 differ in the last bit, and the 3136-wide
    # layer sums such differences in an order each CPU kernel picks.
    with float64():
        net = NatureCNN()
    assert net.fc[0].in_features == 3136 and net.out_features == 512
    frames = torch.randint(0, 256, (2, 3, 4, 84, 84), dtype=torch.uint8)
    out = net(frames)
    assert out.shape == (2, 3, 512) and out.dtype == torch.float64  # the weights' dtype
    # The trunk sees frames in [0, 1]: its layers applied by hand to frames / 255.
    by_hand = net.fc(net.convs(frames.reshape(6, 4, 84, 84).double() / 255.0)).reshape(2, 3, 512)
    torch.testing.assert_close(out, by_hand, **TIGHT)
    torch.testing.assert_close(net(frames.double()), out, **TIGHT)  # float frames in 0..255 alike


@pytest.mark.numerics
def test_q_network_scales_uint8_frames():
    from accelrl.models import QNetwork

    with float64():
        net = QNetwork((4, 84, 84), 6)
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    by_hand = net.advantage(net.features(frames.double() / 255.0))
    torch.testing.assert_close(net(frames), by_hand, **TIGHT)


@pytest.mark.parametrize(
    "shape,trunk,features",
    [((4, 84, 84), "NatureCNN", 512), ((4, 36, 36), "NatureCNN", 512),
     ((7, 10, 10), "MinAtarCNN", 128), ((4, 35, 35), "MinAtarCNN", 128), ((4,), None, None),
     ((2, 3), None, None)],
)  # fmt: skip
def test_trunk_is_chosen_from_the_observation_shape(shape, trunk, features):
    from accelrl.models import conv_trunk

    conv = conv_trunk(shape)
    assert (conv and type(conv).__name__) == trunk
    if conv is not None:
        assert conv.out_features == features
        assert conv(torch.zeros(2, *shape, dtype=torch.uint8)).shape == (2, features)


def test_minatar_cnn_is_the_papers_network():
    """Young & Tian (2019): one 3x3 conv of 16 channels at stride 1, ReLU, a 128-unit layer;
    0/1 grids go in unscaled. Q-networks put their head on its convolutions."""
    from accelrl.models import MinAtarCNN, QNetwork

    net = MinAtarCNN(in_channels=4)
    conv = net.convs[0]
    assert (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride) == (
        4, 16, (3, 3), (1, 1)
    )  # fmt: skip
    assert net.fc[0].in_features == 16 * 8 * 8 and net.fc[0].out_features == 128
    grids = torch.randint(0, 2, (3, 4, 10, 10), dtype=torch.uint8)
    torch.testing.assert_close(net(grids), net.fc(net.convs(grids.float())))
    q = QNetwork((4, 10, 10), 6)
    assert [m.out_features for m in q.advantage if isinstance(m, torch.nn.Linear)] == [128, 6]
    torch.testing.assert_close(q(grids), q.advantage(q.features(grids.float())))
    model = make_actor_critic("observation", (4, 10, 10), 6)
    assert type(model.module[0].module).__name__ == "MinAtarCNN"


def test_float_input_is_not_modified_in_place():
    net = NatureCNN()
    frames = torch.full((1, 4, 84, 84), 255.0)
    net(frames)
    assert frames.max() == 255.0


def test_orthogonal_init_and_small_policy_head():
    model = make_actor_critic("pixels", (4, 84, 84), 6)
    conv = model.module[0].module.convs[0].weight.flatten(1)
    gram = conv @ conv.T
    # Float32 QR (LAPACK) and a 256-term product: each Gram entry is within 256 * 2**-24 of
    # 2 (at most 2e-5 worst case, ~1e-6 typically) on any kernel; a wrong gain moves it by 0.1.
    torch.testing.assert_close(gram, 2.0 * torch.eye(32), atol=1e-4, rtol=1e-4)
    policy_head = model.get_policy_head().module[0].module
    assert policy_head.weight.abs().max() < 0.05
    assert (policy_head.bias == 0).all()


def test_actor_critic_outputs():
    model = make_actor_critic("observation", (4,), 3, mlp_hidden=(32,))
    from tensordict import TensorDict

    td = model(TensorDict({"observation": torch.randn(5, 4)}, [5]))
    assert td["action"].shape == (5,) and td["action"].dtype == torch.int64
    assert td["action_log_prob"].shape == (5,)
    assert td["state_value"].shape == (5, 1)
    assert td["logits"].shape == (5, 3)


def test_vector_observations_get_separate_actor_and_critic():
    model = make_actor_critic("observation", (4,), 2)
    assert not list(model.module[0].parameters())
    policy = set(map(id, model.get_policy_head().parameters()))
    value = set(map(id, model.get_value_head().parameters()))
    assert policy and value and not policy & value


@pytest.mark.parametrize(
    "obs_key,shape,dtype",
    [("pixels", (4, 84, 84), torch.uint8), ("observation", (4,), torch.float32)],
)
def test_direct_write_modules_give_the_same_outputs_as_tensordict_modules(obs_key, shape, dtype):
    # accelrl's modules skip TensorDict.from_any on their outputs (a sys.path scan per call);
    # the same network through TensorDict's own write path must produce the same TensorDict.
    from benchmarks.module_write import plain_copy

    model = make_actor_critic(obs_key, shape, 3)
    plain = plain_copy(model)
    assert type(plain.module[0]) is TensorDictModule
    obs = torch.randint(0, 255, (5, *shape)) if dtype == torch.uint8 else torch.randn(5, *shape)
    td = TensorDict({obs_key: obs.to(dtype)}, [5])
    torch.manual_seed(0)
    ours = model(td.clone())
    torch.manual_seed(0)
    theirs = plain(td.clone())
    assert set(ours.keys()) == set(theirs.keys())
    for key in theirs.keys():
        assert torch.equal(ours[key], theirs[key]), key


@pytest.mark.parametrize("shape", [(64, 6), (7, 2), (2, 3, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_categorical_draw_is_the_distributions_draw(shape, dtype):
    # The acting network draws without the distribution object: the same actions from the
    # same generator state, the same log-probs bit for bit, and the same most likely action.
    from accelrl.models import categorical_draw

    logits = (torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 4).to(dtype)
    for sample in (True, False):
        torch.manual_seed(5)
        action, log_prob = categorical_draw(logits, sample)
        torch.manual_seed(5)
        dist = torch.distributions.Categorical(logits=logits, validate_args=False)
        want = dist.sample() if sample else dist.probs.argmax(-1)
        assert action.shape == want.shape == shape[:-1]
        assert torch.equal(action, want), sample
        assert torch.equal(log_prob, dist.log_prob(want)), sample
        assert log_prob.dtype == dtype
    torch.manual_seed(0)
    uniform = torch.zeros(shape, dtype=dtype)  # a draw, not the argmax (always action 0)
    assert categorical_draw(uniform, True)[0].bool().any()
    assert not categorical_draw(uniform, False)[0].bool().any()


@pytest.mark.parametrize("obs_key,shape", [("pixels", (4, 84, 84)), ("observation", (4,))])
def test_acting_policy_draws_what_the_actor_critic_draws(obs_key, shape):
    # Learners collect with acting_policy (one module) instead of the ActorValueOperator: the
    # same weights must give the same actions (same random stream), log-probs and values, and
    # the most likely action outside a collector's RANDOM exploration, as TorchRL's actor.
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from accelrl.models import acting_policy

    model = make_actor_critic(obs_key, shape, 5)
    last = [m for m in model.get_policy_head().modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():  # logits spread enough for a draw to differ from the argmax
        last.weight.mul_(300.0)
    acting = acting_policy(model)
    assert {id(p) for p in acting.parameters()} == {id(p) for p in model.parameters()}
    if obs_key == "pixels":
        obs = torch.randint(0, 255, (64, *shape), dtype=torch.uint8)
    else:
        obs = torch.randn(64, *shape)
    td = TensorDict({obs_key: obs}, [64])
    keys = ("action", "action_log_prob", "state_value")
    for mode in (ExplorationType.RANDOM, ExplorationType.DETERMINISTIC, None):
        with torch.no_grad(), set_exploration_type(mode):
            torch.manual_seed(1)
            ours = acting(td.clone())
            torch.manual_seed(1)
            theirs = model(td.clone())
        for key in keys:
            assert torch.equal(ours[key], theirs[key]), (mode, key)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        drawn = acting(td.clone())["action"]
    assert not torch.equal(drawn, ours["action"]), "a draw should differ from the argmax"
