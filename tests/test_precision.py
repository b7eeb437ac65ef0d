"""``--precision.*``: refused combinations, what ``auto`` chooses, fp16's loss scaling, and
checkpoints that do not depend on the precision that wrote or reads them."""

from __future__ import annotations

import io
import logging

import pytest
import torch

from accelrl import precision
from accelrl.algos.common import NonFiniteGuard, gradient_step
from accelrl.config import PrecisionConfig
from accelrl.errors import ConfigError
from recipes import a2c_atari, dqn_atari, ppo_atari
from tests import plain_parity

FRAMES = {**plain_parity.SPEC, "num_actions": 4}


def test_fp16_on_a_cpu_learner_is_refused_before_anything_starts():
    cfg = ppo_atari.Config(device="cpu", precision=PrecisionConfig(learner="fp16"))
    with pytest.raises(ConfigError, match=r"precision.learner='fp16': needs a CUDA learner"):
        ppo_atari.ALGORITHM.validate(cfg)
    ppo_atari.ALGORITHM.validate(
        ppo_atari.Config(device="cpu", precision=PrecisionConfig(learner="bf16"))
    )


def test_auto_chooses_by_capability_and_network_and_logs_why(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert precision.choose("auto", cpu, conv=True).dtype is torch.bfloat16
    assert precision.choose("auto", cpu, conv=False).dtype is None  # MLPs gain nothing
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert precision.choose("auto", cpu, conv=True).dtype is None  # emulated bf16 is slower
    assert precision.choose("bf16", cpu, conv=False).dtype is torch.bfloat16  # as asked
    # A GPU with native bf16: fp32 all the same (measured slower there for these networks).
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    cuda = torch.device("cuda")
    for acting in (False, True):
        chosen = precision.choose("auto", cuda, conv=True, acting=acting)
        assert chosen.dtype is None and "slower than fp32" in chosen.reason
    assert precision.choose("bf16", cuda, conv=True).dtype is torch.bfloat16  # as asked
    cfg = ppo_atari.Config(device="cpu", precision=PrecisionConfig(learner="auto", actor="auto"))
    plan = precision.plan(cfg, (4, 84, 84), cpu)
    seen: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("accelrl")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        precision.announce(plan)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    (line,) = seen
    assert "learner fp32 (auto: no native bf16 on cpu" in line
    assert "actor fp32 (auto: acting batches on a CPU gained nothing" in line


def test_fp16_loss_scaling_skips_an_overflowing_step_without_stopping_the_run():
    """``gradient_step`` with a scaler (CPU's GradScaler stands in for CUDA's): a step whose
    scaled gradients overflow leaves the weights as they were and halves the scale; the next
    finite step applies; a NaN loss still goes to the guard."""
    layer = torch.nn.Linear(3, 1)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    guard = NonFiniteGuard("stop")
    before = [p.detach().clone() for p in layer.parameters()]
    huge = layer(torch.full((1, 3), 1e35)).sum()  # finite loss, gradient x 2^16 overflows fp32
    gradient_step(opt, huge, list(layer.parameters()), 1.0, guard, scaler)
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters(), strict=True))
    assert scaler.get_scale() == 2.0**15 and guard.skipped == 0
    gradient_step(opt, layer(torch.ones(1, 3)).sum(), list(layer.parameters()), 1.0, guard, scaler)
    assert not torch.equal(before[0], layer.weight)
    with pytest.raises(FloatingPointError, match="loss is nan"):
        nan = layer(torch.full((1, 3), float("nan"))).sum()
        gradient_step(opt, nan, list(layer.parameters()), 1.0, guard, scaler)


def frames_agent(module, learner: str, channels_last: bool):
    cfg = module.Config(precision=PrecisionConfig(learner=learner, channels_last=channels_last))
    if module is dqn_atari:
        cfg.dqn.batch_size = 8
    return module.ALGORITHM.make_agent(cfg, FRAMES, torch.device("cpu"))


