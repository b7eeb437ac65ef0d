"""A2C on Atari (Mnih et al. 2016, synchronous), batched as in Stooke & Abbeel (2018).

    python recipes/a2c_atari.py                        # Pong, 10M frames, 16 envs x 5 steps
    python recipes/a2c_atari.py --env.num-envs 64 --collector.steps-per-batch 320 --a2c.lr 2.8e-3
    python recipes/a2c_atari.py --collector.kind async --collector.num-workers 2   # A3C-style
    python recipes/a2c_atari.py --help                 # every knob

Import it to reuse: ``from recipes.a2c_atari import Config, train``.

The algorithm (``accelrl.algos.catalog``, record ``a2c``):
    agent    TorchRL's ActorValueOperator (PPO's actor-critic); A2CLoss; n-step returns
             through TorchRL's GAE at lambda 1 (or GAE); Adam (or RMSprop)
    loop     (accelrl.loops.on_policy) per batch of 80 agent steps (16 envs x 5):
             1. collect: every simulator steps, one batched forward pass acting for all
             2. n-step returns (or GAE) over the batch
             3. one gradient step on all of it
             4. the new weights to the actors; log; evaluation, video, checkpoint when due
"""

from __future__ import annotations

from functools import partial

from accelrl import loops
from accelrl.algos.catalog import A2C_ALGORITHM as ALGORITHM
from accelrl.algos.catalog import A2CRunConfig as Config
from accelrl.cli import run_recipe

# train(cfg) -> the run's summary: frames, updates, episodes, mean return of the last 100,
# frames/s (accelrl.loops.train with this recipe's algorithm)
train = partial(loops.train, algorithm=ALGORITHM)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
