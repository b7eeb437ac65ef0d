"""PQN on Atari (Gallici et al. 2025): Q-learning from many simulators, no replay, no target.

    python recipes/pqn_atari.py                          # Pong, 10M frames, 32 envs x 32 steps
    python recipes/pqn_atari.py --env.game Breakout --env.num-envs 128 \
        --collector.steps-per-batch 4096 --pqn.minibatches 16   # the paper's 128 simulators
    python recipes/pqn_atari.py --env.game MinAtar/Breakout     # the MinAtar CNN, 1 frame a step
    python recipes/pqn_atari.py --help                   # every knob

The algorithm (``accelrl.algos.catalog``, record ``pqn``):
    agent    a Q-network with a LayerNorm before every ReLU (Nature CNN on frames, MinAtar
             CNN, MLP on vectors) in TorchRL's QValueActor; epsilon-greedy acting; Q(lambda)
             targets through TorchRL's TD(lambda) with max_a Q(s', a); MSE; RAdam
    loop     (accelrl.loops.on_policy) per batch of 1024 agent steps (32 envs x 32):
             1. collect epsilon-greedily, one batched forward pass acting for all simulators
             2. Q(lambda) targets over the batch, from the same network (no target network)
             3. epochs x minibatches of MSE steps on Q(s, a) (4 x 4)
             4. epsilon and the learning rate for the next batch; the new weights to the
                actors; log; evaluation, video, checkpoint when due

Import it to reuse: ``from recipes.pqn_atari import Config, train``.
"""

from __future__ import annotations

from accelrl import loops
from accelrl.algos.catalog import PQN_ALGORITHM as ALGORITHM
from accelrl.algos.catalog import PQNRunConfig as Config
from accelrl.cli import run_recipe

__all__ = ["ALGORITHM", "Config", "train"]


def train(cfg: Config) -> dict:
    """Train PQN; returns final frames, updates, episodes, mean return of the last 100, frames/s."""
    return loops.train(cfg, ALGORITHM)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
