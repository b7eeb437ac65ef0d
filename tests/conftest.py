import os
import shutil
import subprocess

import pytest
import torch

from tests.helpers import TEST_THREADS

# Tests share 2 cores with ALE's threads and collector workers: one torch thread avoids
# OpenMP barrier stalls (see accelrl.collectors.plan_threads). ACCELRL_TEST_THREADS=2 runs them
# with two (tests/under_kernels.sh does, to show no result depends on the thread count).
torch.set_num_threads(TEST_THREADS)

START_CLUSTER = "bash slurm/testing/local_cluster.sh start"


def _slurm_down_reason() -> str | None:
    """None when a SLURM controller answers `scontrol ping`, else why not."""
    if shutil.which("scontrol") is None:
        return "scontrol not on PATH"
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"scontrol ping failed: {err}"
    if "is UP" in out.stdout:
        return None
    lines = (out.stdout + out.stderr).strip().splitlines()
    return lines[0] if lines else f"scontrol ping exited with {out.returncode}"


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A SLURM cluster that accepts jobs; tests marked `slurm` get it automatically.

    Without one the test is skipped, or fails when ACCELRL_REQUIRE_SLURM=1 (CI sets it, so that
    a cluster that went away cannot turn the SLURM tests into silent skips).
    """
    reason = _slurm_down_reason()
    if reason is None:
        return
    message = f"no SLURM cluster: run {START_CLUSTER} ({reason})"
    if os.environ.get("ACCELRL_REQUIRE_SLURM") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def _slurm_marker_needs_cluster(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("slurm_cluster")


# The files whose tests took longest in CI's full run (2-core Zen 1, 2026-12-05, in seconds):
# the DQN variants (800), test_slurm_launch.py with a cluster (about 600), test_async.py (535),
# DQN against its plain loop's figures (527), the benchmark suite's quick run (473) and the LSTM
# memory test (434).
LONGEST_FIRST = [
    "test_dqn_variants_learning.py",
    "test_slurm_launch.py",
    "test_async.py",
    "test_dqn_learning.py",
    "test_benchmarks.py",
    "test_recurrent_learning.py",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files that hold slow tests run first, each file kept in one piece, so that one long file
    does not run alone at the end. In one process that is the order of the run. Under
    pytest-xdist with ``--dist loadfile`` (as CI runs, ``-n 2``) a worker takes a whole file at
    a time, but pytest-xdist (3.8 here) hands the files out by their number of tests, most
    first, unless ``--no-loadscope-reorder`` is given (the README's command and CI give it): only
    then do the long files start at once with the short ones filling in around them. The
    longest files (``LONGEST_FIRST``) go first of all, so that neither worker starts one of them
    late and runs it alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def rank(item: pytest.Item) -> tuple[int, bool]:
        name = item.path.name
        first = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
        return first, item.path not in slow_files

    items.sort(key=rank)
