"""PPO on Atari (Schulman et al. 2017), batched as in Stooke & Abbeel (2018).

    python recipes/ppo_atari.py                        # Pong, 10M frames
    python recipes/ppo_atari.py --env.game Breakout --env.num-envs 16 --collector.num-workers 2
    python recipes/ppo_atari.py --env.game MinAtar/Breakout   # the MinAtar CNN, 1 frame a step
    python recipes/ppo_atari.py --help                 # every knob

The algorithm (``accelrl.algos.catalog``, record ``ppo``):
    agent    TorchRL's ActorValueOperator: one trunk shared by the policy and value heads,
             chosen by the observation (Nature CNN on frames, MinAtar CNN, MLPs on vectors;
             --model.recurrent lstm puts an LSTM after it); ClipPPOLoss and GAE; Adam
    loop     (accelrl.loops.on_policy) per batch of 1024 agent steps (8 envs x 128):
             1. collect: every simulator steps, one batched forward pass acting for all
             2. GAE advantages over the batch
             3. epochs x minibatches of clipped policy / value steps (4 x 4)
             4. the new weights to the actors; log; evaluation, video, checkpoint when due

Import it to reuse: ``from recipes.ppo_atari import Config, train``.
"""

from __future__ import annotations

from accelrl import loops
from accelrl.algos.catalog import PPO_ALGORITHM as ALGORITHM
from accelrl.algos.catalog import PPORunConfig as Config
from accelrl.cli import run_recipe

__all__ = ["ALGORITHM", "Config", "train"]


def train(cfg: Config) -> dict:
    """Train PPO; returns final frames, updates, episodes, mean return of the last 100, frames/s."""
    return loops.train(cfg, ALGORITHM)


if __name__ == "__main__":
    run_recipe(Config, train, description=__doc__)
