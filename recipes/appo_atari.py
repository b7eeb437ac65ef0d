"""Asynchronous PPO on Atari: sampling and optimisation at the same time (Stooke & Abbeel 2018).

Worker processes keep stepping their simulators with the weights they hold while the learner
runs PPO epochs on the batch another worker just finished (TorchRL's ``MultiAsyncCollector``).
Batches lag the learner by a few updates: the lag is logged (``async/policy_lag_*``), bounded by
``--collector.max-policy-lag`` and optionally corrected with V-trace (``--appo.vtrace``).

    python recipes/appo_atari.py                               # Pong, 2 workers x 8 envs
    python recipes/appo_atari.py --collector.num-workers 4 --appo.vtrace
    python recipes/appo_atari.py --help                        # every knob

Import it to reuse: ``from recipes.appo_atari import Config, train``.

The algorithm (``accelrl.algos.catalog``, record ``appo``):
    agent    PPO's actor-critic and ClipPPOLoss, with GAE or V-trace targets; Adam
    loop     (accelrl.loops.on_policy) per batch, one worker's 8 envs x 128 steps:
             1. collect: whichever worker's batch is ready while the others keep stepping,
                each step stamped with the version of the weights that took it
             2. drop a batch more than max-policy-lag behind; recompute a lagged batch's values
             3. GAE or V-trace targets, then epochs x minibatches of clipped steps
             4. the new weights to the workers (taken up between batches); log; evaluation,
                video, checkpoint when due
"""

from __future__ import annotations

from functools import partial

from accelrl import loops
from accelrl.algos.catalog import APPO_ALGORITHM as ALGORITHM
from accelrl.algos.catalog import APPORunConfig as Config
from accelrl.cli import run_recipe

# train(cfg) -> the run's summary: frames, updates, episodes, mean return of the last 100,
# frames/s (accelrl.loops.train with this recipe's algorithm)
train = partial(loops.train, algorithm=ALGORITHM)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
