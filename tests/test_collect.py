"""Collector factory: layouts, thread budget, and weight sync to worker processes."""

import pytest
import torch

from accelrl.collectors import UpdateThreads, make_collector, plan_threads
from accelrl.config import CollectorConfig, EnvConfig, ThreadsConfig
from accelrl.models import make_actor_critic


def test_thread_plan_defaults_follow_core_count():
    small = plan_threads(ThreadsConfig(), num_workers=0, cores=2)
    assert (small.learner_torch, small.worker_torch, small.sim_threads) == (1, 1, 2)
    big = plan_threads(ThreadsConfig(), num_workers=4, cores=64)
    assert (big.learner_torch, big.worker_torch, big.sim_threads) == (16, 1, 16)
    fixed = plan_threads(ThreadsConfig(torch_threads=3, sim_threads=5), num_workers=2, cores=64)
    assert (fixed.learner_torch, fixed.worker_torch, fixed.sim_threads) == (3, 3, 5)


def test_synchronous_updates_may_use_every_core_and_overlapped_ones_share():
    """Synchronous runs: the simulators wait during the update, so it may use all cores; with
    collection running alongside (async/batched kinds, a replay feeder) it keeps its share;
    --threads.torch-threads fixes it."""
    sync = plan_threads(ThreadsConfig(), num_workers=0, cores=2)
    assert (sync.learner_torch, sync.update_torch) == (1, 2)
    assert plan_threads(ThreadsConfig(), 2, cores=64).update_torch == 64
    assert plan_threads(ThreadsConfig(), 2, cores=64, overlapped=True).update_torch == 16
    assert plan_threads(ThreadsConfig(torch_threads=3), 0, cores=64).update_torch == 3
    fixed = plan_threads(ThreadsConfig(torch_threads=3), 0, cores=64)
    assert UpdateThreads(fixed).candidates == [3]


SUBNORMAL_AFTER_SETUP = """
import torch
from accelrl.process import setup_process
from recipes.dqn_atari import Config
tiny = torch.tensor([1e-39])  # float32 subnormal
before = (tiny * 1.0).item()
setup_process(Config())
print(before, (tiny * 1.0).item(), (torch.randn(1000) * 1e-39).count_nonzero().item())
"""


def test_learner_process_flushes_subnormal_floats():
    """Adam's moments of dead units decay into subnormal floats, which x86 computes through a
    slow path (CartPole DQN: optimizer steps 4x slower after 2k updates). The learner process
    flushes them to zero from ``setup_process`` on (a fresh process: the flag is per thread)."""
    import subprocess
    import sys

    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormals")
    out = subprocess.run(
        [sys.executable, "-c", SUBNORMAL_AFTER_SETUP], capture_output=True, text=True, check=True
    )
    before, after, nonzero = (float(v) for v in out.stdout.split())
    assert before != 0.0  # kept by default
    assert after == 0.0 and nonzero == 0


