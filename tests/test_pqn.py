"""PQN's pieces, its update against the plain loop's on the same batch, and proof that it
learns."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from accelrl.algos.catalog import PQNRunConfig
from accelrl.algos.pqn import PQNConfig, q_lambda_targets
from accelrl.errors import ConfigError
from recipes.pqn_atari import ALGORITHM, Config
from reference import pqn as plain
from tests.helpers import print_cartpole_result
from tests.numerics import float64

SPEC = {"obs_key": "observation", "obs_shape": (4,), "num_actions": 3}
ENVS, STEPS = 4, 6


def synthetic_batch(dtype: torch.dtype = torch.float64) -> TensorDict:
    """A ``[4, 6]`` batch of vector observations laid out as a collector writes it: each next
    observation is the following root one, except where an episode ended (its final one, then
    a new episode's first). Env 0 terminates at step 2, env 1 is truncated at step 3, env 2
    loses a life at step 1 (the game goes on), env 3 runs through; every step has a reward."""
    g = torch.Generator().manual_seed(7)
    chain = torch.randn(ENVS, STEPS + 1, 4, generator=g, dtype=dtype)
    obs, next_obs = chain[:, :-1].clone(), chain[:, 1:].clone()
    false = torch.zeros(ENVS, STEPS, 1, dtype=torch.bool)
    terminated, truncated, life_lost = false.clone(), false.clone(), false.clone()
    terminated[0, 2], truncated[1, 3], life_lost[2, 1] = True, True, True
    for env, t in ((0, 2), (1, 3)):  # the final observation differs from the next root one
        next_obs[env, t] = torch.randn(4, generator=g, dtype=dtype)
    return TensorDict(
        {
            "observation": obs,
            "action": torch.randint(0, 3, (ENVS, STEPS), generator=g),
            "next": {
                "observation": next_obs,
                "reward": torch.randn(ENVS, STEPS, 1, generator=g).to(torch.float32),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
                "life_lost": life_lost,
            },
        },
        [ENVS, STEPS],
    )


def plain_view(batch: TensorDict) -> dict[str, torch.Tensor]:
    """The batch as the plain loop holds it (``[envs, T]``; a lost life is terminal and ends
    the trace, as the recipe's ``life_loss_boundary``)."""
    nxt = batch["next"]
    lost = nxt["life_lost"].squeeze(-1)
    dtype = batch["observation"].dtype
    return {
        "obs": batch["observation"],
        "action": batch["action"],
        "reward": nxt["reward"].squeeze(-1).to(dtype),
        "next_obs": nxt["observation"],
        "terminated": (nxt["terminated"].squeeze(-1) | lost).to(dtype),
        "ended": (nxt["done"].squeeze(-1) | lost).to(dtype),
    }


def agent_and_plain(cfg: PQNRunConfig, layer_norm: bool = True):
    """The recipe's agent for ``SPEC`` in float64, the plain loop's network (without its
    LayerNorms unless ``layer_norm``) with its weights, and the agent's parameters."""
    torch.manual_seed(0)
    with float64():
        agent = ALGORITHM.make_agent(cfg, SPEC, torch.device("cpu"))
        net = plain.LayerNormQNet(4, 3, cfg.model.mlp_hidden, layer_norm=layer_norm)
    ours = list(agent.q_network.parameters())
    shared = [
        p
        for m in agent.q_network.modules()
        if layer_norm or not isinstance(m, torch.nn.LayerNorm)
        for p in m.parameters(recurse=False)
    ]
    with torch.no_grad():
        for mine, theirs in zip(shared, net.parameters(), strict=True):
            theirs.copy_(mine)
    return agent, net, ours


def small_config(**pqn) -> Config:
    cfg = Config()
    cfg.model.mlp_hidden = (16, 8)
    cfg.pqn = PQNConfig(**{"lr": 1e-2, "epochs": 3, "minibatches": 4, **pqn})
    return cfg


@pytest.mark.numerics
@pytest.mark.parametrize("q_lambda", [0.0, 0.65, 1.0])
def test_q_lambda_targets_follow_the_recursion_at_every_kind_of_end(q_lambda):
    """TorchRL's TD(lambda) with max_a Q(s', a) gives PQN's targets: a terminal step r, a
    truncated one r + gamma V'(final observation), no trace across an end, the last step
    r + gamma V'. By hand on one simulator."""
    gamma = 0.9
    reward = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    v = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0], dtype=torch.float64)
    term = torch.tensor([False, True, False, False, False])
    done = torch.tensor([False, True, False, True, False])  # step 3 truncated
    got = q_lambda_targets(
        v[None, :, None], reward[None, :, None], done[None, :, None], term[None, :, None],
        gamma, q_lambda,
    ).reshape(-1)  # fmt: skip
    g4 = 5 + gamma * 50
    g3 = 4 + gamma * 40  # truncated: bootstraps from its final observation, trace cut
    g2 = 3 + gamma * ((1 - q_lambda) * 30 + q_lambda * g3)
    g1 = 2.0  # terminal
    g0 = 1 + gamma * ((1 - q_lambda) * 10 + q_lambda * g1)
    torch.testing.assert_close(got, torch.tensor([g0, g1, g2, g3, g4], dtype=torch.float64))


