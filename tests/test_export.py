"""``python -m accelrl.tools.export``: the exported greedy policy (torch.export program and ONNX)
picks the same actions as the PyTorch policy it came from, for an actor-critic on frames and for a
C51 + dueling Q-network and PQN's LayerNorm Q-network on vector observations, at a batch size
other than the one traced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from accelrl.tools.export import example_input, greedy_module, save_module
from accelrl.tools.play import PlayConfig, load_agent

REPO = Path(__file__).resolve().parents[1]
QUIET = ["--log.eval-episodes", "0", "--log.no-tensorboard", "--log.no-progress"]

RUNS = {
    "ppo-pong": ("ppo_atari", [
        "--env.game", "Pong", "--env.num-envs", "2", "--collector.steps-per-batch", "64",
        "--ppo.minibatches", "2", "--ppo.epochs", "1", "--total-frames", "512",
    ]),
    "c51-dueling-cartpole": ("dqn_atari", [
        "--env.game", "CartPole-v1", "--env.num-envs", "4", "--collector.steps-per-batch", "64",
        "--dqn.learning-starts-frames", "128", "--dqn.distributional", "--dqn.dueling",
        "--dqn.v-min", "0", "--dqn.v-max", "100", "--total-frames", "512",
    ]),
    "pqn-cartpole": ("pqn_atari", [
        "--env.game", "CartPole-v1", "--env.num-envs", "4", "--collector.steps-per-batch", "64",
        "--pqn.minibatches", "2", "--pqn.epochs", "1", "--total-frames", "256",
    ]),
}  # fmt: skip


@pytest.fixture(scope="module", params=list(RUNS))
def run(request, tmp_path_factory) -> Path:
    recipe, flags = RUNS[request.param]
    folder = tmp_path_factory.mktemp("export") / request.param
    cmd = [sys.executable, str(REPO / "recipes" / f"{recipe}.py"), *flags, *QUIET,
           "--run-dir", str(folder)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return folder


def observations(loaded, batch: int = 16) -> tuple[str, torch.Tensor]:
    if loaded.run_cfg.env.game == "Pong":
        return "pixels", torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
    # CartPole-like states, spread widely enough that the greedy action varies.
    return "observation", torch.randn(batch, 4) * torch.tensor([1.0, 1.0, 0.1, 1.0])


def reference_actions(loaded, key: str, obs: torch.Tensor) -> torch.Tensor:
    td = TensorDict({key: obs}, batch_size=[obs.shape[0]])
    with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
        return loaded.policy(td).get("action").reshape(-1)


def varied(run: Path):
    """The run's agent with its weights redrawn at a large scale, so that the greedy action
    differs across observations (a barely trained agent picks one action everywhere, and an
    export that returned a constant would pass). LayerNorms (PQN's) keep their scale and shift:
    redrawn, a near-zero scale leaves every observation's features alike, and the action that
    the head's bias favours wins everywhere."""
    loaded = load_agent(PlayConfig(run_dir=str(run)))
    torch.manual_seed(0)
    with torch.no_grad():
        for module in loaded.policy.modules():
            if not isinstance(module, torch.nn.LayerNorm):
                for p in module.parameters(recurse=False):
                    p.normal_(0.0, 0.5)
    return loaded


@pytest.mark.parametrize("suffix", [".pt2", ".onnx"])
def test_exported_model_acts_like_the_policy(run, tmp_path, suffix):
    if suffix == ".onnx":
        ort = pytest.importorskip("onnxruntime")
        pytest.importorskip("onnxscript")
    loaded = varied(run)
    key, obs = observations(loaded, batch=64)  # traced at batch 2
    expected = reference_actions(loaded, key, obs)
    assert len(set(expected.tolist())) > 1, "the check needs actions that differ"
    out = tmp_path / f"policy{suffix}"
    save_module(greedy_module(loaded.agent), example_input(loaded.run_cfg), out)
    if suffix == ".pt2":
        actions = torch.export.load(out).module()(obs)
    else:
        onnx_model = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        (actions,) = onnx_model.run(None, {onnx_model.get_inputs()[0].name: obs.numpy()})
        actions = torch.from_numpy(actions)
    assert actions.dtype == torch.int64 and actions.shape == (64,)
    assert torch.equal(actions, expected)


def test_export_command_writes_the_trained_policy(run, tmp_path):
    out = tmp_path / "policy.pt2"
    cmd = [sys.executable, "-m", "accelrl.tools.export", str(run), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith(f"to {out}")
    loaded = load_agent(PlayConfig(run_dir=str(run)))
    key, obs = observations(loaded)
    assert torch.equal(torch.export.load(out).module()(obs), reference_actions(loaded, key, obs))


def test_export_refuses_an_unknown_format(run, tmp_path):
    cmd = [sys.executable, "-m", "accelrl.tools.export", str(run), str(tmp_path / "policy.zip")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("the output must end in .pt2 (torch.export) or .onnx")
