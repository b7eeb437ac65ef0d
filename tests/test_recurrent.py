"""``--model.recurrent lstm`` and ``gru``: the recurrent actor-critic's state is reset at every
episode start, carried from step to step and from batch to batch, recomputed for the updates
from each sequence's stored first state, stepped by evaluation and play, and its PPO and A2C
updates are the plain LSTM or GRU loop's (reference.recurrent). The tests that a core can
change run for every core of ``accelrl.recurrent.CORES``."""

import functools

import pytest
import torch
from tensordict.nn import InteractionType, TensorDictModuleBase, set_interaction_type
from torchrl.modules import set_recurrent_mode

from accelrl.collectors import make_collector, plan_threads
from accelrl.config import CollectorConfig, EnvConfig, ThreadsConfig
from accelrl.recurrent import CORES, core_of
from accelrl.run.evaluate import play_env, play_episode, run_episodes
from accelrl.validate import ConfigError
from recipes import a2c_atari, appo_atari, dqn_atari, ppo_atari
from reference.atari_actor_critic import Rollout
from reference.common import clipped_step
from reference.recurrent import (
    GRUActorCritic,
    LSTMActorCritic,
    a2c_sequence_loss,
    ppo_sequence_phase,
)
from tests import plain_parity
from tests.helpers import cartpole_recipe_config
from tests.numerics import float64

CARTPOLE = {"obs_key": "observation", "obs_shape": (4,), "num_actions": 2}
each_core = pytest.mark.parametrize("core", list(CORES))
PLAIN = {"lstm": LSTMActorCritic, "gru": GRUActorCritic}
"""Each core's plain network (reference.recurrent)."""


def recurrent_config(recipe=ppo_atari, lstm_hidden: int = 16, core: str = "lstm"):
    cfg = recipe.Config()
    cfg.env.game, cfg.env.num_envs = "CartPole-v1", 4
    cfg.model.recurrent, cfg.model.lstm_hidden = core, lstm_hidden
    return cfg


def agent_for(recipe=ppo_atari, spec=CARTPOLE, lstm_hidden: int = 16, core: str = "lstm"):
    torch.manual_seed(0)
    cfg = recurrent_config(recipe, lstm_hidden, core)
    return recipe.ALGORITHM.make_agent(cfg, spec, torch.device("cpu"))


def state_keys(agent) -> tuple[str, ...]:
    """The agent's state keys, as its core names them."""
    return core_of(agent.core).state_keys


def batches(
    agent,
    count: int = 2,
    envs: int = 4,
    steps: int = 40,
    game: str = "CartPole-v1",
    kind: str = "sync",
    workers: int = 0,
):
    """``count`` consecutive batches of a collector of ``kind`` (``[envs, T]``; sync with
    ``workers``: ``[workers, envs, T]``; batched: ``[workers x envs, T]``)."""
    per_batch = envs * steps * (workers if kind in ("sync", "batched") and workers else 1)
    collector = make_collector(
        EnvConfig(game=game, num_envs=envs),
        CollectorConfig(kind=kind, num_workers=workers, steps_per_batch=per_batch),
        agent.collect_policy,
        seed=0,
        plan=plan_threads(ThreadsConfig(), workers),
        learner_device="cpu",
        state=agent.initial_state(1),
    )
    out = []
    try:
        for batch in collector:
            out.append(batch.reshape(-1, batch.shape[-1]))
            if len(out) == count:
                return out
    finally:
        collector.shutdown()


# Every way of collecting: in process, in worker processes (TorchRL's MultiSyncCollector and
# MultiAsyncCollector; the batched inference server's simulators), and the alternating groups.
KINDS = {
    "in-process": ("sync", 0),
    "sync-workers": ("sync", 2),
    "async-workers": ("async", 2),
    "alternating": ("alternating", 0),
    "batched-workers": ("batched", 2),
}


@functools.cache
def collected(kind: str, core: str = "lstm"):
    """An agent with ``core`` and the batches (rows ``[simulators, T]``) it collected with
    ``kind``: two, or four from the two asynchronous workers."""
    agent = agent_for(core=core)
    count = 4 if kind == "async-workers" else 2
    return agent, batches(agent, count, kind=KINDS[kind][0], workers=KINDS[kind][1])