@pytest.mark.numerics
def test_an_update_matches_the_plain_loop_on_the_same_batch():
    """By construction: the recipe's PQN phase and the plain loop's (``reference.pqn``) on one
    batch with a terminal, a truncation and a lost life, from the same weights, at 30% of the
    schedule, give the same weights after 3 epochs x 4 minibatches in the same order (both
    draw ``torch.randperm`` from the same seed), in float64 to 1e-10. Then both set the same
    epsilon for the next rollout."""
    cfg = small_config()
    agent, net, ours = agent_and_plain(cfg)
    batch = synthetic_batch()
    p = cfg.pqn
    opt = torch.optim.RAdam(net.parameters(), lr=p.lr, eps=p.eps)
    torch.manual_seed(1)
    expected = plain.pqn_update(net, opt, plain_view(batch), p, p.lr * 0.7)
    torch.manual_seed(1)
    metrics = agent.update(batch.clone(), progress=0.3)
    assert metrics["train/lr"] == pytest.approx(p.lr * 0.7)
    assert metrics["loss/q"] == pytest.approx(expected["loss"], rel=1e-10)
    for mine, theirs in zip(ours, net.parameters(), strict=True):
        assert mine.dtype == torch.float64
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)
    assert agent.epsilon == pytest.approx(plain.epsilon_at(p, 0.3))
    assert metrics["train/epsilon"] == p.eps_start  # the epsilon this batch was acted with


@pytest.mark.numerics
def test_the_network_has_a_layer_norm_before_every_relu():
    """Against a plain network without LayerNorm (its Linear weights copied), the recipe's
    Q-values differ: the normalisation is in the recipe's network, in every hidden layer."""
    cfg = small_config()
    agent, net, _ = agent_and_plain(cfg, layer_norm=False)
    norms = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert [m.normalized_shape for m in norms] == [(16,), (8,)]
    obs = synthetic_batch()["observation"].reshape(-1, 4)
    assert not torch.allclose(agent.q_network(obs), net(obs))


@pytest.mark.parametrize(
    "shape,widths",
    [
        ((4, 10, 10), [(16, 8, 8), (128,)]),
        ((4, 84, 84), [(32, 20, 20), (64, 9, 9), (64, 7, 7), (512,)]),
    ],
    ids=["minatar", "atari"],
)
def test_conv_q_networks_normalise_every_layer(shape, widths):
    """MinAtar's and the Nature CNN's PQN networks: a LayerNorm over each conv's whole output
    and over the hidden layer, as CleanRL's ``pqn_atari_envpool.py``."""
    spec = {"obs_key": "pixels", "obs_shape": shape, "num_actions": 4}
    agent = ALGORITHM.make_agent(Config(), spec, torch.device("cpu"))
    norms = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert [m.normalized_shape for m in norms] == [tuple(w) for w in widths]
    obs = torch.randint(0, 2, (2, *shape), dtype=torch.uint8)
    assert agent.export_module()(obs).shape == (2,)


def test_epsilon_falls_linearly_per_batch_then_stays():
    cfg = small_config(eps_start=1.0, eps_end=0.1, eps_decay_fraction=0.5)
    agent, _, _ = agent_and_plain(cfg)
    assert agent.epsilon == 1.0
    assert agent.epsilon_at(0.25) == pytest.approx(0.55)
    assert agent.epsilon_at(0.5) == pytest.approx(0.1)
    assert agent.epsilon_at(0.9) == pytest.approx(0.1)
    agent.update(synthetic_batch(), progress=0.25)
    assert agent.epsilon == pytest.approx(0.55)
    state = agent.state_dict()
    fresh, _, _ = agent_and_plain(cfg)
    fresh.load_state_dict(state)
    assert fresh.epsilon == pytest.approx(0.55), "a resumed run acts with the reached epsilon"


