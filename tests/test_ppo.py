"""PPO's pieces and proof that it learns."""

import math

import pytest
import torch
from tensordict import TensorDict

from accelrl.algos.common import fill_values, mark_boundaries
from accelrl.algos.ppo import PPO, PPOConfig
from accelrl.config import EnvConfig
from accelrl.envs import make_env
from accelrl.models import make_actor_critic
from recipes.ppo_atari import ALGORITHM, Config, train
from reference.atari_actor_critic import ppo_phase
from tests import bf16_parity, plain_parity
from tests.helpers import cartpole_recipe_config, print_cartpole_result


def cartpole_rollout(steps: int = 120):
    torch.manual_seed(0)
    env = make_env(EnvConfig(game="CartPole-v1", num_envs=4), seed=0)
    model = make_actor_critic("observation", (4,), 2)
    with torch.no_grad():
        batch = env.rollout(steps, model, break_when_any_done=False)
    env.close()
    return model, batch


@pytest.mark.numerics
def test_values_from_collection_equal_a_full_critic_pass():
    model, batch = cartpole_rollout()
    assert batch["next", "done"].any(), "need episode ends in the batch"
    fill_values(batch, model.get_value_operator())
    reference = model.get_value_operator()(batch["next"].exclude("state_value").copy())
    # Float32; different batch sizes take different matmul blockings. A value is two 64-wide
    # layers of a 4-input MLP: reordered float32 sums of 64 terms differ by at most
    # 64 * 2**-24 (4e-6) of their absolute sum, values and sums of order 1: atol 1e-5.
    torch.testing.assert_close(
        batch["next", "state_value"], reference["state_value"], rtol=1e-4, atol=1e-5
    )


def test_life_loss_is_a_bootstrap_boundary_but_not_an_episode_end():
    false = torch.zeros(1, 3, 1, dtype=torch.bool)
    lost = false.clone()
    lost[0, 1] = True
    batch = TensorDict(
        {"next": {"done": false, "terminated": false.clone(), "life_lost": lost}}, [1, 3]
    )
    mark_boundaries(batch, life_loss=True)
    assert batch["next", "gae_terminated"][0, :, 0].tolist() == [False, True, False]
    assert batch["next", "gae_done"][0, :, 0].tolist() == [False, True, False]
    assert not batch["next", "done"].any()
    mark_boundaries(batch, life_loss=False)
    assert not batch["next", "gae_terminated"].any()


def test_lr_and_clip_anneal_linearly_to_zero():
    model = make_actor_critic("observation", (4,), 2)
    ppo = PPO(model, PPOConfig(lr=1e-3, clip_epsilon=0.2), torch.device("cpu"))
    assert ppo.schedule(0.0) == pytest.approx((1e-3, 0.2))
    assert ppo.schedule(0.5) == pytest.approx((5e-4, 0.1))
    lr, clip = ppo.schedule(1.0)
    assert lr == 0.0 and clip < 1e-6
    fixed = PPO(model, PPOConfig(anneal_lr=False, anneal_clip=False), torch.device("cpu"))
    assert fixed.schedule(0.9) == pytest.approx((2.5e-4, 0.1))


def test_update_changes_weights_and_reports_every_metric():
    model, batch = cartpole_rollout(64)
    ppo = PPO(model, PPOConfig(minibatches=4), torch.device("cpu"))
    before = [p.detach().clone() for p in model.parameters()]
    metrics = ppo.update(batch, progress=0.0)
    for key in [
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "train/entropy",
        "train/kl_approx",
        "train/clip_fraction",
        "train/explained_variance",
        "train/grad_norm",
        "train/lr",
        "train/clip_epsilon",
    ]:
        assert key in metrics and math.isfinite(metrics[key]), key
    changed = [not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)]
    assert all(changed), "every parameter (trunk included) must receive gradients"


def test_minibatches_carry_only_what_the_loss_reads():
    # The next observations (as large as the observations: uint8 frames on Atari) are not
    # read by the loss once advantages are computed; gathering them doubled each copy.
    model, batch = cartpole_rollout(64)
    ppo = PPO(model, PPOConfig(minibatches=4, epochs=1), torch.device("cpu"))
    seen, objective = [], ppo.objective

    def spy(minibatch):
        seen.append(set(minibatch.keys(True, True)))
        return objective(minibatch)

    ppo.objective = spy
    ppo.update(batch, progress=0.0)
    assert len(seen) == 4
    expected = {"observation", "action", "action_log_prob", "advantage", "value_target"}
    assert all(keys == expected | {"state_value"} for keys in seen), seen[0]