class FakeClock:
    """The perf_counter of ``accelrl.collectors.threads``, moved only by the test: the thread
    choice follows the times the test gives, however loaded the machine is (real sleeps of a
    few milliseconds overshot by more than the difference under load and flipped the choice)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    from types import SimpleNamespace

    from accelrl.collectors import threads

    fake = FakeClock()
    monkeypatch.setattr(threads, "time", SimpleNamespace(perf_counter=fake))
    return fake


@pytest.fixture(name="plan")
def two_core_plan():
    """Two cores' thread plan, with torch at its learner count; torch's count is restored."""
    before = torch.get_num_threads()
    plan = plan_threads(ThreadsConfig(), num_workers=0, cores=2)
    torch.set_num_threads(plan.learner_torch)
    yield plan
    torch.set_num_threads(before)


@pytest.mark.parametrize("faster", [1, 2])
def test_update_threads_follow_the_measurement(faster, clock, plan):
    """Probes alternate 1 and 2 threads, the faster one (per unit of work) is kept, collection
    always gets its own count back, and a later probe window can change the choice (the
    machine's load changed)."""
    chooser = UpdateThreads(plan, probes=2, probe_every=20)
    seen = []

    def update(slow_threads: int, units: int = 1) -> None:
        with chooser(units=units):
            seen.append(torch.get_num_threads())
            clock.sleep(0.004 * units * (3 if torch.get_num_threads() == slow_threads else 1))
        assert torch.get_num_threads() == plan.learner_torch

    slow = 3 - faster
    for _ in range(10):
        update(slow, units=2)
    assert sorted(set(seen[1:5])) == [1, 2], seen  # the probe window tried both
    assert chooser.choice == faster and seen[5:] == [faster] * 5
    fresh = UpdateThreads(plan, probes=2, probe_every=20)
    for _ in range(3):  # a warm-up update, then probes with no work due: no timings
        with fresh(units=0):
            pass
    assert fresh.count == 3 and all(not t for t in fresh._times.values())
    for _ in range(15):  # the next window, with the other count faster now
        update(faster)
    assert chooser.choice == slow


@pytest.mark.parametrize("faster", [1, 2])
def test_update_threads_probe_only_the_first_steps_of_an_update(faster, clock, plan):
    """``steps``: a probe update runs 1 + probe_steps steps at the probed count and the rest at
    the current choice (a slow count costs a few steps, not an update); updates before the
    first decision run at the collection count; the faster count per step is kept."""
    chooser = UpdateThreads(plan, probes=2, probe_every=20, probe_steps=3)
    slow = 3 - faster
    updates = []
    for _ in range(8):
        seen = []
        for _ in chooser.steps(10):
            seen.append(torch.get_num_threads())
            clock.sleep(0.002 * (3 if torch.get_num_threads() == slow else 1))
        updates.append(seen)
        assert torch.get_num_threads() == plan.learner_torch
    assert updates[0] == [1] * 10  # warm-up at the collection count
    probed = [u[0] for u in updates[1:5]]
    assert sorted(probed) == [1, 1, 2, 2], updates
    for u in updates[1:5]:  # 4 steps at the probed count, then the choice so far
        assert u[:4] == [u[0]] * 4 and u[4:] == [1] * 6, updates
    assert chooser.choice == faster and updates[5:] == [[faster] * 10] * 3
    fresh = UpdateThreads(plan, probes=2, probe_every=20, probe_steps=3)
    for _ in range(5):  # updates of one step cannot be timed: no decision
        for _ in fresh.steps(1):
            pass
    assert fresh.choice == plan.learner_torch and all(not t for t in fresh._times.values())


@pytest.mark.parametrize("faster", [1, 2])
def test_update_threads_measure_in_process_collection_too(faster, clock, plan):
    """``probe_collection``: from the second collection after the warm-up update on, 8 of them
    alternate 1 and 2 threads (each timed from the end of one update to the start of the
    next); the faster is kept for the collections after, independently of the updates' own
    choice."""
    chooser = UpdateThreads(plan, probes=2, probe_every=20, probe_collection=True)
    slow = 3 - faster
    collected = []
    for _ in range(13):
        collected.append(torch.get_num_threads())  # a collection at this count
        clock.sleep(0.004 * (3 if torch.get_num_threads() == slow else 1))
        with chooser():
            clock.sleep(0.004 * (3 if torch.get_num_threads() == 2 else 1))  # 1 is faster
    # Before any update, and after the warm-up update: the collection share.
    assert collected[:2] == [plan.learner_torch] * 2
    assert collected[2:10] == [1, 2] * 4, collected  # 4 probes of each
    assert chooser.collect == faster and collected[10:] == [faster] * 3, collected
    assert chooser.probe_phase() == 10
    assert chooser.choice == 1  # the updates' own measurement


def test_learner_probes_collection_threads_only_for_in_process_sync_collection():
    from accelrl.process import learner_threads
    from recipes.ppo_atari import Config

    plan = plan_threads(ThreadsConfig(), num_workers=0, cores=2)
    for kind, workers, overlapped, probed in (
        ("sync", 0, False, True),
        ("sync", 2, False, False),  # workers act for their simulators
        ("async", 2, False, False),
        ("sync", 0, True, False),  # DQN's replay feeder collects during updates
    ):
        cfg = Config()
        cfg.collector.kind, cfg.collector.num_workers = kind, workers
        candidates = learner_threads(cfg, plan, overlapped)._collect_candidates
        assert candidates == ([1, 2] if probed else [1]), (kind, workers, overlapped)


def cartpole_collector(model, workers: int, steps_per_batch: int = 64, **kwargs):
    """``make_collector`` over 4 CartPole simulators acting with ``model``."""
    return make_collector(
        EnvConfig(game="CartPole-v1", num_envs=4),
        CollectorConfig(num_workers=workers, steps_per_batch=steps_per_batch),
        model,
        seed=0,
        plan=plan_threads(ThreadsConfig(), workers),
        learner_device="cpu",
        **kwargs,
    )


def force_action(model, action: int) -> None:
    head = model.get_policy_head().module[0].module[-1]
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-50.0)
        head.bias[action] = 50.0