def test_off_by_default_and_feed_forward_has_no_state():
    assert ppo_atari.Config().model.recurrent == "none"
    torch.manual_seed(0)
    ff = ppo_atari.ALGORITHM.make_agent(ppo_atari.Config(), CARTPOLE, torch.device("cpu"))
    assert ff.initial_state(4) is None and ff.core is None


@each_core
def test_initial_state_is_zeros_of_the_state_keys(core):
    state = agent_for(core=core).initial_state(3)
    assert set(state.keys()) == set(CORES[core].state_keys)
    for key in CORES[core].state_keys:
        assert state[key].shape == (3, 1, 16) and not state[key].any()


@each_core
@pytest.mark.parametrize("kind", KINDS)
def test_the_state_starts_from_zeros_at_every_episode_start_and_only_there(kind, core):
    agent, out = collected(kind, core)
    first = out[0]
    for batch in out:
        starts = batch["is_init"].squeeze(-1)
        done = batch["next", "done"].squeeze(-1)
        assert done[:, :-1].any(), "need episodes that end (and auto-reset) mid-batch"
        # An episode starts on the step after one ended, auto-resets included.
        assert torch.equal(starts[:, 1:], done[:, :-1])
        for key in state_keys(agent):
            state = batch[key]
            assert not state[starts].any(), "an episode's first step acts from zeros"
            assert state[~starts].abs().sum(-1).gt(0).all(), "later steps carry a state"
            # Carried: each step acts from the state the step before wrote.
            carried = ~starts[:, 1:]
            assert torch.equal(state[:, 1:][carried], batch["next", key][:, :-1][carried])
    assert first["is_init"][:, 0].all(), "the first batch starts every episode"


@each_core
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "async-workers"])
def test_the_state_carries_from_one_batch_to_the_next(kind, core):
    agent, (first, second) = collected(kind, core)
    start = second["is_init"][:, 0].squeeze(-1)
    # A new episode starts a batch only where the last one ended on its final step.
    assert torch.equal(start, first["next", "done"][:, -1].squeeze(-1))
    assert (~start).any()
    for key in state_keys(agent):
        assert torch.equal(second[key][:, 0][~start], first["next", key][:, -1][~start])
        assert not second[key][:, 0][start].any()


@each_core
def test_each_async_worker_carries_its_own_state_from_batch_to_batch(core):
    """Asynchronous batches come from whichever worker is ready: each worker's first batch
    starts every episode, and every later batch goes on from the state some earlier batch (its
    worker's last) ended with, never from another's."""
    agent, out = collected("async-workers", core)
    fresh = [b for b in out if b["is_init"][:, 0].all()]
    assert len(fresh) == 2, "one first batch per worker"
    for i, batch in enumerate(out):
        start = batch["is_init"][:, 0].squeeze(-1)
        if start.all():
            continue
        key = state_keys(agent)[0]
        ends = [b for b in out[:i] if torch.equal(batch[key][:, 0][~start],
                                                  b["next", key][:, -1][~start])]  # fmt: skip
        assert len(ends) == 1, f"batch {i} goes on from no earlier batch's end state"
        assert torch.equal(start, ends[0]["next", "done"][:, -1].squeeze(-1))
        for key in state_keys(agent):
            assert torch.equal(batch[key][:, 0][~start], ends[0]["next", key][:, -1][~start])


@each_core
def test_a_lost_life_does_not_restart_the_state(core):
    spec = {"obs_key": "pixels", "obs_shape": (4, 84, 84), "num_actions": 4}
    (batch,) = batches(agent_for(spec=spec, lstm_hidden=8, core=core), count=1, envs=2,
                       steps=250, game="Breakout")  # fmt: skip
    lost = batch["next", "life_lost"].squeeze(-1)[:, :-1]
    assert lost.any(), "need a lost life in the batch"
    assert not batch["is_init"].squeeze(-1)[:, 1:][lost].any()


