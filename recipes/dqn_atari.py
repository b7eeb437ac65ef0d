"""The DQN family on Atari: DQN, Double, Dueling, n-step, Prioritized, Categorical, eps-Rainbow.

    python recipes/dqn_atari.py                                  # DQN on Pong
    python recipes/dqn_atari.py --dqn.double --dqn.dueling --dqn.n-step 3 --dqn.prioritized
    python recipes/dqn_atari.py --dqn.preset rainbow             # all of them, no noisy nets
    python recipes/dqn_atari.py --dqn.preset cat-dqn-2048        # the paper's large batches
    python recipes/dqn_atari.py --env.game MinAtar/Breakout --dqn.preset minatar  # MinAtar's DQN
    python recipes/dqn_atari.py --help                           # every knob

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

Import it to reuse: ``from recipes.dqn_atari import Config, train``.
"""

from __future__ import annotations

from accelrl import loops
from accelrl.algos.catalog import DQN_ALGORITHM as ALGORITHM
from accelrl.algos.catalog import DQNRunConfig as Config
from accelrl.cli import run_recipe

__all__ = ["ALGORITHM", "Config", "train"]


def train(cfg: Config) -> dict:
    """Train a DQN-family agent; returns final frames, episodes, mean return of the last 100."""
    return loops.train(cfg, ALGORITHM)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