@pytest.mark.slow
def test_ppo_learns_cartpole(tmp_path, capsys):
    # Seeds 0, 1, 2 at 150k steps all reached a last-100 mean of 500 (the maximum) and greedy
    # evaluation returns of 500; at 100k steps two seeds stopped at 441 and 444 (with a
    # shared actor-critic MLP), hence the budget.
    summary = train(cartpole_recipe_config(Config, "ppo", tmp_path / "run", eval_episodes=4))
    print_cartpole_result(capsys, "ppo seed 0", summary)
    assert summary["frames"] >= 150_000
    assert summary["mean_return_100"] >= 450, summary
    assert summary["eval/greedy_return"] >= 450, summary


@pytest.mark.numerics
@pytest.mark.parametrize("lr,clips", [(1e-2, "ratios"), (2.5e-4, "values")])
def test_an_atari_update_matches_the_plain_loop_on_the_same_batch(lr, clips):
    """By construction: the recipe's PPO phase and the plain loop's (reference.atari_actor_critic:
    ``Rollout.advantages`` and ``ppo_phase``) on one Breakout batch with a lost life, a game
    over and a truncation, from the same weights, at 80% of the schedule (learning rate and
    clip range at a fifth), give the same weights and metrics after four epochs of one
    minibatch (both see the same samples). At 40x the default learning rate the later epochs
    clip ratios; at the default one, values (a value clip left at the initial range moves the
    weights by 2e-4). Both run in float64 (tests/plain_parity.py says why)."""
    torch.manual_seed(0)
    cfg = Config()
    cfg.ppo.epochs, cfg.ppo.minibatches, cfg.ppo.lr = 4, 1, lr
    ppo, batch, plain, ours = plain_parity.recipe_and_plain(ALGORITHM.make_agent, cfg, steps=8)
    p = cfg.ppo
    opt = torch.optim.Adam(plain.parameters(), lr=p.lr * 0.2, eps=p.adam_eps)
    view = plain_parity.plain_view(batch, plain, p)
    stats = ppo_phase(plain, opt, view, p, p.clip_epsilon * 0.2) / p.epochs
    kl, clipped, grad_norm = stats.tolist()

    metrics = ppo.update(batch, progress=0.8)
    assert metrics["train/clip_epsilon"] == pytest.approx(p.clip_epsilon * 0.2)
    if clips == "ratios":
        assert metrics["train/clip_fraction"] > 0, "the test should exercise clipping"
    assert metrics["train/clip_fraction"] == pytest.approx(clipped, abs=1e-9)
    # kl_approx differs by definition: TorchRL's is mean(log pi_old - log pi), the plain loop's
    # mean((r - 1) - log r); both are only logged.
    assert metrics["train/grad_norm"] == pytest.approx(grad_norm, rel=plain_parity.TOL["rtol"])
    for mine, theirs in zip(ours, plain.parameters(), strict=True):
        assert mine.dtype == torch.float64
        torch.testing.assert_close(mine, theirs, **plain_parity.TOL)


@pytest.mark.numerics
def test_a_bf16_step_matches_the_plain_loop_within_bf16_rounding():
    """A PPO step (one epoch of one minibatch: ratio, clips, value clip, entropy, advantage
    standardisation) with ``--precision.learner bf16``: the learner's forward pass and every
    clipped gradient are within bf16's bounds of the float64 plain loop's (tests/bf16_parity.py
    derives them) and visibly not fp32's. Gradients, not weights, are compared: Adam divides
    each gradient element by its own size, so an element that cancels to ~0 moves its weight by
    a full step in either direction (the float64 parity test covers the later epochs). Left in
    bf16, the loss's log-probs miss their bound; with autocast left off, the gradients are
    fp32's."""
    torch.manual_seed(0)
    cfg = Config()
    cfg.ppo.epochs, cfg.ppo.minibatches = 1, 1
    cfg.precision.learner = "bf16"
    ppo, batch, wide, plain, ours = bf16_parity.recipe_and_plain(ALGORITHM.make_agent, cfg, steps=8)
    bf16_parity.check_forward(ppo, batch, plain)
    p = cfg.ppo
    opt = torch.optim.Adam(plain.parameters(), lr=p.lr * 0.2, eps=p.adam_eps)
    view = plain_parity.plain_view(wide, plain, p)
    grad_norm = float(ppo_phase(plain, opt, view, p, p.clip_epsilon * 0.2)[2])

    metrics = ppo.update(batch, progress=0.8)
    assert metrics["train/grad_norm"] == pytest.approx(grad_norm, rel=bf16_parity.GRAD_RTOL)
    errors = bf16_parity.gradient_errors(ours, plain)
    assert all(mine.dtype == torch.float32 for mine in ours), "master weights stay fp32"
    assert max(errors) <= bf16_parity.GRAD_RTOL, errors
    assert errors[0] >= bf16_parity.TRUNK_RAN, f"first conv within 4u of float64: {errors}"