def test_workers_act_with_new_weights_after_sync():
    model = make_actor_critic("observation", (4,), 2)
    collector = cartpole_collector(model, 2)
    try:
        batches = iter(collector)
        first = next(batches)
        assert first.batch_size == (2, 4, 8)
        assert set(first["action"].unique().tolist()) == {0, 1}
        force_action(model, 1)
        collector.update_policy_weights_()
        next(batches)  # may have been collected before the sync
        later = next(batches)
        assert (later["action"] == 1).all()
        force_action(model, 0)
        collector.update_policy_weights_()
        next(batches)
        assert (next(batches)["action"] == 0).all()
    finally:
        collector.shutdown()


@pytest.mark.parametrize("workers", [0, 1])
def test_watched_collector_skips_the_weight_copy_only_when_it_acts_with_the_learners_module(
    workers, monkeypatch
):
    from accelrl.collectors import WatchedCollector

    model = make_actor_critic("observation", (4,), 2)
    inner = cartpole_collector(model, workers)
    collector = WatchedCollector(inner, stall_timeout_s=60, learner_policy=model)
    copies = []
    real = inner.update_policy_weights_
    monkeypatch.setattr(inner, "update_policy_weights_", lambda *a, **k: copies.append(1) or real())
    try:
        batches = iter(collector)
        next(batches)
        force_action(model, 1)  # an optimizer step, in place
        collector.update_policy_weights_()
        assert collector.acts_with_learner_weights == (workers == 0)
        assert copies == ([] if workers == 0 else [1])
        if workers:
            next(batches)  # may have been collected before the sync
        assert (next(batches)["action"] == 1).all(), "acting weights follow the learner's"
    finally:
        collector.shutdown()


def test_in_process_collector_layout_and_keys():
    env_cfg = EnvConfig(game="Pong", num_envs=2)
    model = make_actor_critic("pixels", (4, 84, 84), 6)
    collector = make_collector(
        env_cfg,
        CollectorConfig(num_workers=0, steps_per_batch=16),
        model,
        seed=0,
        plan=plan_threads(ThreadsConfig(), 0),
        learner_device="cpu",
    )
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    assert batch.batch_size == (2, 8)
    assert batch["pixels"].dtype == torch.uint8
    for key in ["action", "action_log_prob", "state_value", ("next", "reward"), ("next", "score")]:
        assert key in batch.keys(True), key


