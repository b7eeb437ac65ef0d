"""FrameReplay: n-step targets against a brute-force reference, observations rebuilt exactly on
real Breakout and CartPole rollouts, prioritized frequencies and weights, memmap resume, bytes per
transition."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from accelrl.replay.memory import FrameReplay

GAMMA = 0.9


@dataclass
class FakeStream:
    """Env streams with frames that encode (env, frame id); ``obs``/``next_obs`` as emitted."""

    num_envs: int
    steps: int
    stack: int
    seed: int
    obs: list[list[torch.Tensor]] = field(default_factory=list)
    next_obs: list[list[torch.Tensor]] = field(default_factory=list)
    frame_step: dict[int, tuple[int, int]] = field(default_factory=dict)  # newest frame -> (e, t)

    def __post_init__(self) -> None:
        gen = np.random.default_rng(self.seed)
        e_, s_ = self.num_envs, self.steps
        self.reward = gen.integers(-2, 3, size=(e_, s_)).astype(np.float32) * 0.5
        self.action = torch.as_tensor(gen.integers(0, 6, size=(e_, s_)))
        u = gen.random((e_, s_))
        self.terminated = u < 0.06
        self.truncated = (u >= 0.06) & (u < 0.1)
        self.life_lost = (gen.random((e_, s_)) < 0.08) & ~(self.terminated | self.truncated)
        self.done = self.terminated | self.truncated
        next_id = 1
        for e in range(e_):
            # Odd envs start mid-episode: their first stack holds frames stored nowhere else.
            episode = [self._frame(e, next_id + i, 1) for i in range(1 + 2 * (e % 2))]
            next_id += len(episode)
            self.obs.append([])
            self.next_obs.append([])
            for t in range(s_):
                self.obs[e].append(self._stacked(episode))
                self.frame_step[self._id(episode[-1])] = (e, t)
                if self.done[e, t]:
                    self.next_obs[e].append(self._stacked([*episode, self._frame(e, next_id, 2)]))
                    episode = [self._frame(e, next_id + 1, 1)]
                    next_id += 2
                else:
                    episode.append(self._frame(e, next_id, 1))
                    next_id += 1
                    self.next_obs[e].append(self._stacked(episode))

    @staticmethod
    def _frame(env: int, ident: int, kind: int) -> torch.Tensor:
        f = torch.zeros(6, 6, dtype=torch.uint8)
        f[0, 0], f[0, 1], f[0, 2], f[0, 3] = env + 1, ident % 256, ident // 256, kind
        return f

    @staticmethod
    def _id(frame: torch.Tensor) -> int:
        return int(frame[0, 1]) + 256 * int(frame[0, 2])

    def _stacked(self, episode: list[torch.Tensor]) -> torch.Tensor:
        frames = [torch.zeros(6, 6, dtype=torch.uint8)] * self.stack + episode
        return torch.stack(frames[-self.stack :])

    def batch(self, t0: int, t1: int) -> TensorDict:
        """Collector-like batch ``[E, t1 - t0]``."""
        sl = slice(t0, t1)
        col = (self.num_envs, t1 - t0, 1)
        return TensorDict(
            {
                "pixels": torch.stack([torch.stack(o[sl]) for o in self.obs]),
                "action": self.action[:, sl],
                "next": {
                    "pixels": torch.stack([torch.stack(o[sl]) for o in self.next_obs]),
                    "reward": torch.as_tensor(self.reward[:, sl]).reshape(col),
                    "done": torch.as_tensor(self.done[:, sl]).reshape(col),
                    "terminated": torch.as_tensor(self.terminated[:, sl]).reshape(col),
                    "truncated": torch.as_tensor(self.truncated[:, sl]).reshape(col),
                    "life_lost": torch.as_tensor(self.life_lost[:, sl]).reshape(col),
                },
            },
            batch_size=[self.num_envs, t1 - t0],
        )

    def reference(self, e: int, t: int, n: int, life_loss: bool) -> dict:
        """The n-step transition from (e, t), by plain loops."""
        ret, k, stop, term = 0.0, 0, False, False
        for i in range(n):
            u = t + i
            ret += GAMMA**i * float(self.reward[e, u])
            k += 1
            lost = life_loss and bool(self.life_lost[e, u])
            if self.done[e, u] or lost:
                stop, term = True, bool(self.terminated[e, u]) or lost
                break
        return {
            "obs": self.obs[e][t],
            "next_obs": self.next_obs[e][t + k - 1],
            "reward": ret,
            "k": k,
            "done": stop,
            "terminated": term,
            "action": int(self.action[e, t]),
        }

    def ready(self, e: int, t: int, n: int, written: int) -> bool:
        """Whether (e, t)'s target is stored after ``written`` steps."""
        if t + n <= written - 1:
            return True
        return bool(self.done[e, t : min(t + n, written)].any())

    def entry(self, e: int, t: int) -> int:
        """The documented layout: stream-start prefix, one entry per step, one per episode end."""
        return self.stack - 1 + t + int(self.done[e, :t].sum())


