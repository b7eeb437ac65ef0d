"""``--compile.loss``: the compiled loss gives the eager loss and gradients on a fixed batch;
``--compile.policy``: the compiled acting policy follows weight syncs; a compiled run checkpoints
and resumes like an eager one. Compilation takes tens of seconds per
graph on 2 CPU cores, hence slow."""

import copy

import pytest
import torch

from accelrl.algos.a2c import A2C, A2CConfig
from accelrl.algos.common import advantages, total_loss
from accelrl.algos.dqn import DQN
from accelrl.algos.ppo import PPO, PPOConfig
from accelrl.config import CompileConfig
from tests.helpers import grads
from tests.numerics import TIGHT, float64
from tests.test_dqn_math import fixed_batch, make_dqn
from tests.test_ppo import cartpole_rollout

pytestmark = pytest.mark.slow

# Compiled kernels sum in other orders than eager ones (fusion): the comparisons run in float64
# (tests.numerics), where that leaves ~1e-15 on any host, so TIGHT holds everywhere.
TOL = TIGHT


@pytest.mark.numerics
@pytest.mark.parametrize("learner", ["ppo", "a2c"])
def test_compiled_actor_critic_loss_and_gradients_equal_eager(learner):
    model, batch = cartpole_rollout(64)
    model = model.double()
    batch = batch.apply(lambda x: x.double() if x.is_floating_point() else x)
    make = {
        "ppo": lambda m, c: PPO(m, PPOConfig(), torch.device("cpu"), compile_loss=c),
        "a2c": lambda m, c: A2C(m, A2CConfig(), torch.device("cpu"), compile_loss=c),
    }[learner]
    with float64():
        eager, compiled = make(model, False), make(copy.deepcopy(model), True)
    flat = advantages(
        batch.clone(), eager.critic, eager.estimator, device=torch.device("cpu"), life_loss=False
    )
    results = []
    for agent in (eager, compiled):
        agent.optimizer.zero_grad()
        out = agent.objective(flat.clone())
        total = total_loss(out)
        total.backward()
        results.append((out, total.detach(), grads(agent.params)))
    (out_e, total_e, grads_e), (out_c, total_c, grads_c) = results
    torch.testing.assert_close(total_c, total_e, **TOL)
    for key in ("loss_objective", "loss_critic"):
        torch.testing.assert_close(out_c[key], out_e[key], **TOL)
    for g_c, g_e in zip(grads_c, grads_e, strict=True):
        torch.testing.assert_close(g_c, g_e, **TOL)


@pytest.mark.numerics
def test_compiled_dqn_loss_priorities_and_gradients_equal_eager():
    def make(compile_loss: bool) -> DQN:
        return make_dqn(double=True, prioritized=True, compile_loss=compile_loss)

    eager, compiled = make(False), make(True)
    results = []
    for agent in (eager, compiled):
        agent.optimizer.zero_grad()
        loss, priority = agent.objective(fixed_batch(weight=True))
        loss.backward()
        results.append((loss.detach(), priority, grads(agent.params)))
    (loss_e, prio_e, grads_e), (loss_c, prio_c, grads_c) = results
    torch.testing.assert_close(loss_c, loss_e, **TOL)
    torch.testing.assert_close(prio_c, prio_e, **TOL)
    for g_c, g_e in zip(grads_c, grads_e, strict=True):
        torch.testing.assert_close(g_c, g_e, **TOL)


def test_compiled_run_checkpoints_and_resumes(tmp_path):
    """A run with a compiled loss checkpoints; its resumption, with the acting policy compiled
    instead, continues from it (the compile flags hold no state: each may change at a resume).
    One compiled graph per run: each takes minutes to compile on 2 loaded cores."""
    from recipes.ppo_atari import Config, train

    cfg = Config(total_frames=512, run_dir=str(tmp_path / "run"))
    cfg.env.game, cfg.env.num_envs = "CartPole-v1", 4
    cfg.collector.steps_per_batch = 128
    cfg.ppo = PPOConfig(epochs=2, minibatches=2)
    cfg.compile.loss = True
    cfg.log.progress, cfg.log.tensorboard, cfg.log.eval_episodes = False, False, 0
    cfg.log.checkpoint_every_frames = 256
    first = train(cfg)
    assert first["frames"] == 512 and first["updates"] == 4
    cfg.total_frames, cfg.resume = 768, True
    cfg.compile.loss, cfg.compile.policy = False, True
    resumed = train(cfg)
    assert resumed["frames"] == 768 and resumed["updates"] == 6


@pytest.mark.parametrize("num_workers", [0, 1])
def test_compiled_policy_acts_with_the_learners_latest_weights(num_workers):
    """``--compile.policy``: the collector acts through a compiled forward pass, and that pass
    follows the learner's weights after each sync (a compiled copy holding the first weights
    would act with the initial policy for the whole run)."""
    from accelrl.models import make_actor_critic
    from tests.test_collect import cartpole_collector, force_action

    model = make_actor_critic("observation", (4,), 2)
    compiled = CompileConfig(policy=True)
    collector = cartpole_collector(model, num_workers, steps_per_batch=32, compile_cfg=compiled)
    try:
        assert collector.compiled_policy
        batches = iter(collector)
        assert set(next(batches)["action"].unique().tolist()) == {0, 1}
        for action in (1, 0):
            force_action(model, action)
            collector.update_policy_weights_()
            next(batches)  # a worker may have collected it before the sync
            assert (next(batches)["action"] == action).all()
    finally:
        collector.shutdown()
