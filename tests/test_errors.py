"""Every failure that ends a run is a ``RunFailure``: one line on stderr with where the run stood,
exit code 3, whichever part of accelrl raised it."""

from __future__ import annotations

import pytest

from accelrl.algos.common import NonFiniteError
from accelrl.cli import run_recipe
from accelrl.collectors import CollectorFailure
from accelrl.distributed import PeerLost
from accelrl.errors import RunFailure
from accelrl.replay.feeder import FeederError
from accelrl.run.checkpoint import CheckpointError
from recipes.ppo_atari import Config

FAILURES = [NonFiniteError, CheckpointError, CollectorFailure, PeerLost, FeederError]


@pytest.mark.parametrize("kind", FAILURES, ids=[k.__name__ for k in FAILURES])
def test_a_run_failure_ends_the_command_with_one_line_and_where_the_run_stood(kind, capsys):
    assert issubclass(kind, RunFailure)

    def train(cfg: Config) -> dict:
        err = kind("the collector thread failed: boom")
        err.where = " at 4096 frames, update 5; latest checkpoint: ckpt_000000002048.pt"
        raise err

    with pytest.raises(SystemExit) as stop:
        run_recipe(Config, train, description="", argv=["--env.game", "CartPole-v1"])
    assert stop.value.code == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "accelrl: error: the collector thread failed: boom at 4096 frames, update 5; "
        "latest checkpoint: ckpt_000000002048.pt"
    ]
