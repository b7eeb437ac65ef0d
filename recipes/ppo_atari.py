"""PPO on Atari (Schulman et al. 2017), batched as in Stooke & Abbeel (2018).

    python recipes/ppo_atari.py                        # Pong, 10M frames
    python recipes/ppo_atari.py --env.game Breakout --env.num-envs 16 --collector.num-workers 2
    python recipes/ppo_atari.py --env.game MinAtar/Breakout   # the MinAtar CNN, 1 frame a step
    python recipes/ppo_atari.py --help                 # every knob

Import it to reuse: ``from recipes.ppo_atari import Config, train``.

The algorithm (``accelrl.algos.catalog``, record ``ppo``):
    agent    TorchRL's ActorValueOperator: one trunk shared by the policy and value heads,
             chosen by the observation (Nature CNN on frames, MinAtar CNN, MLPs on vectors;
             --model.recurrent lstm or gru puts a recurrent core after it); ClipPPOLoss,
             GAE, Adam
    loop     (accelrl.loops.on_policy) per batch of 1024 agent steps (8 envs x 128):
             1. collect: every simulator steps, one batched forward pass acting for all
             2. GAE advantages over the batch
             3. epochs x minibatches of clipped policy / value steps (4 x 4)
             4. the new weights to the actors; log; evaluation, video, checkpoint when due
"""

from __future__ import annotations

from functools import partial

from accelrl import loops
from accelrl.algos.catalog import PPO_ALGORITHM as ALGORITHM
from accelrl.algos.catalog import PPORunConfig as Config
from accelrl.cli import run_recipe

# train(cfg) -> the run's summary: frames, updates, episodes, mean return of the last 100,
# frames/s (accelrl.loops.train with this recipe's algorithm)
train = partial(loops.train, algorithm=ALGORITHM)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