def round_trip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def replay_sample(n: int = 8):
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(0)
    frames = lambda: torch.randint(0, 255, (n, 4, 84, 84), dtype=torch.uint8, generator=g)  # noqa: E731
    nxt = {
        "pixels": frames(),
        "reward": torch.randn(n, 1, generator=g),
        "terminated": torch.zeros(n, 1, dtype=torch.bool),
    }
    return TensorDict(
        {"pixels": frames(), "action": torch.randint(0, 4, (n,), generator=g), "next": nxt}, [n]
    )


@pytest.mark.parametrize("module", [ppo_atari, dqn_atari], ids=["ppo", "dqn"])
def test_checkpoints_are_fp32_and_load_across_precisions(module):
    """A learner in bf16 with channels_last weights writes an fp32 checkpoint that an fp32 one
    loads (same values), steps from and writes back, and the bf16 one loads that in turn; the
    exported greedy module computes in fp32 whatever the agent learned in."""
    torch.manual_seed(0)
    bf16 = frames_agent(module, "bf16", channels_last=True)
    fp32 = frames_agent(module, "fp32", channels_last=False)
    conv = next(m for m in bf16.networks()[0].modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    if module is dqn_atari:
        bf16.update(replay_sample())
    state = round_trip(bf16.state_dict())
    floats = [t for t in _tensors(state) if t.is_floating_point()]
    assert floats and all(t.dtype in (torch.float32, torch.float64) for t in floats)
    fp32.load_state_dict(state)
    for a, b in zip(bf16.networks()[0].parameters(), fp32.networks()[0].parameters(), strict=True):
        assert b.dtype == torch.float32 and torch.equal(a, b)
    if module is dqn_atari:
        fp32.update(replay_sample())
    bf16.load_state_dict(round_trip(fp32.state_dict()))
    for a, b in zip(bf16.networks()[0].parameters(), fp32.networks()[0].parameters(), strict=True):
        assert torch.equal(a, b)
    obs = replay_sample().get("pixels")
    exported = bf16.export_module()
    with torch.no_grad():
        assert torch.equal(exported(obs), fp32.export_module()(obs))
        assert all(p.dtype == torch.float32 for p in exported.parameters())


def _tensors(state):
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for value in state.values():
            yield from _tensors(value)
    elif isinstance(state, list | tuple):
        for value in state:
            yield from _tensors(value)


def test_a_run_checkpointed_in_bf16_resumes_in_fp32_and_back(tmp_path):
    """The recipe itself: A2C on CartPole trained with --precision.learner bf16 resumes with
    fp32 (an accepted change, recorded) and then with bf16 again."""
    cfg = a2c_atari.Config(total_frames=800, run_dir=str(tmp_path / "a2c"))
    cfg.env.game = "CartPole-v1"
    cfg.log.progress, cfg.log.tensorboard, cfg.log.eval_episodes = False, False, 0
    cfg.precision.learner = cfg.precision.actor = "bf16"
    assert a2c_atari.train(cfg)["updates"] == 10
    cfg.resume = True
    cfg.precision.learner = cfg.precision.actor = "fp32"
    cfg.total_frames = 1600
    assert a2c_atari.train(cfg)["updates"] == 20
    cfg.precision.learner = "bf16"
    cfg.total_frames = 2400
    assert a2c_atari.train(cfg)["updates"] == 30
    changes = (tmp_path / "a2c" / "config_changes.jsonl").read_text()
    assert "precision.learner" in changes


def test_the_suite_lists_the_whole_recipe_pairs_in_frames_per_second():
    from benchmarks.precision import rows

    results = {
        "ppo recipe: fp32": {"frames_per_s": 1500.0, "reference": "fp32", "speedup": 1.0},
        "ppo recipe: bf16": {"frames_per_s": 2400.0, "reference": "fp32", "speedup": 1.6},
        "ppo update: bf16": {"ms": 250.0, "reference": "fp32", "time_ratio": 0.5, "speedup": 2.0},
    }
    (recipe, update) = sorted(rows(results), key=lambda r: r.what)
    assert (recipe.what, recipe.unit, recipe.rate, recipe.ratio) == (
        "ppo recipe: bf16", "frames/s", 2400.0, 1.6)  # fmt: skip
    assert recipe.ref_rate == pytest.approx(1500.0)
    assert update.unit == "calls/s" and update.rate == pytest.approx(4.0)