def test_core_shortfall_names_the_numbers():
    from accelrl.collectors import core_shortfall

    env = EnvConfig(game="Pong", num_envs=8)
    assert core_shortfall(3, env, CollectorConfig(num_workers=2)) is None
    assert core_shortfall(1, env, CollectorConfig(num_workers=0)) is None
    line = core_shortfall(2, env, CollectorConfig(num_workers=2))
    assert line == (
        "2 core(s) for 1 learner + 2 collector worker process(es) stepping 16 simulators: each "
        "process gets less than a core; give this rank at least 3 (e.g. --cpus-per-task 3) or "
        "use fewer --collector.num-workers"
    )


def test_a_run_pinned_to_one_core_warns_once(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    if shutil.which("taskset") is None:
        pytest.skip("taskset is not installed")
    repo = Path(__file__).resolve().parents[1]
    cmd = ["taskset", "-c", "0", sys.executable, str(repo / "recipes" / "ppo_atari.py"),
           "--env.game", "CartPole-v1", "--env.num-envs", "2", "--collector.num-workers", "2",
           "--collector.steps-per-batch", "64", "--ppo.minibatches", "2", "--total-frames",
           "128", "--log.eval-episodes", "0", "--log.no-tensorboard", "--log.no-progress",
           "--run-dir", str(tmp_path / "run")]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=repo)
    assert out.returncode == 0, out.stderr[-2000:]
    warnings = [ln for ln in out.stderr.splitlines() if "collector worker process(es)" in ln]
    assert len(warnings) == 1, out.stderr[-2000:]
    assert "rank 0: 1 core(s) for 1 learner + 2 collector worker" in warnings[0]


def test_worker_processes_sample_the_same_actions_in_two_runs():
    """Each worker seeds its generators from its simulators' seed: the policy's sampled actions
    repeat from run to run (they came from randomly seeded generators before)."""

    def first_batches():
        torch.manual_seed(0)
        model = make_actor_critic("observation", (4,), 2)
        collector = cartpole_collector(model, 2, steps_per_batch=128)
        try:
            batches = iter(collector)
            return [next(batches)["action"].clone() for _ in range(2)]
        finally:
            collector.shutdown()

    one, two = first_batches(), first_batches()
    assert one[0].shape == (2, 4, 16)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a, b)
    # the two workers do not share one stream of actions
    assert not torch.equal(one[0][0], one[0][1])


# --- the lean rollout (accelrl.collectors.LeanCollector) against TorchRL's ------------------


def acting_policies(game: str, kind: str):
    """A recipe's collect policy on ``game``'s zero-cost (or real) simulators: PPO's one-pass
    actor-critic module (the lean path runs its network directly) or DQN's Q-values with
    scheduled epsilon-greedy (the lean path calls the TensorDict modules)."""
    from accelrl.algos.dqn import DQN, DQNConfig
    from accelrl.envs import describe_env

    spec = describe_env(EnvConfig(game=game))
    torch.manual_seed(0)
    if kind == "ppo":
        from accelrl.algos.ppo import PPO, PPOConfig

        return PPO(make_actor_critic(**spec), PPOConfig(), torch.device("cpu")).collect_policy
    cfg = DQNConfig(eps_start=0.5, eps_end=0.5)
    return DQN(cfg, **spec, device=torch.device("cpu")).collect_policy


def first_batches(
    cls, game: str, kind: str, rows: int, steps: int, count: int, seed: int = 3, device=None,
    crossing=False, compact_obs=False, **env,
):  # fmt: skip
    """``count`` batches of ``cls`` (TorchRL's ``Collector`` or ``LeanCollector``) from the same
    seeds, and whether the lean path ran; ``device``: the policy's and the batches' (a GPU);
    ``compact_obs``: ``LeanCollector``'s compact batches; ``env``: more ``EnvConfig``
    settings."""
    from accelrl.envs import make_env

    policy = acting_policies(game, kind)
    devices = {}
    if device is not None:
        policy = policy.to(device)
        devices = dict(policy_device=device, storing_device=device, env_device="cpu")
    torch.manual_seed(seed)  # the action draws
    if device is not None and device.startswith("cuda"):
        torch.cuda.manual_seed_all(seed)
    env = make_env(EnvConfig(game=game, num_envs=rows, **env), seed=seed)
    if compact_obs:
        devices["compact_obs"] = compact_obs
    collector = cls(
        env, policy, frames_per_batch=rows * steps, total_frames=-1, track_traj_ids=False,
        **devices,
    )  # fmt: skip
    if crossing:  # take the GPU's branches on the CPU: moves to "cpu" instead of no moves
        collector._policy_on = collector._store_on = torch.device("cpu")
    try:
        batches = iter(collector)
        return [next(batches).clone() for _ in range(count)], getattr(collector, "lean", None)
    finally:
        collector.shutdown()