def test_update_reports_every_metric_and_moves_every_weight():
    cfg = small_config()
    agent, _, ours = agent_and_plain(cfg)
    before = [p.detach().clone() for p in ours]
    metrics = agent.update(synthetic_batch(), progress=0.0)
    for key in ("loss/q", "train/q_values", "train/q_target", "train/grad_norm", "train/lr"):
        assert math.isfinite(metrics[key]), key
    assert all(not torch.equal(a, b) for a, b in zip(before, ours, strict=True))


def with_pqn(**changes):
    cfg = Config()
    for path, value in changes.items():
        section, name = path.split("__")
        setattr(getattr(cfg, section), name, value)
    return cfg


@pytest.mark.parametrize(
    "changes,flag",
    [
        ({"pqn__q_lambda": 1.5}, "pqn.q-lambda"),
        ({"pqn__q_lambda": -0.1}, "pqn.q-lambda"),
        ({"pqn__minibatches": 3}, "pqn.minibatches"),
        ({"env__num_envs": 1, "collector__steps_per_batch": 32}, "env.num-envs"),
        ({"pqn__eps_decay_fraction": 0.0}, "pqn.eps-decay-fraction"),
        ({"pqn__eps_end": 0.5, "pqn__eps_start": 0.2}, "pqn.eps-end"),
        ({"collector__kind": "async", "collector__num_workers": 2}, "collector.kind"),
        ({"model__recurrent": "lstm"}, "model.recurrent"),
    ],
)
def test_bad_settings_are_refused_with_one_line(changes, flag):
    with pytest.raises(ConfigError) as err:
        ALGORITHM.validate(with_pqn(**changes))
    message = str(err.value)
    assert "\n" not in message and f"--{flag}=" in message, message


@pytest.mark.slow
def test_pqn_learns_cartpole_as_the_plain_loop_does(tmp_path, capsys):
    """``reference.cartpole_presets``' PQN settings (100k steps, 8 envs x 32 steps), seed 0:
    the recipe and the plain loop (``reference.pqn``) both reach a last-100 mean of 200
    (measured figures in docs/results/learning.md); with lr 0 both stay at random play."""
    from accelrl import loops
    from reference.cartpole_presets import cartpole_config

    cfg = cartpole_config("pqn", 0, run_dir=str(tmp_path / "run"), eval_episodes=4)
    summary = loops.train(cfg, ALGORITHM)
    print_cartpole_result(capsys, "pqn seed 0", summary)
    torch.set_num_threads(1)
    reference = plain.plain_pqn(cartpole_config("pqn", 0, eval_episodes=4))
    print(f"plain pqn seed 0: last-100 {reference['last100']:.1f}")
    assert summary["mean_return_100"] >= 200, summary
    assert reference["last100"] >= 200, reference["last100"]


@pytest.mark.numerics
def test_the_plain_atari_loops_network_is_the_recipes():
    """``reference.pqn.LayerNormNatureQ`` computes the recipe's Atari Q-network (Nature CNN with
    a LayerNorm before every ReLU): with the recipe's weights, the same Q-values in float64."""
    spec = {"obs_key": "pixels", "obs_shape": (4, 84, 84), "num_actions": 4}
    cfg = PQNRunConfig()
    torch.manual_seed(0)
    with float64():
        agent = ALGORITHM.make_agent(cfg, spec, torch.device("cpu"))
        net = plain.LayerNormNatureQ(4)
    with torch.no_grad():
        for mine, theirs in zip(agent.q_network.parameters(), net.parameters(), strict=True):
            assert mine.shape == theirs.shape
            theirs.copy_(mine)
    frames = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(net(frames), agent.q_network(frames), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_the_plain_atari_loop_runs_batches_and_resumes_from_its_checkpoint(tmp_path):
    """``plain_pqn_atari`` on Breakout's simulators: two batches, a checkpoint, then the third
    batch resumed from it (its frames go on from the checkpoint's)."""
    from benchmarks.learning import atari_config
    from reference.atari import Checkpoint

    flags = ["--env.num-envs", "4", "--collector.steps-per-batch", "32", "--pqn.minibatches", "2"]
    cfg = atari_config("pqn", "Breakout", 2_000, seed=0, extra=flags)
    path = tmp_path / "plain.pt"
    records = plain.plain_pqn_atari(cfg, 2, checkpoint=Checkpoint(path, 1, str(cfg), False))
    assert [f for f, _ in records] == [128, 256]  # 4 envs x 8 steps x frameskip 4
    saved = torch.load(path, weights_only=True)
    resumed = plain.plain_pqn_atari(cfg, 3, checkpoint=Checkpoint(path, 1, str(cfg), True))
    assert [f for f, _ in resumed] == [384]
    assert saved["frames"] == 256 and torch.load(path, weights_only=True)["frames"] == 384
