"""The acting network as a CUDA graph (``accelrl.collectors.graphs``, ``--compile.cudagraphs``).

On a CPU: the buffers around the graph and the choice, with an eager stand-in for the capture
(a replay that runs the network on the static buffer and hands back the same static output
tensors each time, as a CUDA graph does). On a GPU (marked ``gpu``): the capture itself gives
eager's actions for the same generator state, the lean rollout with it yields TorchRL's
batches, and a run resumes across eager and the graph.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from accelrl.collectors import graphs
from accelrl.collectors.graphs import ActingGraph, Choice, choose
from accelrl.models import acting_policy, make_actor_critic

CPU_RNG = (torch.get_rng_state, torch.set_rng_state)


@pytest.fixture(autouse=True)
def sampling():
    """Actions drawn, as in collection (outside it the acting network takes the argmax)."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    with set_exploration_type(ExplorationType.RANDOM):
        yield


def acting_net() -> nn.Module:
    """PPO's acting network (trunk, heads, a Categorical draw) on CartPole's observations."""
    torch.manual_seed(0)
    return acting_policy(make_actor_critic("observation", (4,), 2)).module


def static_replay(net: nn.Module, static_obs: torch.Tensor):
    """A capture stand-in: each replay runs ``net`` on the static buffer and writes into the
    same output tensors, which it hands back (a CUDA graph's replay overwrites them too)."""
    outputs = [t.clone() for t in net(static_obs)]

    def replay():
        with torch.no_grad():
            for out, new in zip(outputs, net(static_obs), strict=True):
                out.copy_(new)
        return tuple(outputs)

    return replay


def test_graph_outputs_outlive_the_next_replay():
    """Each call's outputs are the caller's: the next replay overwrites the static outputs,
    not what an earlier call returned (the lean rollout keeps a batch's outputs to stack)."""
    net = acting_net()
    obs = torch.randn(8, 4)
    graph = ActingGraph(net, obs, capture=static_replay)
    with torch.no_grad():
        first = graph(obs)
        kept = [t.clone() for t in first]
        graph(obs * 3)
    for a, b in zip(first, kept, strict=True):
        assert torch.equal(a, b)


def test_graph_reads_each_observation_and_runs_other_shapes_eagerly():
    net = acting_net()
    torch.manual_seed(1)
    graph = ActingGraph(net, torch.zeros(8, 4), capture=static_replay)
    obs = torch.randn(8, 4)
    with torch.no_grad():
        state = torch.get_rng_state()
        got = graph(obs)
        torch.set_rng_state(state)
        want = net(obs)
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b)
        assert graph(torch.randn(3, 4))[0].shape == (3,)  # another batch: eager


def test_auto_keeps_eager_when_the_graph_differs_and_the_generator_is_put_back():
    """``auto`` compares the graph with eager from one generator state before timing; a graph
    that gives other outputs is not used, and the generator ends where it started."""

    def shifted(net, static_obs):
        replay = static_replay(net, static_obs)
        return lambda: tuple(t + 1 for t in replay())

    net, obs = acting_net(), torch.randn(8, 4)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    choice = choose(net, obs, "auto", capture=shifted, rng=CPU_RNG, sync=lambda: None)
    assert not choice.graph and "differ" in choice.reason
    assert torch.equal(torch.get_rng_state(), before)


def test_auto_with_an_equal_graph_chooses_by_time_and_puts_the_generator_back(monkeypatch):
    """An equal graph is kept when it is faster and not when it is not (times injected: a
    test never depends on timings); the probe's draws are undone either way."""
    net, obs = acting_net(), torch.randn(8, 4)
    for eager_s, graph_s, kept in ((2e-4, 1e-4, True), (1e-4, 2e-4, False)):
        times = iter([eager_s, graph_s])
        monkeypatch.setattr(graphs, "_seconds_per_step", lambda *args, t=times: next(t))
        torch.manual_seed(5)
        before = torch.get_rng_state()
        choice = choose(net, obs, "auto", capture=static_replay, rng=CPU_RNG, sync=lambda: None)
        assert choice.graph is kept
        assert ("200 us" in choice.reason) and ("100 us" in choice.reason)
        assert torch.equal(torch.get_rng_state(), before)


def test_on_raises_a_failed_capture_and_auto_falls_back():
    def broken(net, static_obs):
        raise RuntimeError("operation not permitted when stream is capturing")

    net, obs = acting_net(), torch.randn(8, 4)
    with pytest.raises(RuntimeError, match="--compile.cudagraphs on: capture failed"):
        choose(net, obs, "on", capture=broken, rng=CPU_RNG, sync=lambda: None)
    choice = choose(net, obs, "auto", capture=broken, rng=CPU_RNG, sync=lambda: None)
    assert not choice.graph and "capture failed" in choice.reason
    assert isinstance(choose(net, obs, "off"), Choice) and not choose(net, obs, "off").graph