def make_replay(stream: FakeStream, capacity: int, n: int, life_loss: bool, **kw) -> FrameReplay:
    shape = (stream.stack, 6, 6) if stream.stack > 1 else (1, 6, 6)
    return FrameReplay(
        capacity=capacity,
        n_step=n,
        **kw,
        num_envs=stream.num_envs,
        obs_key="pixels",
        obs_shape=shape,
        stack=stream.stack,
        gamma=GAMMA,
        life_loss_boundary=life_loss,
    )


def feed(buf: FrameReplay, stream: FakeStream, cuts: list[int], compact_obs=False) -> None:
    """The stream's batches cut at ``cuts``; ``compact_obs``: in the compact layout
    (``accelrl.batches``: no ``("next", obs)``, the next observations at the ends aside)."""
    from accelrl.batches import compact

    for t0, t1 in zip([0, *cuts], [*cuts, stream.steps], strict=True):
        batch = stream.batch(t0, t1)
        buf.extend(compact(batch, "pixels") if compact_obs else batch)


def check_samples(buf: FrameReplay, stream: FakeStream, n: int, life_loss: bool) -> set:
    """Every sampled transition equals the reference; returns the sampled (e, t)."""
    # Seeded: 8 x 512 draws over ~180 transitions miss one with probability ~1e-8 per item,
    # and the outcome no longer depends on which tests ran before.
    torch.manual_seed(0)
    seen = set()
    for _ in range(8):
        td = buf.sample(512)
        newest = td["pixels"][:, -1] if stream.stack > 1 else td["pixels"][:, 0]
        for b in range(512):
            e, t = stream.frame_step[FakeStream._id(newest[b])]
            ref = stream.reference(e, t, n, life_loss)
            assert torch.equal(td["pixels"][b], ref["obs"]), (e, t)
            assert torch.equal(td["next", "pixels"][b], ref["next_obs"]), (e, t)
            assert math.isclose(td["next", "reward"][b, 0].item(), ref["reward"], abs_tol=1e-5)
            assert math.isclose(td["gamma_n"][b, 0].item(), GAMMA ** ref["k"], rel_tol=1e-6)
            assert td["steps_to_next_obs"][b, 0].item() == ref["k"]
            assert td["next", "done"][b, 0].item() == ref["done"], (e, t)
            assert td["next", "terminated"][b, 0].item() == ref["terminated"], (e, t)
            assert td["action"][b].item() == ref["action"]
            seen.add((e, t))
    return seen


@pytest.mark.parametrize("stack", [1, 4])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("life_loss", [False, True])
@pytest.mark.parametrize("compact_obs", [False, True], ids=["", "compact"])
def test_nstep_against_reference(stack: int, n: int, life_loss: bool, compact_obs: bool) -> None:
    stream = FakeStream(num_envs=3, steps=60, stack=stack, seed=stack * 10 + n + life_loss)
    buf = make_replay(stream, capacity=3 * 200, n=n, life_loss=life_loss)
    feed(buf, stream, [7, 12, 25, 26, 40], compact_obs)
    expected = {
        (e, t) for e in range(3) for t in range(stream.steps) if stream.ready(e, t, n, stream.steps)
    }
    assert len(buf) == len(expected)
    assert check_samples(buf, stream, n, life_loss) == expected


@pytest.mark.parametrize("stack", [1, 4])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("compact_obs", [False, True], ids=["", "compact"])
def test_wraparound_keeps_exact_window(stack: int, n: int, compact_obs: bool) -> None:
    stream = FakeStream(num_envs=3, steps=150, stack=stack, seed=7 + n)
    ring = 40
    buf = make_replay(stream, capacity=3 * ring, n=n, life_loss=True)
    feed(buf, stream, list(range(6, 150, 6)), compact_obs)
    expected = set()
    for e in range(3):
        written = stream.entry(e, stream.steps)  # entries appended in all
        for t in range(stream.steps):
            in_ring = stream.entry(e, t) >= written - ring + stack - 1
            if in_ring and stream.ready(e, t, n, stream.steps):
                expected.add((e, t))
    assert len(buf) == len(expected)
    assert check_samples(buf, stream, n, life_loss=True) == expected


