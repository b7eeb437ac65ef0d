"""The DQN family on Atari: DQN, Double, Dueling, n-step, Prioritized, Categorical, eps-Rainbow.

    python recipes/dqn_atari.py                                  # DQN on Pong
    python recipes/dqn_atari.py --dqn.double --dqn.dueling --dqn.n-step 3 --dqn.prioritized
    python recipes/dqn_atari.py --dqn.preset rainbow             # all of them, no noisy nets
    python recipes/dqn_atari.py --dqn.preset cat-dqn-2048        # the paper's large batches
    python recipes/dqn_atari.py --env.game MinAtar/Breakout --dqn.preset minatar  # MinAtar's DQN
    python recipes/dqn_atari.py --help                           # every knob

Import it to reuse: ``from recipes.dqn_atari import Config, train``.

The algorithm (``accelrl.algos.catalog``, record ``dqn``):
    agent    the Q-network (Nature CNN, MinAtar CNN or MLP trunk; dueling and C51 heads as
             configured) in TorchRL's QValueActor / DistributionalQValueActor, its target
             network, DQNLoss / DistributionalDQNLoss, Adam, epsilon-greedy acting
    loop     (accelrl.loops.replay) per batch of 32 agent steps (8 envs x 4):
             1. collect epsilon-greedily, one batched forward pass acting for all simulators
             2. write the batch to the replay (each frame once; uniform or prioritized)
             3. gradient steps on sampled minibatches at the training intensity (replayed /
                collected samples); the target network copied when due; priorities written
             4. the new weights to the actors; log; evaluation, video, checkpoint when due
"""

from __future__ import annotations

from functools import partial

from accelrl import loops
from accelrl.algos.catalog import DQN_ALGORITHM as ALGORITHM
from accelrl.algos.catalog import DQNRunConfig as Config
from accelrl.cli import run_recipe

# train(cfg) -> the run's summary: frames, updates, episodes, mean return of the last 100,
# frames/s (accelrl.loops.train with this recipe's algorithm)
train = partial(loops.train, algorithm=ALGORITHM)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