@pytest.mark.parametrize(
    "game,kind,steps,env",
    [
        ("Null/CartPole", "ppo", 45, {}),  # episodes of 30-60 steps end within and across batches
        ("Null/Atari", "ppo", 7, {}),
        ("Null/CartPole", "dqn", 45, {}),
        ("CartPole-v1", "ppo", 40, {}),  # the classic backend's final observations, derived
        ("Breakout", "ppo", 60, {"fire_on_life_loss": True}),  # ale-py: lives, FIRE after a loss
    ],
)
@pytest.mark.parametrize("crossing", [False, True], ids=["", "device-branches"])
@pytest.mark.parametrize("compact_obs", [False, True], ids=["", "compact"])
def test_lean_collector_batches_equal_torchrls(game, kind, steps, env, crossing, compact_obs):
    """The lean rollout writes the batches TorchRL's ``Collector`` yields for the same seeds:
    the same keys, dtypes, shapes, dim names and values (actions drawn from the same stream,
    final observations at episode ends, roots reset in the same step, episode statistics);
    ``crossing``: through the branches a policy or batches on a GPU take. Compact batches
    (``accelrl.batches``): the same without ``("next", obs)``, and the next observations at the
    ends equal to TorchRL's ``("next", obs)`` there."""
    from torchrl.collectors import Collector

    from accelrl.batches import NEXT_OBS_AT_ENDS, is_compact, next_obs_at_ends
    from accelrl.collectors import LeanCollector
    from accelrl.envs import describe_env

    if crossing and game not in ("Null/CartPole", "Null/Atari"):
        pytest.skip("the branches are the same on every simulator")
    expected, _ = first_batches(Collector, game, kind, rows=4, steps=steps, count=3, **env)
    found, lean = first_batches(
        LeanCollector, game, kind, rows=4, steps=steps, count=3, crossing=crossing,
        compact_obs=compact_obs, **env,
    )  # fmt: skip
    assert lean, "the lean rollout must run here, or this test compares TorchRL with itself"
    ends = expected[1]["next", "done"] | expected[1]["next", "life_lost"]
    assert ends.any(), "the batches must hold episode ends (Breakout: lost lives)"
    obs_key = describe_env(EnvConfig(game=game))["obs_key"]
    for want, got in zip(expected, found, strict=True):
        assert is_compact(got) == compact_obs
        if compact_obs:
            at_ends = next_obs_at_ends(want, obs_key)
            assert got.get(NEXT_OBS_AT_ENDS).shape == at_ends.shape
            assert torch.equal(got.get(NEXT_OBS_AT_ENDS), at_ends)
            want = want.exclude(("next", obs_key))
            got = got.exclude(NEXT_OBS_AT_ENDS)
        assert set(got.keys(True, True)) == set(want.keys(True, True))
        assert got.names == want.names and got["next"].names == want["next"].names
        for key in want.keys(True, True):
            a, b = want.get(key), got.get(key)
            assert a.dtype == b.dtype and a.shape == b.shape, key
            assert torch.equal(a, b), key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind,steps", [("ppo", 45), ("dqn", 45)])