def test_lean_collector_on_a_cpu_acts_eagerly_and_on_asks_for_a_gpu(caplog):
    """On a CPU the default ``auto`` never captures (the rollout line says nothing of graphs);
    ``on`` is refused in one line when the lean rollout cannot capture (validation refuses it
    before on a CPU host: ``tests/test_bad_input.py``)."""
    from accelrl.collectors import LeanCollector
    from accelrl.config import EnvConfig
    from accelrl.envs import make_env

    policy = acting_policy(make_actor_critic("observation", (4,), 2))
    for mode in ("auto", "on"):
        env = make_env(EnvConfig(game="Null/CartPole", num_envs=4), seed=0)
        collector = LeanCollector(
            env, policy, frames_per_batch=40, total_frames=-1, track_traj_ids=False,
            acting_graph=mode,
        )  # fmt: skip
        try:
            batches = iter(collector)
            if mode == "on":
                with pytest.raises(RuntimeError, match="--compile.cudagraphs on"):
                    next(batches)
                continue
            with caplog.at_level(logging.INFO, logger="accelrl"):
                for _ in range(2):
                    next(batches)
            assert collector.lean and collector._act is not None
            assert "graph" not in collector.rollout_line()
        finally:
            collector.shutdown()


# --- on a GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("obs_shape", [(4,), (4, 84, 84)], ids=["cartpole", "atari"])
def test_captured_acting_step_gives_eagers_actions(obs_shape):
    """The same generator state gives the same actions, log-probs and values, step after step
    (the graph's draws advance the generator as eager's do)."""
    torch.manual_seed(0)
    net = acting_policy(make_actor_critic("observation", obs_shape, 6)).module.cuda()
    dtype = torch.uint8 if len(obs_shape) == 3 else torch.float32
    batch = [torch.randint(0, 255, (16, *obs_shape)).to("cuda", dtype) for _ in range(5)]
    graph = ActingGraph(net, batch[0])
    torch.cuda.manual_seed(7)
    with torch.no_grad():
        want = [net(obs) for obs in batch]
        torch.cuda.manual_seed(7)
        got = [graph(obs) for obs in batch]
    for w, g in zip(want, got, strict=True):
        for a, b in zip(w, g, strict=True):
            assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", ["on", "auto"])
def test_lean_collector_with_the_graph_equals_torchrls(mode):
    """The lean rollout acting through the graph yields TorchRL's batches (same seeds)."""
    from torchrl.collectors import Collector

    from accelrl.collectors import LeanCollector
    from tests.test_collect import first_batches

    args = dict(game="Null/Atari", kind="ppo", rows=8, steps=20, count=3, device="cuda")
    expected, _ = first_batches(Collector, **args)

    class Graphed(LeanCollector):
        def __init__(self, *a, **kw):
            super().__init__(*a, acting_graph=mode, **kw)

    found, lean = first_batches(Graphed, **args)
    assert lean
    for want, got in zip(expected, found, strict=True):
        for key in want.keys(True, True):
            assert torch.equal(want.get(key), got.get(key)), key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_run_resumes_across_the_graph_and_eager(tmp_path, caplog):
    """A run acting through the graph checkpoints; its resumption acting eagerly continues it
    (the graph holds no state), and the log names the graph."""
    from accelrl.algos.ppo import PPOConfig
    from recipes.ppo_atari import Config, train

    cfg = Config(total_frames=512, run_dir=str(tmp_path / "run"), device="cuda")
    cfg.env.game, cfg.env.num_envs = "CartPole-v1", 4
    cfg.collector.steps_per_batch = 128
    cfg.ppo = PPOConfig(epochs=2, minibatches=2)
    cfg.compile.cudagraphs = "on"
    cfg.log.progress, cfg.log.tensorboard, cfg.log.eval_episodes = False, False, 0
    cfg.log.checkpoint_every_frames = 256
    with caplog.at_level(logging.INFO, logger="accelrl"):
        first = train(cfg)
    assert first["frames"] == 512
    assert any("as a CUDA graph" in r.getMessage() for r in caplog.records)
    cfg.total_frames, cfg.resume, cfg.compile.cudagraphs = 768, True, "off"
    resumed = train(cfg)
    assert resumed["frames"] == 768 and resumed["updates"] == 6
