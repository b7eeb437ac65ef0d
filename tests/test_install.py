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


def test_the_wheel_installs_accelrl_recipes_and_slurm_only(tmp_path):
    # benchmarks/ and reference/ run from a checkout: a wheel that held them would put packages
    # with generic names into a user's site-packages. Built from a copy, so that the build's
    # own folders (build/, *.egg-info) stay out of the checkout.
    import shutil
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "src"
    packages = sorted(p.parent.name for p in root.glob("*/__init__.py"))
    assert {"accelrl", "recipes", "slurm", "benchmarks", "reference"} <= set(packages)
    for name in packages:
        shutil.copytree(root / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(root / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(cmd + ["-w", str(tmp_path / "dist"), str(src)], check=True)
    (wheel,) = (tmp_path / "dist").glob("accelrl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"accelrl", "recipes", "slurm"}
    # every subpackage of accelrl (e.g. accelrl/launch) is in it
    inits = {str(p.relative_to(root)) for p in (root / "accelrl").rglob("__init__.py")}
    assert inits <= set(names)