def test_lean_collector_on_a_gpu_equals_torchrls(kind, steps):
    """The policy and the batches on a GPU (the recipes' default there): the lean rollout acts
    on the device and writes in host memory, and yields what TorchRL's rollout does."""
    from torchrl.collectors import Collector

    from accelrl.collectors import LeanCollector

    args = dict(game="Null/CartPole", kind=kind, rows=4, steps=steps, count=3, device="cuda")
    expected, _ = first_batches(Collector, **args)
    found, lean = first_batches(LeanCollector, **args)
    assert lean, "the lean rollout must run on a GPU, or this test compares TorchRL with itself"
    for want, got in zip(expected, found, strict=True):
        assert got.device == want.device and got.names == want.names
        for key in want.keys(True, True):
            a, b = want.get(key), got.get(key)
            assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device, key
            assert torch.equal(a, b), key


@pytest.mark.parametrize(
    "game,rows,compact",
    [("Null/CartPole", 4, False), ("Null/Atari", 2, False), ("Null/Atari", 4, True)],
)
def test_compact_obs_auto_follows_a_batchs_observation_bytes(game, rows, compact):
    """``compact_obs="auto"``: compact batches from 512 KiB of observations a batch (Atari
    stacks of 27.6 KiB: 14 in 386 KiB stay full, 28 in 772 KiB go compact), every batch in the
    layout chosen, and the log line says which."""
    from accelrl.batches import is_compact
    from accelrl.collectors import LeanCollector
    from accelrl.envs import make_env

    env = make_env(EnvConfig(game=game, num_envs=rows), seed=0)
    collector = LeanCollector(
        env, acting_policies(game, "ppo"), frames_per_batch=rows * 7, total_frames=-1,
        track_traj_ids=False, compact_obs="auto",
    )  # fmt: skip
    try:
        batches = iter(collector)
        got = [next(batches) for _ in range(3)]
        assert collector.lean and collector.compact_obs is compact
        assert [is_compact(b) for b in got] == [compact] * 3
        layout = "compact batches" if compact else "TorchRL's full batches"
        assert layout in collector.rollout_line()
    finally:
        collector.shutdown()


def test_lean_collector_rejects_an_unknown_compact_obs():
    from accelrl.collectors import LeanCollector
    from accelrl.envs import make_env

    env = make_env(EnvConfig(game="Null/CartPole", num_envs=2), seed=0)
    with pytest.raises(ValueError, match="compact_obs='yes'"):
        LeanCollector(env, acting_policies("Null/CartPole", "ppo"), frames_per_batch=4,
                      total_frames=-1, compact_obs="yes")  # fmt: skip


@pytest.mark.parametrize("path", ["network", "tensordict-module", "compact"])
def test_lean_collector_keeps_batches_that_are_held_and_reuses_dropped_ones(path):
    """A batch, a tensor of it or a view of it that the caller keeps is never written into by
    later batches; a batch nobody holds gives its memory to the batch after next. Both ways a
    policy acts: its network directly, and a TensorDict module (whose inputs each step then
    hold the env's observation instead of views of the batch's memory), and compact batches,
    whose next observations at the ends are held too."""
    from accelrl.batches import NEXT_OBS_AT_ENDS
    from accelrl.collectors import LeanCollector
    from accelrl.envs import describe_env, make_env

    env = make_env(EnvConfig(game="Null/CartPole", num_envs=4), seed=0)
    if path in ("network", "compact"):
        policy = acting_policies("Null/CartPole", "ppo")
    else:
        torch.manual_seed(0)
        policy = make_actor_critic(**describe_env(EnvConfig(game="Null/CartPole")))
    # 7 steps a batch: the zero-cost simulators' observations repeat every 4 steps, so a
    # batch written over a held one changes its observations.
    collector = LeanCollector(
        env, policy, frames_per_batch=4 * 7, total_frames=-1, track_traj_ids=False,
        compact_obs=path == "compact",
    )  # fmt: skip
    try:
        batches = iter(collector)
        next(batches)  # TorchRL's own first batch
        assert collector.lean
        assert collector._direct == (path != "tensordict-module")
        kept = next(batches)
        kept_copy = kept.clone()
        tensor = next(batches).get(("next", "episode_return"))
        tensor_copy = tensor.clone()
        view = next(batches)["observation"][1:3]
        view_copy = view.clone()
        # Alone, as the only tensor held of its batch (compact batches).
        at_ends = next(batches).get(NEXT_OBS_AT_ENDS) if path == "compact" else view
        at_ends_copy = at_ends.clone()
        for _ in range(4):
            next(batches)
            assert torch.equal(view, view_copy), "a held view of the observations was written"
            assert torch.equal(at_ends, at_ends_copy), "held next observations were written"
        assert (kept == kept_copy).all()
        assert torch.equal(tensor, tensor_copy) and torch.equal(view, view_copy)
        first = next(batches)["action"].data_ptr()
        next(batches)
        assert next(batches)["action"].data_ptr() == first, "dropped memory is reused"
    finally:
        collector.shutdown()