def test_worker_batches_and_waiting_transitions() -> None:
    stream = FakeStream(num_envs=4, steps=30, stack=4, seed=3)
    buf = make_replay(stream, capacity=4 * 100, n=3, life_loss=False)
    buf.extend(stream.batch(0, 2).reshape(2, 2, 2))  # [W, E, T] layout
    pending = sum(stream.ready(e, t, 3, 2) for e in range(4) for t in range(2))
    assert len(buf) == pending  # only episodes that ended within the first 2 steps
    buf.extend(stream.batch(2, 30).reshape(2, 2, 28))
    assert check_samples(buf, stream, 3, False) == {
        (e, t) for e in range(4) for t in range(30) if stream.ready(e, t, 3, 30)
    }


def test_prioritized_frequencies_and_weights() -> None:
    stream = FakeStream(num_envs=2, steps=13, stack=4, seed=11)
    alpha, beta, eps = 0.7, 0.5, 1e-6
    buf = make_replay(
        stream,
        capacity=2 * 64,
        n=1,
        life_loss=False,
        prioritized=True,
        alpha=alpha,
        priority_eps=eps,
    )
    feed(buf, stream, [5])
    np.random.seed(0)  # TorchRL's sampler draws with numpy
    index = torch.unique(buf.sample(2000)["index"])
    assert index.numel() == len(buf)
    priority = torch.linspace(0.1, 3.0, index.numel())
    buf.update_priority(index, priority)
    mass = (priority.double() + eps) ** alpha
    prob = mass / mass.sum()
    draws = 40_000
    counts = torch.zeros(index.numel())
    for _ in range(10):
        td = buf.sample(draws // 10, beta=beta)
        counts += (td["index"][:, None] == index[None]).sum(0)
        where = (td["index"][:, None] == index[None]).float().argmax(1)
        weight = (index.numel() * prob[where]) ** -beta / (index.numel() * prob.min()) ** -beta
        torch.testing.assert_close(td["_weight"].double(), weight, rtol=1e-5, atol=1e-6)
    expected = prob * draws
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 60.0  # dof = N - 1 ~ 23: p ~ 5e-5 under the null
    assert ((counts - expected).abs() < 5 * expected.sqrt() + 5).all()


def test_memmap_resume_same_data(tmp_path) -> None:
    stream = FakeStream(num_envs=3, steps=70, stack=4, seed=5)
    buf = make_replay(stream, capacity=3 * 50, n=3, life_loss=True, storage_dir=str(tmp_path))
    feed(buf, stream, [10, 25, 40, 55])
    assert (tmp_path / "entries" / "frame.memmap").exists()
    buffer = io.BytesIO()
    torch.save(buf.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)
    assert state["entries"] is None  # frames stay in the folder

    resumed = make_replay(stream, capacity=3 * 50, n=3, life_loss=True, storage_dir=str(tmp_path))
    resumed.load_state_dict(state)
    assert len(resumed) == len(buf)
    np.random.seed(1)
    a = buf.sample(256)
    np.random.seed(1)
    b = resumed.sample(256)
    assert (a == b).all()


def test_memmap_resume_after_more_writes_drops_overwritten(tmp_path) -> None:
    stream = FakeStream(num_envs=3, steps=50, stack=4, seed=9)
    ring = 50
    buf = make_replay(stream, capacity=3 * ring, n=1, life_loss=False, storage_dir=str(tmp_path))
    buf.extend(stream.batch(0, 15))
    buf.extend(stream.batch(15, 30))
    state = buf.state_dict()
    buf.extend(stream.batch(30, 50))  # the run went on after its checkpoint, then stopped
    resumed = make_replay(
        stream, capacity=3 * ring, n=1, life_loss=False, storage_dir=str(tmp_path)
    )
    resumed.load_state_dict(state)
    # Left: transitions of the first 30 steps whose frames the last 20 steps did not overwrite.
    expected = {
        (e, t)
        for e in range(3)
        for t in range(30)
        if stream.ready(e, t, 1, 30) and stream.entry(e, t) >= stream.entry(e, 50) - ring + 3
    }
    assert 0 < len(expected) < state["num_valid"]
    assert len(resumed) == len(expected)
    assert check_samples(resumed, stream, 1, False) == expected


def test_ram_state_round_trip() -> None:
    stream = FakeStream(num_envs=2, steps=40, stack=1, seed=2)
    buf = make_replay(stream, capacity=2 * 60, n=3, life_loss=False, prioritized=True)
    feed(buf, stream, [20])
    buf.update_priority(buf.sample(8)["index"], torch.full((8,), 5.0))
    resumed = make_replay(stream, capacity=2 * 60, n=3, life_loss=False, prioritized=True)
    saved = io.BytesIO()
    torch.save(buf.state_dict(), saved)
    saved.seek(0)
    resumed.load_state_dict(torch.load(saved, weights_only=False))
    np.random.seed(3)
    a = buf.sample(64)
    np.random.seed(3)
    assert (a == resumed.sample(64)).all()


def test_atari_bytes_per_transition() -> None:
    capacity, num_envs, steps = 10_000, 4, 16
    buf = FrameReplay(
        capacity=capacity,
        num_envs=num_envs,
        obs_key="pixels",
        obs_shape=(4, 84, 84),
        stack=4,
        gamma=0.99,
    )
    frames = torch.zeros(num_envs, steps, 1, 84, 84, dtype=torch.uint8).expand(-1, -1, 4, -1, -1)
    flag = torch.zeros(num_envs, steps, 1, dtype=torch.bool)
    batch = TensorDict(
        {
            "pixels": frames,
            "action": torch.zeros(num_envs, steps, dtype=torch.int64),
            "next": {
                "pixels": frames,
                "reward": torch.zeros(num_envs, steps, 1),
                "done": flag,
                "terminated": flag,
            },
        },
        batch_size=[num_envs, steps],
    )
    buf.extend(batch)
    nbytes = sum(v.nbytes for v in buf.storage.values())
    assert nbytes / capacity < 7.5e3
    assert nbytes / capacity * 1e6 < 7.5e9


def rollout(game: str, steps: int) -> TensorDict:
    """A random-policy rollout ``[4, steps]`` of ``game`` through accelrl's env factory."""
    from accelrl.config import EnvConfig
    from accelrl.envs import make_env

    env = make_env(EnvConfig(game=game, num_envs=4, sticky_actions=0.0), seed=0)
    torch.manual_seed(0)
    try:
        return env.rollout(steps, break_when_any_done=False)
    finally:
        env.close()


def assert_rebuilds_rollout(td: TensorDict, obs_key: str, stack: int) -> set:
    """Feed ``td`` in chunks (n_step 1); every sample must equal a transition the env emitted,
    and all of them must come up. Returns the (obs, next obs) byte pairs sampled."""
    num_envs, steps = td.batch_size
    done = td["next", "done"].squeeze(-1)
    buf = FrameReplay(
        capacity=num_envs * 1000,
        n_step=1,
        num_envs=num_envs,
        obs_key=obs_key,
        obs_shape=tuple(td[obs_key].shape[2:]),
        stack=stack,
        gamma=0.99,
    )
    for t0 in range(0, steps, 100):
        buf.extend(td[:, t0 : t0 + 100])
    # Index the env's transitions by their bytes: each sample must equal one of them.
    obs_all, next_all = td[obs_key].numpy(), td["next", obs_key].numpy()
    action, reward = td["action"].numpy(), td["next", "reward"].squeeze(-1).numpy()
    stored = [(e, t) for e in range(num_envs) for t in range(steps) if t < steps - 1 or done[e, t]]
    real: dict[tuple[bytes, bytes], set] = {}
    for e, t in stored:
        key = (obs_all[e, t].tobytes(), next_all[e, t].tobytes())
        real.setdefault(key, set()).add((int(action[e, t]), float(reward[e, t]), bool(done[e, t])))
    assert len(buf) == len(stored)
    seen = set()
    np.random.seed(0)
    for _ in range(25):
        sample = buf.sample(1024)
        obs, nxt = sample[obs_key].numpy(), sample["next", obs_key].numpy()
        facts = zip(
            sample["action"].tolist(),
            sample["next", "reward"].squeeze(-1).tolist(),
            sample["next", "done"].squeeze(-1).tolist(),
            strict=True,
        )
        for b, fact in enumerate(facts):
            key = (obs[b].tobytes(), nxt[b].tobytes())
            assert key in real, "sampled observations differ from every pair the env emitted"
            assert fact in real[key]
            seen.add(key)
    assert seen == set(real)
    # Steps at episode ends and right after resets were among them.
    ends = done.nonzero().tolist()
    assert any(t + 1 < steps - 1 for _, t in ends)
    for e, t in ends + [(e, t + 1) for e, t in ends if t + 1 < steps - 1]:
        assert (obs_all[e, t].tobytes(), next_all[e, t].tobytes()) in seen
    return seen


def test_breakout_frames_rebuilt_exactly() -> None:
    td = rollout("Breakout", 400)
    assert td["next", "life_lost"].any()
    # ale-py pads the first stacks of an episode with zero frames.
    first = td["pixels"][:, 0]
    assert (first[:, :3] == 0).all() and (first[:, 3] != 0).any()
    assert_rebuilds_rollout(td, "pixels", stack=4)


def test_vector_observations_stored_whole() -> None:
    assert_rebuilds_rollout(rollout("CartPole-v1", 150), "observation", stack=1)


def test_env_steps_and_samples_name_their_device() -> None:
    """The env's step TensorDicts and the replay's samples carry their device: ``td.to(d)``
    returns a TensorDict already on ``d`` at once but visits every leaf of a device-less one,
    which TorchRL's collector does once per step and the DQN loss once per gradient step
    (~120 us each; a sixth of a CartPole gradient step)."""
    td = rollout("CartPole-v1", 40)
    assert td.device == torch.device("cpu") and td["next"].device == torch.device("cpu")
    buf = FrameReplay(
        capacity=400, num_envs=4, obs_key="observation", obs_shape=(4,), stack=1, gamma=0.99
    )
    buf.extend(td)
    sample = buf.sample(8)
    assert sample.device == torch.device("cpu") and sample["next"].device == torch.device("cpu")
    assert sample.to("cpu") is sample


def test_lean_prioritized_draws_and_priority_writes_match_torchrls_sampler(monkeypatch) -> None:
    """``MaskedPrioritizedSampler`` draws and writes priorities in NumPy; TorchRL's own
    ``PrioritizedSampler`` given the same priorities (duplicate slots included) and the same
    NumPy seed must hold the same trees and maximum, and draw the same slots with the same
    importance weights."""
    from torchrl.data import LazyTensorStorage, PrioritizedSampler

    from accelrl.compat import priority_state, segment_trees
    from accelrl.replay.sampler import MaskedPrioritizedSampler

    size, alpha, beta, eps = 64, 0.6, 0.4, 1e-6
    kwargs = dict(alpha=alpha, beta=beta, eps=eps, dtype=torch.float64)
    lean, torchrl = MaskedPrioritizedSampler(size, **kwargs), PrioritizedSampler(size, **kwargs)
    storage = LazyTensorStorage(size)
    storage.set(torch.arange(size), TensorDict({"x": torch.zeros(size)}, batch_size=[size]))
    rng = np.random.default_rng(3)
    for _ in range(5):
        slots = rng.integers(0, size, 24)  # with repeats: the last write of a slot wins
        priority = rng.exponential(2.0, 24)
        lean.set_priority(slots, priority)
        torchrl.update_priority(torch.from_numpy(slots), torch.from_numpy(priority))
    lean.disable(np.array([3, 4]))  # zero mass: the draw must step off them
    sum_tree, min_tree = segment_trees(torchrl)
    sum_tree[np.array([3, 4])] = np.zeros(2)
    min_tree[np.array([3, 4])] = np.full(2, min_tree.identity_element)
    for a, b in zip(segment_trees(lean), segment_trees(torchrl), strict=True):
        np.testing.assert_allclose(a[np.arange(size)], b[np.arange(size)], rtol=1e-14)
    top, _ = priority_state(lean)[1]
    assert float(top) == pytest.approx(float(priority_state(torchrl)[1][0]), rel=1e-15)
    np.random.seed(5)
    index, info = lean.sample(storage, 500)
    np.random.seed(5)
    want_index, want_info = torchrl.sample(storage, 500)
    assert torch.equal(index, torch.as_tensor(want_index))
    assert not set(index.tolist()) & {3, 4}
    torch.testing.assert_close(
        info["priority_weight"], want_info["priority_weight"], rtol=1e-12, atol=0
    )
    # Draws exactly on the boundary before the zero-mass slots 3 and 4 (the tree's prefix sum up
    # to slot 3): both step left onto the last slot with mass.
    boundary = float(sum(segment_trees(torchrl)[0][np.arange(3)]))
    monkeypatch.setattr(np.random, "uniform", lambda low, high, size: np.full(size, boundary))
    index, _ = lean.sample(storage, 4)
    want_index, _ = torchrl.sample(storage, 4)
    assert torch.equal(index, torch.as_tensor(want_index))
