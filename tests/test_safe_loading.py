"""Loading a checkpoint runs no code: files are read with ``torch.load(weights_only=True)``;
a crafted pickle is refused with one line naming ``--trust-checkpoint``, and its payload never
runs. A checkpoint that holds other Python objects loads behind ``--trust-checkpoint``. (That
every recipe's own checkpoints pass the safe load is shown by ``test_resume_state.py``, whose
resumes go through it.)"""

from __future__ import annotations

import fractions
import pathlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accelrl.run.checkpoint import (
    UnsafeCheckpoint,
    capture_rng,
    list_checkpoints,
    load_latest,
    save_checkpoint,
)

REPO = Path(__file__).resolve().parents[1]


class Payload:
    """Unpickling this creates ``marker``: a stand-in for arbitrary code in a shared file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def plant(run_dir: Path, marker: Path, frames: int) -> Path:
    """Write a checkpoint file that carries a payload next to real-looking contents."""
    path = run_dir / "checkpoints" / f"ckpt_{frames:012d}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"frames": frames, "algo": "ppo", "x": Payload(marker)}, path)
    return path


def test_capture_rng_saves_only_what_a_safe_load_reads(tmp_path):
    path = save_checkpoint(tmp_path, {"rng": capture_rng(), "w": torch.ones(2)}, 5)
    state = torch.load(path, weights_only=True)  # raises on any other Python object
    assert state["frames"] == 5 and isinstance(state["rng"]["numpy"]["key"], torch.Tensor)


def test_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "payload_ran"
    save_checkpoint(tmp_path, {"w": torch.ones(1)}, 10)
    bad = plant(tmp_path, marker, 20)
    with pytest.raises(UnsafeCheckpoint) as err:
        load_latest(tmp_path)
    message = str(err.value)
    assert "\n" not in message and str(bad) in message and "--trust-checkpoint" in message
    assert "holds Python objects" in message and "(getattr)" in message  # the refused global
    assert not marker.exists()
    # Not mistaken for a corrupt file: the older checkpoint is not silently used instead.
    assert [p.name for p in list_checkpoints(tmp_path)][-1] == bad.name
    # The danger is real: a full unpickle (what --trust-checkpoint asks for) runs the payload.
    state, path = load_latest(tmp_path, trust=True)
    assert marker.exists() and path == bad


CARTPOLE = [
    "--env.game", "CartPole-v1", "--env.num-envs", "4", "--collector.steps-per-batch", "64",
    "--ppo.minibatches", "2", "--ppo.epochs", "1", "--log.eval-episodes", "0",
    "--log.no-tensorboard", "--log.no-progress",
]  # fmt: skip


def recipe(run: Path, frames: int, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "recipes" / "ppo_atari.py"), *CARTPOLE,
           "--total-frames", str(frames), "--run-dir", str(run), *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)


@pytest.mark.slow
def test_resume_refuses_a_crafted_checkpoint_and_trusts_one_on_request(tmp_path):
    run = tmp_path / "run"
    assert recipe(run, 512).returncode == 0
    (good,) = list_checkpoints(run)

    # A crafted file as the newest checkpoint: exit 2, one line, payload not run.
    marker = tmp_path / "payload_ran"
    crafted = plant(run, marker, 768)
    out = recipe(run, 1024, "--resume")
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("accelrl: error: invalid --trust-checkpoint=False:"), last
    assert str(crafted) in last and not marker.exists()
    crafted.unlink()

    # A checkpoint that holds another Python object (harmless here: a Fraction): refused by
    # default, resumed with --trust-checkpoint.
    state = torch.load(good, weights_only=True)
    state["note"] = fractions.Fraction(1, 3)
    torch.save(state, good)
    refused = recipe(run, 1024, "--resume")
    assert refused.returncode == 2 and "Fraction" in refused.stderr.strip().splitlines()[-1]
    trusted = recipe(run, 1024, "--resume", "--trust-checkpoint")
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    assert [p.name for p in list_checkpoints(run)][-1] == "ckpt_000000001024.pt"