def test_lean_collector_leaves_what_it_cannot_write_to_torchrl(caplog):
    """A recurrent policy's env (transforms) and a collector with an end keep TorchRL's
    rollout, and the log line names which rollout runs and why."""
    from accelrl.collectors import LeanCollector
    from accelrl.envs import make_env, with_state

    policy = acting_policies("Null/CartPole", "ppo")
    env = make_env(EnvConfig(game="Null/CartPole", num_envs=2), seed=0)
    state = make_env(EnvConfig(game="Null/CartPole", num_envs=2), seed=0).reset()
    wrapped = with_state(env, state.select("score"))
    collector = LeanCollector(wrapped, policy, frames_per_batch=4, total_frames=-1)
    assert not collector.lean
    assert collector.rollout_line() == (
        "collection: TorchRL's rollout (the env has transforms or is not accelrl's)"
    )
    collector.shutdown()
    collector = LeanCollector(
        make_env(EnvConfig(game="Null/CartPole", num_envs=2), seed=0),
        policy,
        frames_per_batch=4,
        total_frames=8,
        track_traj_ids=False,
    )
    assert not collector.lean, "a collector with an end keeps TorchRL's frame counting"
    with caplog.at_level("INFO", logger="accelrl"):
        assert [b.batch_size for b in collector] == [(2, 2), (2, 2)]
    assert "collection: TorchRL's rollout (a collector with an end)" in caplog.text
    collector.shutdown()
    lean = LeanCollector(
        make_env(EnvConfig(game="Null/CartPole", num_envs=2), seed=0),
        policy,
        frames_per_batch=4,
        total_frames=-1,
        track_traj_ids=False,
    )
    with caplog.at_level("INFO", logger="accelrl"):
        next(iter(lean))
    line = "collection: the lean rollout (policy on cpu, batches on cpu; the policy runs its"
    assert f"{line} network directly; TorchRL's full batches)" in caplog.text
    lean.shutdown()


def test_final_observations_of_ended_rows_as_ale_py_gives_them():
    """``AleVecEnv`` takes ended rows' final observations from ale-py's side array: the copy
    and ``_final_rows`` equal the ``np.where`` they replaced."""
    import numpy as np

    from accelrl.envs.ale_vec import AleVecEnv

    rng = np.random.default_rng(0)
    obs = rng.integers(0, 255, (5, 4, 8, 8), dtype=np.uint8)
    final = rng.integers(0, 255, (5, 4, 8, 8), dtype=np.uint8)
    ended = np.array([False, True, False, False, True])
    info = {"final_obs": final}
    want = np.where(ended[:, None, None, None], final, obs)
    assert np.array_equal(AleVecEnv._final_obs(None, obs, ended, info), want)
    assert np.array_equal(AleVecEnv._final_rows(None, obs, ended, info), want[ended])
