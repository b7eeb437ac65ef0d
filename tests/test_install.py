"""The installed stack is the one accelrl is built for."""

import torch
import torchrl


def test_torch_and_torchrl_versions_match():
    assert torch.__version__.startswith("2.14"), torch.__version__
    assert torchrl.__version__.startswith("0.14"), torchrl.__version__


def test_torchrl_compiled_extension_loads():
    # With a mismatched torch (e.g. 2.13) the extension fails to load and prioritized replay
    # raises "SumSegmentTreeFp32 is not available" only when first used.
    from tensordict import TensorDict
    from torchrl._torchrl import SumSegmentTreeFp32  # noqa: F401
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(16), sampler=PrioritizedSampler(16, alpha=0.6, beta=0.4)
    )
    rb.extend(TensorDict({"x": torch.arange(16.0)}, [16]))
    assert rb.sample(8)["x"].shape == (8,)


def test_ale_ships_roms():
    from accelrl.envs import available_games

    assert {"pong", "breakout", "space_invaders"} <= set(available_games())


def test_version_matches_pyproject():
    import re
    from pathlib import Path

    import accelrl

    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    (version,) = re.findall(r'^version\s*=\s*"([^"]+)"', project, flags=re.MULTILINE)
    assert accelrl.__version__ == version