def recompute(agent, batch):
    """The actor-critic over ``batch``'s whole sequences, as the updates run it."""
    inputs = batch.select(agent.model[0].in_keys[0], *state_keys(agent), "is_init")
    with torch.no_grad(), set_recurrent_mode(True):
        out = agent.model(inputs)
    dist = torch.distributions.Categorical(logits=out["logits"])
    return dist.log_prob(batch["action"]), out


@each_core
@pytest.mark.parametrize("kind", KINDS)
def test_sequences_recomputed_from_the_stored_first_state_reproduce_collection(kind, core):
    agent, out = collected(kind, core)
    # A batch that starts from a carried state (an async worker's first batch does not).
    batch = next(b for b in out[1:] if b[state_keys(agent)[0]][:, 0].any())
    log_prob, out = recompute(agent, batch)
    torch.testing.assert_close(out["state_value"], batch["state_value"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(log_prob, batch["action_log_prob"], rtol=1e-5, atol=1e-6)


@each_core
def test_ppo_minibatches_are_whole_simulators_in_time_order(core):
    agent = agent_for(core=core)
    agent.cfg.minibatches, agent.cfg.epochs = 2, 1
    _, batch = batches(agent)
    seen, objective = [], agent.objective

    def spy(minibatch):
        seen.append(minibatch.clone())
        return objective(minibatch)

    agent.objective = spy
    metrics = agent.update(batch.clone(), progress=0.0)
    assert len(seen) == 2 and all(mb.shape == (2, 40) for mb in seen)
    obs = batch["observation"]
    rows = sorted(
        next(i for i in range(4) if torch.equal(obs[i], row))
        for mb in seen
        for row in mb["observation"]
    )
    assert rows == [0, 1, 2, 3]
    assert metrics["train/clip_fraction"] >= 0
    assert {"is_init", *state_keys(agent)} <= set(seen[0].keys())


@each_core
def test_a2c_steps_on_the_whole_batch_of_sequences(core):
    agent = agent_for(a2c_atari, core=core)
    _, batch = batches(agent)
    seen, objective = [], agent.objective
    agent.objective = lambda mb: seen.append(mb.shape) or objective(mb)
    before = [p.detach().clone() for p in agent.model.parameters()]
    agent.update(batch, progress=0.0)
    assert seen == [torch.Size([4, 40])]
    assert all(not torch.equal(a, b) for a, b in zip(before, agent.model.parameters(), strict=True))


class Recorder(TensorDictModuleBase):
    """The policy, recording the state (its ``key``) and ``is_init`` each call acts from."""

    def __init__(self, policy, key):
        super().__init__()
        self.policy, self.in_keys, self.out_keys = policy, policy.in_keys, policy.out_keys
        self.key, self.calls = key, []

    def forward(self, td):
        self.calls.append((td["is_init"].clone(), td[self.key].clone()))
        return self.policy(td)


def check_stepped(calls):
    first_init, first_state = calls[0]
    assert first_init.all() and not first_state.any()
    later = [state for init, state in calls[1:] if not init.any()]
    assert later and all(state.abs().sum(-1).gt(0).all() for state in later)
    for (_, _), (init, state) in zip(calls, calls[1:], strict=False):
        assert not state[init.squeeze(-1)].any()


@each_core
def test_evaluation_steps_each_simulators_state(core):
    agent = agent_for(core=core)
    policy = Recorder(agent.eval_policy, state_keys(agent)[0])
    episodes = run_episodes(EnvConfig(game="CartPole-v1"), policy, episodes=2, seed=0,
                            device=torch.device("cpu"), greedy=False,
                            state=agent.initial_state(1))  # fmt: skip
    assert len(episodes.returns) == 2 and len(policy.calls) > 5
    check_stepped(policy.calls)


@each_core
def test_play_steps_the_state(core):
    from accelrl.envs import backend_for

    agent = agent_for(core=core)
    policy = Recorder(agent.eval_policy, state_keys(agent)[0])
    env_cfg = EnvConfig(game="CartPole-v1")
    env = play_env(backend_for(env_cfg), env_cfg, 0, agent.initial_state(1))
    try:
        with set_interaction_type(InteractionType.RANDOM):
            episode = play_episode(env, policy, torch.device("cpu"))
    finally:
        env.close()
    assert episode.steps == len(policy.calls) > 5
    check_stepped(policy.calls)


def eval_actions(agent, obs, starts):
    """The eval policy's greedy actions ``[T, B]`` on ``obs`` ``[T, B, 4]``, stepping its state
    as evaluation does: ``is_init`` where ``starts`` ``[T, B]`` is set, the state the step before
    wrote elsewhere."""
    state = agent.initial_state(obs.shape[1])
    actions = []
    with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
        for t in range(obs.shape[0]):
            td = state.clone().update({"observation": obs[t], "is_init": starts[t, :, None]})
            out = agent.eval_policy(td)
            actions.append(out["action"])
            state = out["next"].select(*state_keys(agent))
    return torch.stack(actions)


def exported_actions(step, obs, starts, state, reset=True):
    """An exported ``step`` ``(obs, *state) -> (action, *state)`` over ``obs`` ``[T, B, 4]``
    with its own ``state`` (a tuple), zeroed by the caller where ``starts`` is set
    (``reset``)."""
    actions = []
    for t in range(obs.shape[0]):
        if reset:
            keep = (~starts[t]).view(-1, 1, 1)
            state = tuple(x * keep for x in state)
        action, *state = step(obs[t], *state)
        actions.append(torch.as_tensor(action))
    return torch.stack(actions)


def onnx_step(path, names):
    """The ONNX file's step, its state inputs named ``names`` (the core's)."""
    ort = pytest.importorskip("onnxruntime")
    onnx_model = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in onnx_model.get_inputs()] == ["obs", *names]
    assert [o.name for o in onnx_model.get_outputs()] == ["action", *(f"{n}_next" for n in names)]

    def step(obs, *state):
        feed = {"obs": obs.numpy()}
        feed.update(
            {name: torch.as_tensor(x).numpy() for name, x in zip(names, state, strict=True)}
        )
        return tuple(torch.from_numpy(x) for x in onnx_model.run(None, feed))

    return step


@each_core
@pytest.mark.parametrize("suffix", [".pt2", ".onnx"])
def test_the_exported_step_with_its_own_state_acts_as_the_eval_policy(tmp_path, suffix, core):
    from accelrl.tools.export import example_inputs, greedy_module, save_module

    if suffix == ".onnx":
        pytest.importorskip("onnxscript")
    agent = agent_for(core=core)
    torch.manual_seed(1)
    with torch.no_grad():  # large weights: greedy actions that vary and depend on the state
        for p in agent.model.parameters():
            p.normal_(0.0, 1.0)
    steps, envs = 16, 8  # traced at batch 2
    obs = torch.randn(steps, envs, 4)
    starts = torch.rand(steps, envs) < 0.2  # episodes starting mid-way, at different steps
    starts[0] = True
    expected = eval_actions(agent, obs, starts)
    assert len(set(expected.flatten().tolist())) > 1, "the check needs actions that differ"

    out = tmp_path / f"policy{suffix}"
    module = greedy_module(agent)
    assert module.state_names == (("h", "c") if core == "lstm" else ("h",))
    save_module(module, example_inputs(agent, recurrent_config(core=core)), out)
    step = (
        torch.export.load(out).module() if suffix == ".pt2" else onnx_step(out, module.state_names)
    )
    state = tuple(agent.initial_state(envs)[key] for key in state_keys(agent))
    assert all(x.shape == (envs, 1, 16) for x in state)
    actions = exported_actions(step, obs, starts, state)
    assert actions.dtype == torch.int64
    assert torch.equal(actions, expected)
    # The state matters: without the resets, or from zeros at every step, the actions differ.
    assert not torch.equal(exported_actions(step, obs, starts, state, reset=False), expected)
    memoryless = torch.stack([step(obs[t], *state)[0] for t in range(steps)])
    assert not torch.equal(torch.as_tensor(memoryless), expected)


@each_core
def test_checkpoints_keep_their_form_and_restore_the_weights(core):
    agent, other = agent_for(core=core), agent_for(core=core)
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(0.5)
    state = agent.state_dict()
    assert set(state) == {"model", "loss", "optimizer"}
    other.load_state_dict(state)
    for a, b in zip(agent.model.parameters(), other.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert any(f".{CORES[core].rnn_name}." in name for name in state["model"])


@pytest.mark.parametrize(
    "change",
    [
        lambda c: setattr(c.env, "async_batch_size", 2),
        lambda c: setattr(c.compile, "loss", True),
        lambda c: setattr(c.ppo, "minibatches", 3),
    ],
)
@each_core
def test_validation_refuses_what_the_state_cannot_yet_go_through(change, core):
    cfg = recurrent_config(core=core)
    cfg.collector.steps_per_batch = 96
    ppo_atari.ALGORITHM.validate(cfg)
    change(cfg)
    with pytest.raises(ConfigError, match="model.recurrent"):
        ppo_atari.ALGORITHM.validate(cfg)


@each_core
def test_dqn_refuses_a_recurrent_model(core):
    cfg = dqn_atari.Config()
    cfg.env.game, cfg.model.recurrent = "CartPole-v1", core
    with pytest.raises(ConfigError, match="actor-critics"):
        dqn_atari.ALGORITHM.validate(cfg)


@pytest.mark.parametrize(
    "recipe,algo,kind,core",
    [
        (ppo_atari, "ppo", "sync", "lstm"),
        (a2c_atari, "a2c", "sync", "lstm"),
        (appo_atari, "appo", "async", "lstm"),  # APPO's own default: two worker processes
        (ppo_atari, "ppo", "alternating", "lstm"),
        (ppo_atari, "ppo", "sync", "gru"),
        (a2c_atari, "a2c", "sync", "gru"),
        (appo_atari, "appo", "async", "gru"),
    ],
)
def test_the_recipes_train_and_evaluate_a_recurrent_agent(tmp_path, recipe, algo, kind, core):
    cfg = cartpole_recipe_config(recipe.Config, algo, tmp_path / "run", eval_episodes=2)
    cfg.model.recurrent, cfg.model.lstm_hidden = core, 16
    cfg.env.num_envs, cfg.collector.steps_per_batch, cfg.total_frames = 4, 128, 256
    cfg.collector.kind, cfg.collector.num_workers = kind, 2 if kind == "async" else 0
    if algo in ("ppo", "appo"):
        getattr(cfg, algo).minibatches = 2
    summary = recipe.train(cfg)
    assert summary["updates"] == 2 and summary["eval/greedy_return"] > 0
    from accelrl.tools.export import ExportConfig, export

    step = torch.export.load(export(ExportConfig(cfg.run_dir, str(tmp_path / "p.pt2")))).module()
    state = [torch.zeros(3, 1, 16) for _ in CORES[core].state_keys]
    action, *state = step(torch.zeros(3, 4), *state)
    assert action.shape == (3,) and [x.shape for x in state] == [(3, 1, 16)] * len(state)


def plain_view(batch, plain, p, keys):
    """What the plain loop reads from ``batch`` (time first): observations, episode starts,
    actions, log-probs, GAE advantages, returns and values (life loss folded into the
    boundaries, as plain_parity.plain_view), and the batch-start state (its ``keys``)."""
    nxt = batch["next"]
    lost = nxt["life_lost"] & ~nxt["done"]

    def time_first(x):
        return x.squeeze(-1).transpose(0, 1).to(torch.float64)

    rollout = Rollout.__new__(Rollout)
    rollout.steps = batch.shape[1]
    rollout.rewards = time_first(nxt["reward"])
    rollout.terms = time_first(nxt["terminated"] | lost)
    rollout.dones = time_first(nxt["done"] | lost)
    rollout.values = time_first(batch["state_value"])
    obs = batch["observation"].transpose(0, 1)
    starts = time_first(batch["is_init"])
    state = tuple(batch[key][:, 0].transpose(0, 1).contiguous() for key in keys)
    with torch.no_grad():
        # Bootstrap values of the next observations: after an episode's last step and after
        # the batch's last step, each from the state the core had reached there.
        _, _, last = plain.unroll(obs, state, starts)
        _, after, _ = plain.unroll(nxt["observation"][:, -1].unsqueeze(0), last,
                                   torch.zeros(1, obs.shape[1]))  # fmt: skip
        rollout.trunc_values = {}
        for t in range(rollout.steps):
            rows = nxt["truncated"].squeeze(-1)[:, t].nonzero().squeeze(-1)
            if len(rows):
                h = tuple(nxt[key][rows, t].transpose(0, 1) for key in keys)
                o = nxt["observation"][rows, t].unsqueeze(0)
                rollout.trunc_values[t] = (
                    rows,
                    plain.unroll(o, h, torch.zeros(1, len(rows)))[1][0],
                )
    adv = rollout.advantages(after[0], p.gamma, p.gae_lambda)
    act = batch["action"].transpose(0, 1)
    collected = (act, time_first(batch["action_log_prob"]), adv, adv + rollout.values,
                 rollout.values)  # fmt: skip
    return (obs, starts, *collected), state


def parity_setup(recipe, cfg):
    """A float64 agent of ``recipe`` and a batch for it (collected in float32 from the same
    weights, then widened: a carried batch-start state, episodes that end mid-batch, and given
    a lost life and a truncation), and the plain actor-critic of its core with its weights."""
    torch.manual_seed(0)
    collecting = recipe.ALGORITHM.make_agent(cfg, CARTPOLE, torch.device("cpu"))
    _, batch = batches(collecting)
    with float64():
        agent = recipe.ALGORITHM.make_agent(cfg, CARTPOLE, torch.device("cpu"))
    agent.model.load_state_dict(collecting.model.state_dict())
    batch = batch.apply(lambda x: x.double() if x.is_floating_point() else x)
    nxt = batch["next"]
    nxt["life_lost"][1, 5] = True
    nxt["done"][2, 7], nxt["truncated"][2, 7] = True, True
    batch["is_init"][2, 8] = True
    for key in state_keys(agent):
        batch[key][2, 8] = 0
    nxt["observation"][2, 7] = nxt["observation"][2, 7].flip(-1)
    plain = PLAIN[cfg.model.recurrent](4, 2, lstm_hidden=16).double()
    assert [p.shape for p in agent.model.parameters()] == [p.shape for p in plain.parameters()]
    with torch.no_grad():
        for mine, theirs in zip(agent.model.parameters(), plain.parameters(), strict=True):
            theirs.copy_(mine)
    return agent, batch, plain


def assert_same_weights(agent, plain):
    for mine, theirs in zip(agent.model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, **plain_parity.TOL)


@each_core
@pytest.mark.numerics
def test_a_recurrent_ppo_update_matches_the_plain_loop_on_the_same_batch(core):
    """By construction, in float64: the recipe's recurrent PPO phase (two epochs of two
    minibatches of two simulators' whole sequences, from a carried batch-start state, with
    episodes that end mid-batch, a lost life and a truncation) and reference.recurrent's
    ``ppo_sequence_phase`` with the plain LSTM or GRU from the same weights give the same
    weights and metrics."""
    cfg = recurrent_config(core=core)
    cfg.ppo.epochs, cfg.ppo.minibatches, cfg.ppo.lr = 2, 2, 1e-2
    ppo, batch, plain = parity_setup(ppo_atari, cfg)
    p = cfg.ppo
    view, state = plain_view(batch, plain, p, state_keys(ppo))
    opt = torch.optim.Adam(plain.parameters(), lr=p.lr * 0.2, eps=p.adam_eps)
    torch.manual_seed(1)
    kl, clipped, grad_norm = (ppo_sequence_phase(plain, opt, view, state, p,
                                                 p.clip_epsilon * 0.2) / 4).tolist()  # fmt: skip
    torch.manual_seed(1)
    metrics = ppo.update(batch, progress=0.8)
    assert metrics["train/clip_fraction"] == pytest.approx(clipped, abs=1e-9)
    assert metrics["train/grad_norm"] == pytest.approx(grad_norm, rel=plain_parity.TOL["rtol"])
    assert_same_weights(ppo, plain)


@each_core
@pytest.mark.numerics
def test_a_recurrent_a2c_update_matches_the_plain_loop_on_the_same_batch(core):
    """By construction, in float64: the recipe's recurrent A2C step (all four simulators' whole
    sequences at once, n-step returns, from a carried batch-start state, with episodes that end
    mid-batch, a lost life and a truncation) and reference.recurrent's ``a2c_sequence_loss``
    with the plain LSTM or GRU and one clipped Adam step from the same weights give the same
    weights and grad norm."""
    cfg = recurrent_config(a2c_atari, core=core)
    cfg.a2c.lr = 1e-2
    a2c, batch, plain = parity_setup(a2c_atari, cfg)
    # The values the batch holds in float64: the plain loss's advantage is returns minus the
    # values of its own forward pass, as the recipe's is returns minus the collected values.
    batch["state_value"] = recompute(a2c, batch)[1]["state_value"]
    a = cfg.a2c
    (obs, starts, actions, _, _, returns, _), state = plain_view(batch, plain, a, state_keys(a2c))
    loss = a2c_sequence_loss(plain, (obs, starts, actions, returns), state, a)
    grad_norm = clipped_step(torch.optim.Adam(plain.parameters(), lr=a.lr * 0.5, eps=a.eps),
                             loss, plain.parameters(), a.max_grad_norm)  # fmt: skip
    metrics = a2c.update(batch, progress=0.5)
    assert metrics["train/grad_norm"] == pytest.approx(
        float(grad_norm), rel=plain_parity.TOL["rtol"]
    )
    assert_same_weights(a2c, plain)


def test_hidden_velocities_read_as_zeros_after_resets_and_at_episode_ends():
    from accelrl.envs import make_env

    env = make_env(EnvConfig(game="CartPole-v1", num_envs=2, hide_velocities=True), seed=0)
    try:
        batch = env.rollout(60, break_when_any_done=False)
    finally:
        env.close()
    assert batch["next", "done"].any(), "need an episode end (its final observation)"
    for obs in (batch["observation"], batch["next", "observation"]):
        assert not obs[..., [1, 3]].any() and obs[..., [0, 2]].abs().sum(-1).gt(0).all()


@pytest.mark.parametrize("game", ["Acrobot-v1", "Pong", "MinAtar/Breakout"])
def test_hide_velocities_is_refused_outside_cartpole(game):
    cfg = recurrent_config()
    cfg.env.game, cfg.env.hide_velocities = game, True
    with pytest.raises(ConfigError, match="hide-velocities=True: is for CartPole"):
        ppo_atari.ALGORITHM.validate(cfg)


# --- the plain Atari LSTM loop (reference.recurrent), the other side of the Breakout pair -------


def test_the_plain_atari_lstm_network_is_the_recipes_on_frames():
    """Same parameters in the same order; copied weights give the same logits, values and next
    state on frames over two steps, the second from the first's state."""
    from reference.recurrent import AtariLSTMActorCritic

    spec = {"obs_key": "pixels", "obs_shape": (4, 84, 84), "num_actions": 4}
    agent = agent_for(spec=spec)
    plain = AtariLSTMActorCritic(4, lstm_hidden=16)
    assert [p.shape for p in agent.model.parameters()] == [p.shape for p in plain.parameters()]
    with torch.no_grad():
        for mine, theirs in zip(agent.model.parameters(), plain.parameters(), strict=True):
            theirs.copy_(mine)
    frames = torch.randint(0, 256, (2, 3, 4, 84, 84), dtype=torch.uint8)
    state = agent.initial_state(3)
    for t in range(2):
        td = state.clone()
        td["pixels"], td["is_init"] = frames[t], torch.zeros(3, 1, dtype=torch.bool)
        with torch.no_grad():
            out = agent.model(td)
        if t == 0:
            h = c = torch.zeros(1, 3, 16)
        with torch.no_grad():
            logits, value, (h, c) = plain.unroll(frames[t : t + 1], (h, c), torch.zeros(1, 3))
        torch.testing.assert_close(out["logits"], logits[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out["state_value"].squeeze(-1), value[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out["next", "recurrent_state_h"].transpose(0, 1), h,
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
        state = out["next"].select(*CORES["lstm"].state_keys)


@functools.cache
def plain_lstm_batches():
    """Three batches of the plain loop's ``RecurrentRollout`` on Breakout (4 simulators x 64
    steps, games cut at 400 frames so that some end inside a batch), and after each simulator
    step whether a game ended there (over or truncated), as the simulators said."""
    import numpy as np

    from benchmarks.learning import atari_config
    from reference.atari import VecAtari
    from reference.recurrent import AtariLSTMActorCritic, RecurrentRollout

    cfg = atari_config("ppo", "Breakout", 10**6, 0, extra=["--model.recurrent", "lstm",
                       "--env.max-episode-frames", "400"])  # fmt: skip
    torch.manual_seed(0)
    env = VecAtari(cfg.env, 4, 1, seed=0)
    ended = []
    step = env.step

    def logged_step(actions):
        result = step(actions)
        ended.append(torch.from_numpy(np.asarray(env.ended)).float())
        return result

    env.step = logged_step
    model = AtariLSTMActorCritic(env.num_actions, lstm_hidden=16)
    rollout = RecurrentRollout(env, model, 64, torch.device("cpu"))
    out = []
    try:
        for _ in range(3):
            rollout.collect()
            out.append({key: getattr(rollout, key).clone() for key in
                        ("starts", "dones", "obs", "logp", "values", "actions")})  # fmt: skip
            out[-1]["first_state"], out[-1]["last_state"] = rollout.first_state, rollout.state
    finally:
        env.close()
    return model, out, torch.stack(ended)


def test_the_plain_lstm_loop_starts_episodes_from_zeros_and_carries_lost_lives():
    """Zeros (a start) at the first reset and exactly on the step after a game ended, in a
    batch or across two; a lost life is no start."""
    _, out, ended = plain_lstm_batches()
    starts = torch.cat([batch["starts"] for batch in out])
    dones = torch.cat([batch["dones"] for batch in out])
    assert starts[0].eq(1).all(), "the first reset starts every episode"
    torch.testing.assert_close(starts[1:], ended[:-1])
    lost = dones.bool() & ~ended.bool()
    assert ended[:-1].any() and lost.any(), "need games that end and lives lost"


def test_the_plain_lstm_loop_carries_its_state_from_batch_to_batch():
    _, out, _ = plain_lstm_batches()
    for previous, batch in zip(out, out[1:], strict=False):
        for mine, theirs in zip(batch["first_state"], previous["last_state"], strict=True):
            assert torch.equal(mine, theirs)
        assert batch["first_state"][0].abs().sum() > 0


def test_the_plain_lstm_loop_recomputes_its_collection_over_whole_sequences():
    """Its updates unroll each sequence from the batch's first state with its starts: on the
    collected batch that reproduces the collected log-probabilities and values."""
    model, out, _ = plain_lstm_batches()
    for batch in out[1:]:
        with torch.no_grad():
            logits, values, _ = model.unroll(batch["obs"], batch["first_state"], batch["starts"])
        logp = torch.distributions.Categorical(logits=logits).log_prob(batch["actions"])
        torch.testing.assert_close(logp, batch["logp"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(values, batch["values"], rtol=1e-5, atol=1e-5)


def test_the_flag_offers_every_recurrent_core():
    """``accelrl.config`` is data only (no torch): its choices list ``accelrl.recurrent.CORES``'
    names by hand, and this keeps the two the same."""
    import typing

    from accelrl.config import ModelConfig
    from accelrl.recurrent import CORES

    hints = typing.get_type_hints(ModelConfig)
    assert typing.get_args(hints["recurrent"]) == ("none", *CORES)
